/**
 * One-shot remote actions answered over HTTP rather than relayed: the agent's reload, and a
 * directory listing for the file browser. Each is decided by the access service and audited
 * before it is asked of the agent, as a session is.
 */
import type { Logger } from 'pino';
import { z } from 'zod';
import { isAccessRefusal, refusalCodeOf } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import { MAX_LIST_ENTRIES, type DirectoryListing, type ReloadMode } from '../../shared/protocol.js';
import { normalizeDevicePath, type RemoteRequest } from '../../shared/resources.js';
import { refusalOf, type AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { AgentLocator } from '../agents/locator.js';
import type { AuditService } from '../audit/service.js';
import { DomainError, forbidden, internal, upstreamFailed } from '../errors.js';
import type { RemoteSource } from './live-sessions.js';

/** What a device may answer to a listing: checked, never trusted (names bounded by the filesystem's 255 bytes). */
export const directoryListing = z.object({
  path: z.string().min(1).max(4096),
  entries: z
    .array(
      z.object({
        name: z.string().min(1).max(1024),
        type: z.enum(['file', 'dir', 'symlink', 'other']),
        size: z.number().int().min(0),
        mtime: z.string().max(40),
      }),
    )
    .max(MAX_LIST_ENTRIES),
  truncated: z.boolean(),
}) satisfies z.ZodType<DirectoryListing>;

/** What the one-shot actions use. */
export interface DeviceActionsDeps {
  logger: Logger;
  locator: AgentLocator;
  access: Pick<AccessService, 'decide' | 'copyRoots'>;
  audit: Pick<AuditService, 'recordRemoteStart' | 'recordRemoteEnd'>;
}

function notConnected(deviceId: string): DomainError {
  return new DomainError('not_found', 'device_not_connected', `Device ${deviceId} is not connected to the broker; try again when it is online.`, {
    device_id: deviceId,
  });
}

/** Writes an attempt's start to the audit log before anything else happens, or refuses the attempt (500 `audit_failed`). */
async function auditedStart(deps: DeviceActionsDeps, entry: Parameters<AuditService['recordRemoteStart']>[0]): Promise<number> {
  try {
    return await deps.audit.recordRemoteStart(entry);
  } catch {
    throw internal('audit_failed', 'The attempt could not be written to the audit log, so it was refused. Try again shortly.');
  }
}

/**
 * Restarts the agent's work loop, or with `run` has it run its configuration now without closing
 * its connection or any session (qbee's run-agent): decided as the `reload` action, audited (a run
 * with `options.mode: "run"`), then asked of the agent.
 */
export async function reloadAgent(
  deps: DeviceActionsDeps,
  principal: Principal,
  deviceId: string,
  ip: string,
  source: RemoteSource,
  mode: ReloadMode = 'restart',
): Promise<{ ok: true; device_id: string }> {
  const decision = await deps.access.decide(principal, 'remote-access:connect', deviceId, { action: 'reload' });
  const auditId = await auditedStart(deps, {
    event: 'remote.reload',
    user: principal.user,
    deviceId,
    action: 'reload',
    options: mode === 'run' ? { mode } : {},
    allowed: decision.allowed,
    reason: decision.reason,
    ip,
    source,
    sessionId: principal.sessionId,
  });
  if (!decision.allowed) {
    throw refusalOf(decision, 'remote-access:connect', deviceId);
  }
  const started = Date.now();
  const end = (reason: string, result: 'ended' | 'error' = 'ended') =>
    deps.audit.recordRemoteEnd(auditId, { durationMs: Date.now() - started, bytesIn: 0, bytesOut: 0, reason, result }).catch(() => {});
  if (!deps.locator.isConnected(deviceId)) {
    await end('device not connected', 'error');
    throw notConnected(deviceId);
  }
  try {
    await deps.locator.reload(deviceId, mode);
  } catch (err) {
    await end(`reload failed: ${(err as Error).message}`, 'error');
    throw upstreamFailed('reload_failed', (err as Error).message, { device_id: deviceId });
  }
  await end('acknowledged by the agent');
  return { ok: true, device_id: deviceId };
}

/**
 * Lists a directory on the device for the file browser, through a copy channel (`list`): decided
 * as a download of that directory (the user's copy grant, its direction and paths), audited as a
 * copy (`remote.copy.start|denied` with `op: "list"`, then its end with the bytes of the answer),
 * and checked again on the device after resolving symlinks, as a copy is.
 */
export async function listDirectory(
  deps: DeviceActionsDeps,
  principal: Principal,
  deviceId: string,
  dirPath: string,
  ip: string,
  source: RemoteSource,
): Promise<DirectoryListing> {
  const path = normalizeDevicePath(dirPath) ?? dirPath;
  const request: RemoteRequest = { action: 'copy', direction: 'download', path: dirPath };
  const decision = await deps.access.decide(principal, 'remote-access:connect', deviceId, request);
  const auditId = await auditedStart(deps, {
    event: 'remote.copy',
    user: principal.user,
    deviceId,
    action: 'copy',
    options: { direction: 'download', path: dirPath, op: 'list', ...(path !== dirPath ? { normalized_path: path } : {}) },
    allowed: decision.allowed,
    reason: decision.reason,
    ip,
    source,
    sessionId: principal.sessionId,
  });
  if (!decision.allowed) throw refusalOf(decision, 'remote-access:connect', deviceId);
  const started = Date.now();
  const end = (reason: string, result: 'ended' | 'error' | 'denied', bytesOut = 0) =>
    deps.audit.recordRemoteEnd(auditId, { durationMs: Date.now() - started, bytesIn: 0, bytesOut, reason, result }).catch((err) => {
      deps.logger.error({ err, auditId }, 'end of directory listing not audited');
    });
  if (!deps.locator.isConnected(deviceId)) {
    await end('device not connected', 'error');
    throw notConnected(deviceId);
  }
  const allowed = decision.device ? deps.access.copyRoots(principal, decision.device, request) : undefined;
  let opened: { channel: Channel; info: Record<string, unknown> };
  try {
    opened = await deps.locator.open(deviceId, 'copy', { direction: 'list', path, ...(allowed ? { allowed } : {}) });
  } catch (err) {
    const message = (err as Error).message;
    const code = refusalCodeOf(err);
    const denied = isAccessRefusal(code);
    await end(`refused by the device: ${message}`, denied ? 'denied' : 'error');
    if (denied) throw forbidden(message, { device_id: deviceId, refusal: code });
    if ((err as { code?: string }).code === 'agent_not_connected') throw notConnected(deviceId);
    throw upstreamFailed('device_refused', message, { device_id: deviceId, ...(code ? { refusal: code } : {}) });
  }
  opened.channel.destroy();
  const listing = directoryListing.safeParse(opened.info);
  if (!listing.success) {
    await end('the device answered a malformed listing', 'error');
    throw upstreamFailed('device_refused', 'The device answered a malformed directory listing; update its agent.', { device_id: deviceId });
  }
  const { entries, truncated } = listing.data;
  await end(`listed ${entries.length} entries${truncated ? `, cut at ${entries.length}` : ''}`, 'ended', Buffer.byteLength(JSON.stringify(listing.data)));
  return listing.data;
}
