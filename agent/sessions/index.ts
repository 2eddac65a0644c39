/**
 * Dispatches the channels the broker opens to their session handlers. Each kind of session is
 * loaded when the first of its kind opens (dynamic import): an idle agent loads neither node-pty
 * (consoles) nor the tar code (archive copies) nor the tunnel sockets.
 */
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { ConsoleParams, CopyParams, TunnelParams } from '../../shared/protocol.js';
import type { SessionContext } from './context.js';

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
    case 'console': {
      const { openConsole } = await import('./console.js');
      return openConsole(channel, channel.params as ConsoleParams, ctx);
    }
    case 'tunnel': {
      const params = channel.params as TunnelParams;
      if (params.proto !== 'udp' && params.proto !== 'tcp')
        throw new AgentRefusal('unsupported', `Tunnel protocol ${String(params.proto)} is not supported (tcp or udp).`);
      const { openTcpTunnel, openUdpTunnel } = await import('./tunnel.js');
      return params.proto === 'udp' ? openUdpTunnel(channel, params, ctx) : openTcpTunnel(channel, params, ctx);
    }
    case 'copy': {
      const params = channel.params as CopyParams;
      if (params.direction === 'list') return (await import('./list.js')).openList(channel, params, ctx);
      if (params.direction === 'mkdir') return (await import('./mkdir.js')).openMkdir(channel, params, ctx);
      if (params.direction === 'remove' || params.direction === 'rmdir' || params.direction === 'rename')
        return (await import('./remove-rename.js')).openRemoveRename(channel, params, ctx);
      if (params.format === 'tar.gz') {
        if (params.direction === 'upload') return (await import('./archive.js')).openArchiveUpload(channel, params, ctx);
        if (params.direction === 'download') return (await import('./archive.js')).openArchiveDownload(channel, params, ctx);
      }
      if (params.direction === 'upload') return (await import('./copy.js')).openUpload(channel, params, ctx);
      if (params.direction === 'download') return (await import('./copy.js')).openDownload(channel, params, ctx);
      throw new AgentRefusal('unsupported', `Copy direction ${String(params.direction)} is not upload, download, list, mkdir, remove, rmdir or rename.`);
    }
    default:
      throw new AgentRefusal('unsupported', `${String(channel.kind)} sessions are not supported by this agent.`);
  }
}
