/**
 * Dispatches the channels the broker opens to their session handlers. Each kind of session is
 * loaded when the first of its kind opens (dynamic import): an idle agent loads neither node-pty
 * (consoles) nor the tar code (archive copies) nor the tunnel sockets. The module's promise is kept
 * once asked for: an `import()` per open resolved the specifier again each time (under a loader
 * with hooks, a message to its thread and back), about a tenth of the agent's work per tunnel opened.
 */
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { ConsoleParams, CopyParams, TunnelParams } from '../../shared/protocol.js';
import type { SessionContext } from './context.js';

export { NOT_ALLOWED_PREFIX } from './paths.js';
export type { SessionContext } from './context.js';

/** One dynamic import, made on its first call and answered from then on. */
function once<T>(load: () => Promise<T>): () => Promise<T> {
  let loaded: Promise<T> | undefined;
  return () =>
    (loaded ??= load().catch((err: unknown) => {
      // A failed load (node-pty missing) is tried again at the next open, as before.
      loaded = undefined;
      throw err;
    }));
}

const consoles = once(() => import('./console.js'));
const tunnels = once(() => import('./tunnel.js'));
const lists = once(() => import('./list.js'));
const mkdirs = once(() => import('./mkdir.js'));
const removals = once(() => import('./remove-rename.js'));
const archives = once(() => import('./archive.js'));
const copies = once(() => import('./copy.js'));

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
      const { openConsole } = await consoles();
      return openConsole(channel, channel.params as ConsoleParams, ctx);
    }
    case 'tunnel': {
      const params = channel.params as TunnelParams;
      if (params.proto !== 'udp' && params.proto !== 'tcp')
        throw new AgentRefusal('unsupported', `Tunnel protocol ${String(params.proto)} is not supported (tcp or udp).`);
      const { openTcpTunnel, openUdpTunnel } = await tunnels();
      return params.proto === 'udp' ? openUdpTunnel(channel, params, ctx) : openTcpTunnel(channel, params, ctx);
    }
    case 'copy': {
      const params = channel.params as CopyParams;
      if (params.direction === 'list') return (await lists()).openList(channel, params, ctx);
      if (params.direction === 'mkdir') return (await mkdirs()).openMkdir(channel, params, ctx);
      if (params.direction === 'remove' || params.direction === 'rmdir' || params.direction === 'rename')
        return (await removals()).openRemoveRename(channel, params, ctx);
      if (params.format === 'tar.gz') {
        if (params.direction === 'upload') return (await archives()).openArchiveUpload(channel, params, ctx);
        if (params.direction === 'download') return (await archives()).openArchiveDownload(channel, params, ctx);
      }
      if (params.direction === 'upload') return (await copies()).openUpload(channel, params, ctx);
      if (params.direction === 'download') return (await copies()).openDownload(channel, params, ctx);
      throw new AgentRefusal('unsupported', `Copy direction ${String(params.direction)} is not upload, download, list, mkdir, remove, rmdir or rename.`);
    }
    default:
      throw new AgentRefusal('unsupported', `${String(channel.kind)} sessions are not supported by this agent.`);
  }
}
