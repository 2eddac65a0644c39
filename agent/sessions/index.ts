import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { ConsoleParams, CopyParams, TunnelParams } from '../../shared/protocol.js';
import { openArchiveDownload, openArchiveUpload } from './archive.js';
import { openConsole } from './console.js';
import { openDownload, openUpload } from './copy.js';
import { openList } from './list.js';
import { openMkdir } from './mkdir.js';
import { openRemoveRename } from './remove-rename.js';
import type { SessionContext } from './context.js';
import { openTcpTunnel, openUdpTunnel } from './tunnel.js';

export { NOT_ALLOWED_PREFIX } from './paths.js';
export type { SessionContext } from './context.js';

/**
 * Serves a channel the broker opened: console, tunnel or copy. Resolves with optional info for the
 * broker once the session is set up; throws (with a message for the user) to refuse it.
 *
 * The broker has authorized the session; the agent still re-checks what it can judge better
 * itself: a copy path after resolving symlinks on the device.
 */
export async function handleChannel(channel: Channel, ctx: SessionContext): Promise<Record<string, unknown> | void> {
  switch (channel.kind) {
    case 'console':
      return openConsole(channel, channel.params as ConsoleParams, ctx);
    case 'tunnel': {
      const params = channel.params as TunnelParams;
      if (params.proto === 'udp') return openUdpTunnel(channel, params, ctx);
      if (params.proto === 'tcp') return openTcpTunnel(channel, params, ctx);
      throw new AgentRefusal('unsupported', `Tunnel protocol ${String(params.proto)} is not supported (tcp or udp).`);
    }
    case 'copy': {
      const params = channel.params as CopyParams;
      if (params.direction === 'list') return openList(channel, params, ctx);
      if (params.direction === 'mkdir') return openMkdir(channel, params, ctx);
      if (params.direction === 'remove' || params.direction === 'rmdir' || params.direction === 'rename') return openRemoveRename(channel, params, ctx);
      if (params.format === 'tar.gz') {
        if (params.direction === 'upload') return openArchiveUpload(channel, params, ctx);
        if (params.direction === 'download') return openArchiveDownload(channel, params, ctx);
      }
      if (params.direction === 'upload') return openUpload(channel, params, ctx);
      if (params.direction === 'download') return openDownload(channel, params, ctx);
      throw new AgentRefusal('unsupported', `Copy direction ${String(params.direction)} is not upload, download, list, mkdir, remove, rmdir or rename.`);
    }
    default:
      throw new AgentRefusal('unsupported', `${String(channel.kind)} sessions are not supported by this agent.`);
  }
}
