import type { RecordingListItem } from '../../shared/api-types.js';
import fs from 'node:fs';
import type { Config } from '../environment.js';
import type { RemoteCapabilities } from '../../shared/api-types.js';
import { z } from 'zod';
import { isAccessRefusal, refusalCodeOf } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import { MAX_LIST_ENTRIES, type DirectoryListing, type ReloadMode } from '../../shared/protocol.js';
import { normalizeDevicePath, parseResource, type RemoteRequest } from '../../shared/resources.js';
import { refusalOf, type AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import { presetApplies } from '../access/remote.js';
import type { AuditService } from '../audit/service.js';
import type { Db } from '../db/database.js';
import { ApiError, badRequest, forbidden, notFound } from '../http/errors.js';
import { recordingPath, removeOldRecordings } from './recordings.js';
import { PortmapStore, type Portmap, type PortmapInput } from './portmaps.js';
import { RemoteSessions, type LiveSessionView, type RemoteSessionsDeps, type RemoteSource } from './sessions.js';

/** The newest recorded consoles a recordings listing looks at, at most. */
const RECORDINGS_SCAN = 5000;

/** How often old recordings are looked for. */
const RETENTION_SWEEP_MS = 86_400_000;

/** A live session as GET /remote/sessions answers it. */
export interface RemoteSessionRecord {
  id: string;
  user: { id: string; email: string };
  device: { id: string; name: string };
  kind: LiveSessionView['kind'];
  source: RemoteSource;
  ip: string;
  started_at: string;
  bytes_in: number;
  bytes_out: number;
  /** The caller may end it (their own, or remote-access:manage on its device), for showing the End button. */
  can_end: boolean;
  /** console only: the caller may re-attach to it (their own console, held by this broker), for showing a Re-attach button */
  can_attach?: boolean;
  /** console only: false while its owner's connection is gone and it waits for a re-attach */
  attached?: boolean;
  /** console only: who watches it read-only */
  watchers?: { user: { id: string; email: string }; since: string }[];
  /** console only: the caller may watch it (AccessService.mayWatchRemoteSession), for showing a Watch button */
  can_watch?: boolean;
  /** several brokers: the broker holding it */
  broker?: string;
}
import { TicketStore } from './tickets.js';

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

/** Live sessions held outside the WebSocket endpoints (device web UIs: broker/apps), listed and ended with the others. */
export interface OtherLiveSessions {
  list(): LiveSessionView[];
  /** Ends one; false when it is not one of these. */
  end(id: string, by: { id: string; email: string }): Promise<boolean>;
}

/** What remote access uses: the sessions' collaborators, the access decisions it asks for, and its store. */
export interface RemoteServiceDeps extends RemoteSessionsDeps {
  /** device web UI sessions (broker/apps) */
  others?: OtherLiveSessions;
  /** several brokers: this broker's BROKER_ID (listed sessions name their broker) */
  brokerId?: string;
  config: Pick<Config, 'trustProxy' | 'dataDir' | 'recordingRetentionDays' | 'consoleDetachGraceSeconds'>;
  db: Db;
  access: Pick<
    AccessService,
    | 'decide'
    | 'copyRoots'
    | 'remoteActions'
    | 'consoleUsers'
    | 'requirePresetReader'
    | 'mayReadPreset'
    | 'maySeeRemoteSession'
    | 'mayWatchRemoteSession'
    | 'require'
    | 'consoleRecording'
    | 'copyBrowseRoots'
  >;
  audit: Pick<AuditService, 'recordRemoteStart' | 'recordRemoteEnd' | 'recordRemoteJoin' | 'recordChange'>;
}

/**
 * Remote access: the WebSocket sessions (console, tunnel, copy — see sessions.ts), tickets for
 * browsers, the agent reload, and the port presets. Every attempt is decided by the access
 * service and audited before it starts.
 */
export class RemoteService {
  readonly tickets: TicketStore;
  readonly sessions: RemoteSessions;
  private readonly portmaps: PortmapStore;
  private retentionTimer?: NodeJS.Timeout;

  constructor(private readonly deps: RemoteServiceDeps) {
    this.tickets = new TicketStore(deps.db);
    this.sessions = new RemoteSessions(deps);
    this.portmaps = new PortmapStore(deps.db);
  }

  async init(): Promise<void> {
    this.sessions.init();
    this.removeOldRecordings();
    this.retentionTimer = setInterval(() => this.removeOldRecordings(), RETENTION_SWEEP_MS);
    this.retentionTimer.unref();
  }

  async close(): Promise<void> {
    clearInterval(this.retentionTimer);
    await this.sessions.close();
  }

  /** Removes console recordings older than RECORDING_RETENTION_DAYS (at start and daily). */
  removeOldRecordings(now = Date.now()): number {
    const removed = removeOldRecordings(this.deps.config.dataDir, this.deps.config.recordingRetentionDays, now);
    if (removed > 0) this.deps.logger.info({ removed, days: this.deps.config.recordingRetentionDays }, 'old console recordings removed');
    return removed;
  }

  /**
   * A console's recording (asciicast v2) by its session id, 404 when there is none; for its owner or whoever may manage remote access on its device
   * (`remote-access:manage` there, as for the live session): the console's start entry, whose
   * `recording` option names it, says whose and where. A recording whose start entry is gone
   * (audit retention) is served to a `*` grant of remote-access:manage only. Every read, and every
   * refused one, is an audit entry (`recording.read`); a read that cannot be audited is refused.
   */
  async recording(principal: Principal, sessionId: string, ip: string): Promise<{ stream: fs.ReadStream; size: number }> {
    const file = recordingPath(this.deps.config.dataDir, sessionId);
    const missing = notFound(`Recording of session ${sessionId}`);
    if (!file) throw missing;
    let handle: fs.promises.FileHandle;
    try {
      handle = await fs.promises.open(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    } catch {
      throw missing;
    }
    try {
      // The session id is a UUID (recordingPath checked it): nothing in it is a LIKE wildcard.
      const start = await this.deps.db
        .selectFrom('audit')
        .select(['user_id', 'device_id'])
        .where('event', '=', 'remote.console.start')
        .where('options', 'like', `%"recording":"${sessionId}"%`)
        .orderBy('id')
        .limit(1)
        .executeTakeFirst();
      const owner = start?.user_id ?? '';
      const deviceId = start?.device_id ?? '';
      const allowed = owner === principal.user.id || (await this.deps.access.maySeeRemoteSession(principal, { userId: owner, deviceId }));
      const entry = {
        event: 'recording.read',
        user: principal.user,
        action: 'GET /api/v2/remote/recordings/{session_id}',
        ...(deviceId ? { deviceId } : {}),
        options: { session_id: sessionId, owner: owner || null },
        ip,
        sessionId: principal.sessionId,
      };
      if (!allowed) {
        const reason = "a console's recording is for its owner and for remote-access:manage on its device";
        await this.deps.audit.recordChange({ ...entry, result: 'denied', reason: `forbidden: ${reason}` }).catch((err) => {
          this.deps.logger.error({ err }, 'refused recording read not audited');
        });
        throw forbidden(`Not allowed: ${reason}.`, { permission: 'remote-access:manage', ...(deviceId ? { device_id: deviceId } : {}) });
      }
      await this.deps.audit.recordChange(entry);
      const { size } = await handle.stat();
      return { stream: handle.createReadStream(), size };
    } catch (err) {
      await handle.close();
      throw err;
    }
  }

  /**
   * The console recordings the caller may play (their own, and those on devices their
   * remote-access:manage covers, as for reading one), newest first, from the consoles' audit
   * entries: at most the RECORDINGS_SCAN newest recorded consoles are looked at.
   */
  async listRecordings(
    principal: Principal,
    query: { device_id?: string; offset: number; items_per_page: number },
  ): Promise<{ items: RecordingListItem[]; total: number }> {
    let q = this.deps.db
      .selectFrom('audit')
      .select(['id', 'ts', 'user_id', 'user_email', 'device_id', 'options', 'session_id'])
      .where('event', '=', 'remote.console.start')
      .where('options', 'like', '%"recording":"%');
    if (query.device_id) q = q.where('device_id', '=', query.device_id);
    const rows = await q.orderBy('id', 'desc').limit(RECORDINGS_SCAN).execute();
    const allowed = new Map<string, boolean>();
    const visible: (typeof rows)[number][] = [];
    const recordingOf = new Map<number, string>();
    for (const row of rows) {
      let recording: unknown;
      try {
        recording = (JSON.parse(row.options) as { recording?: unknown }).recording;
      } catch {
        continue;
      }
      const file = typeof recording === 'string' ? recordingPath(this.deps.config.dataDir, recording) : undefined;
      if (
        !file ||
        !(await fs.promises.access(file).then(
          () => true,
          () => false,
        ))
      )
        continue; // removed after RECORDING_RETENTION_DAYS, or never written
      const owner = row.user_id ?? '';
      const deviceId = row.device_id ?? '';
      const key = `${owner} ${deviceId}`;
      if (!allowed.has(key))
        allowed.set(key, owner === principal.user.id || (await this.deps.access.maySeeRemoteSession(principal, { userId: owner, deviceId })));
      if (!allowed.get(key)) continue;
      visible.push(row);
      recordingOf.set(Number(row.id), recording as string);
    }
    const page = visible.slice(query.offset, query.offset + query.items_per_page);
    const starts = page.map((r) => Number(r.id));
    const ends = new Map<number, { ts: string; duration_ms: number | null }>();
    const names = new Map<string, string>();
    if (starts.length) {
      const found = await this.deps.db
        .selectFrom('audit')
        .select(['ref_id', 'ts', 'duration_ms'])
        .where('ref_id', 'in', starts)
        .where('event', '=', 'remote.console.end')
        .execute();
      for (const end of found) ends.set(Number(end.ref_id), { ts: end.ts, duration_ms: end.duration_ms === null ? null : Number(end.duration_ms) });
      const ids = [...new Set(page.map((r) => r.device_id ?? ''))];
      for (const row of await this.deps.db.selectFrom('nodes').select(['node_id', 'title']).where('node_id', 'in', ids).execute())
        names.set(row.node_id, row.title);
    }
    const items = page.map((r) => {
      const end = ends.get(Number(r.id));
      const command = (JSON.parse(r.options) as { command?: unknown }).command;
      return {
        id: recordingOf.get(Number(r.id)) as string,
        audit_id: Number(r.id),
        session_id: r.session_id,
        user: { id: r.user_id ?? '', email: r.user_email ?? '' },
        device: { id: r.device_id ?? '', name: names.get(r.device_id ?? '') ?? '' },
        started_at: r.ts,
        ended_at: end?.ts ?? null,
        duration_ms: end?.duration_ms ?? null,
        ...(Array.isArray(command) ? { command: command.map(String) } : {}),
      };
    });
    return { items, total: visible.length };
  }

  /**
   * The live sessions the caller may see (their own, and those on devices their
   * remote-access:manage covers: broker/access), newest first, with each device's name.
   */
  async listSessions(principal: Principal): Promise<{ items: RemoteSessionRecord[]; total: number }> {
    const visible: (LiveSessionView & { broker?: string })[] = [];
    // Several brokers: the other brokers' sessions come from the database (their figures are at most one heartbeat old).
    const elsewhere = (await this.deps.directory?.elsewhere()) ?? [];
    for (const s of [...this.sessions.list(), ...(this.deps.others?.list() ?? []), ...elsewhere]) {
      if (await this.deps.access.maySeeRemoteSession(principal, { userId: s.user.id, deviceId: s.deviceId })) visible.push(s);
    }
    visible.sort((a, b) => b.startedAt - a.startedAt);
    const ids = [...new Set(visible.map((s) => s.deviceId))];
    const names = new Map<string, string>();
    if (ids.length) {
      const rows = await this.deps.db.selectFrom('nodes').select(['node_id', 'title']).where('node_id', 'in', ids).execute();
      for (const row of rows) names.set(row.node_id, row.title);
    }
    const mayEnd = new Map<string, boolean>();
    for (const id of ids) mayEnd.set(id, (await this.deps.access.decide(principal, 'remote-access:manage', id)).allowed);
    const mayWatch = new Map<string, boolean>();
    for (const s of visible) {
      // A console is watched through the broker holding it.
      if (s.kind !== 'console' || s.broker) continue;
      const decision = await this.deps.access.mayWatchRemoteSession(principal, { userId: s.user.id, deviceId: s.deviceId, request: s.request });
      mayWatch.set(s.id, decision.allowed);
    }
    const items = visible.map((s) => ({
      id: s.id,
      user: s.user,
      device: { id: s.deviceId, name: names.get(s.deviceId) ?? '' },
      kind: s.kind,
      source: s.source,
      ip: s.ip,
      started_at: new Date(s.startedAt).toISOString(),
      bytes_in: s.bytesIn,
      bytes_out: s.bytesOut,
      can_end: s.user.id === principal.user.id || (mayEnd.get(s.deviceId) ?? false),
      ...(this.deps.brokerId ? { broker: s.broker ?? this.deps.brokerId } : {}),
      ...(s.kind === 'console'
        ? {
            attached: s.attached ?? true,
            watchers: (s.watchers ?? []).map((w) => ({ user: w.user, since: new Date(w.since).toISOString() })),
            can_watch: mayWatch.get(s.id) ?? false,
            // Its owner, from any tab or browser they are signed in on (the broker re-authorizes the re-attach).
            // An SSH console lives with its SSH connection: it is watched, never re-attached.
            can_attach: s.user.id === principal.user.id && !s.broker && s.source !== 'ssh',
          }
        : {}),
    }));
    return { items, total: items.length };
  }

  /** Ends a live session: the caller's own, or any with remote-access:manage on its device. */
  async endSession(principal: Principal, id: string, reason?: string): Promise<void> {
    const { user } = principal;
    const end = { by: { id: user.id, email: user.email, name: [user.fname, user.lname].filter(Boolean).join(' ') }, ...(reason ? { reason } : {}) };
    const other = this.deps.others?.list().find((s) => s.id === id);
    if (other) {
      if (other.user.id !== user.id) await this.deps.access.require(principal, 'remote-access:manage', other.deviceId);
      await this.deps.others?.end(id, { id: user.id, email: user.email });
      return;
    }
    const session = this.sessions.get(id);
    if (!session) {
      // Several brokers: the broker holding it ends it (asked through NOTIFY), and audits as always.
      const elsewhere = await this.deps.directory?.find(id);
      if (!elsewhere) throw notFound(`Remote session ${id}`);
      if (elsewhere.user.id !== principal.user.id) await this.deps.access.require(principal, 'remote-access:manage', elsewhere.deviceId);
      await this.deps.directory?.endElsewhere(elsewhere, end);
      return;
    }
    if (session.user.id !== principal.user.id) await this.deps.access.require(principal, 'remote-access:manage', session.deviceId);
    await this.sessions.end(id, end);
  }

  /** A single-use ticket for one WebSocket connection, bound to the caller's sign-in session. */
  issueTicket(principal: Principal, bearer: string): Promise<{ ticket: string; expires_in: number }> {
    return this.tickets.issue(bearer, principal.user.id);
  }

  /**
   * What the caller may try on a device, for showing buttons: each action is granted by some
   * remote-access:connect resource matching the device, whatever its options. The session itself
   * is still decided with its options when it is opened.
   */
  async capabilities(principal: Principal, deviceId: string, tunnel?: RemoteRequest & { action: 'tunnel' }): Promise<RemoteCapabilities> {
    const answer: RemoteCapabilities = {
      device_id: deviceId,
      connected: this.deps.locator.isConnected(deviceId),
      console: false,
      tunnel: false,
      copy: false,
      reload: false,
    };
    for (const action of await this.deps.access.remoteActions(principal, deviceId)) answer[action] = true;
    if (answer.copy) {
      const roots = await this.deps.access.copyBrowseRoots(principal, deviceId);
      if (roots) answer.copy_paths = roots;
    }
    if (answer.console) {
      const users = await this.deps.access.consoleUsers(principal, deviceId);
      if (users) answer.console_users = users;
    }
    // The decision opening this tunnel would get (its proto, port and host limits included).
    if (tunnel) answer.tunnel_allowed = answer.tunnel && (await this.deps.access.decide(principal, 'remote-access:connect', deviceId, tunnel)).allowed;
    return answer;
  }

  /**
   * Restarts the agent's work loop, or with `run` has it run its configuration now without closing
   * its connection or any session (qbee's run-agent): decided as the `reload` action, audited (a run
   * with `options.mode: "run"`), then asked of the agent.
   */
  async reload(
    principal: Principal,
    deviceId: string,
    ip: string,
    source: RemoteSource,
    mode: ReloadMode = 'restart',
  ): Promise<{ ok: true; device_id: string }> {
    const decision = await this.deps.access.decide(principal, 'remote-access:connect', deviceId, { action: 'reload' });
    const auditId = await this.auditedStart({
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
      this.deps.audit.recordRemoteEnd(auditId, { durationMs: Date.now() - started, bytesIn: 0, bytesOut: 0, reason, result }).catch(() => {});
    if (!this.deps.locator.isConnected(deviceId)) {
      await end('device not connected', 'error');
      throw new ApiError(404, 'device_not_connected', `Device ${deviceId} is not connected to the broker; try again when it is online.`, {
        device_id: deviceId,
      });
    }
    try {
      await this.deps.locator.reload(deviceId, mode);
    } catch (err) {
      await end(`reload failed: ${(err as Error).message}`, 'error');
      throw new ApiError(502, 'reload_failed', (err as Error).message, { device_id: deviceId });
    }
    await end('acknowledged by the agent');
    return { ok: true, device_id: deviceId };
  }

  /** Writes an attempt's start to the audit log before anything else happens, or refuses the attempt (500 `audit_failed`). */
  private async auditedStart(entry: Parameters<AuditService['recordRemoteStart']>[0]): Promise<number> {
    try {
      return await this.deps.audit.recordRemoteStart(entry);
    } catch {
      throw new ApiError(500, 'audit_failed', 'The attempt could not be written to the audit log, so it was refused. Try again shortly.');
    }
  }

  /**
   * Lists a directory on the device for the file browser, through a copy channel (`list`): decided
   * as a download of that directory (the user's copy grant, its direction and paths), audited as a
   * copy (`remote.copy.start|denied` with `op: "list"`, then its end with the bytes of the answer),
   * and checked again on the device after resolving symlinks, as a copy is.
   */
  async listDirectory(principal: Principal, deviceId: string, dirPath: string, ip: string, source: RemoteSource): Promise<DirectoryListing> {
    const path = normalizeDevicePath(dirPath) ?? dirPath;
    const request: RemoteRequest = { action: 'copy', direction: 'download', path: dirPath };
    const decision = await this.deps.access.decide(principal, 'remote-access:connect', deviceId, request);
    const auditId = await this.auditedStart({
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
      this.deps.audit.recordRemoteEnd(auditId, { durationMs: Date.now() - started, bytesIn: 0, bytesOut, reason, result }).catch((err) => {
        this.deps.logger.error({ err, auditId }, 'end of directory listing not audited');
      });
    if (!this.deps.locator.isConnected(deviceId)) {
      await end('device not connected', 'error');
      throw new ApiError(404, 'device_not_connected', `Device ${deviceId} is not connected to the broker; try again when it is online.`, {
        device_id: deviceId,
      });
    }
    const allowed = decision.device ? this.deps.access.copyRoots(principal, decision.device, request) : undefined;
    let opened: { channel: Channel; info: Record<string, unknown> };
    try {
      opened = await this.deps.locator.open(deviceId, 'copy', { direction: 'list', path, ...(allowed ? { allowed } : {}) });
    } catch (err) {
      const message = (err as Error).message;
      const code = refusalCodeOf(err);
      const denied = isAccessRefusal(code);
      await end(`refused by the device: ${message}`, denied ? 'denied' : 'error');
      if (denied) throw forbidden(message, { device_id: deviceId, refusal: code });
      if ((err as { code?: string }).code === 'agent_not_connected')
        throw new ApiError(404, 'device_not_connected', `Device ${deviceId} is not connected to the broker; try again when it is online.`, {
          device_id: deviceId,
        });
      throw new ApiError(502, 'device_refused', message, { device_id: deviceId, ...(code ? { refusal: code } : {}) });
    }
    opened.channel.destroy();
    const listing = directoryListing.safeParse(opened.info);
    if (!listing.success) {
      await end('the device answered a malformed listing', 'error');
      throw new ApiError(502, 'device_refused', 'The device answered a malformed directory listing; update its agent.', { device_id: deviceId });
    }
    const { entries, truncated } = listing.data;
    await end(`listed ${entries.length} entries${truncated ? `, cut at ${entries.length}` : ''}`, 'ended', Buffer.byteLength(JSON.stringify(listing.data)));
    return listing.data;
  }

  // ---- port presets -------------------------------------------------------------------------------

  /**
   * Presets that apply to a device (its own node, a group above it, one of its tags, or `*`), for
   * callers who may connect to it or read it; without a device, every preset.
   */
  async listPortmaps(
    principal: Principal,
    query: { device_id?: string; offset: number; items_per_page: number },
  ): Promise<{ items: Portmap[]; total: number }> {
    let all = await this.portmaps.all();
    if (query.device_id) {
      const device = await this.deps.access.requirePresetReader(principal, query.device_id);
      all = device ? all.filter((p) => presetApplies(p.target, device)) : [];
    } else {
      // Like other listings, what the caller may not see is left out rather than refused.
      const visible: Portmap[] = [];
      for (const preset of all) if (await this.deps.access.mayReadPreset(principal, preset.target)) visible.push(preset);
      all = visible;
    }
    return { items: all.slice(query.offset, query.offset + query.items_per_page), total: all.length };
  }

  /**
   * The targets a preset call concerns, for the route's access check: the stored preset's (when it
   * exists; an unknown id is the handler's 404) and the one sent (checked for form first: 400).
   */
  async portmapTargets(input: { id?: string; target?: string }): Promise<string[]> {
    const targets: string[] = [];
    if (input.id !== undefined) {
      const existing = await this.portmaps.find(input.id);
      if (existing) targets.push(existing.target);
    }
    if (input.target !== undefined) targets.push(checkedTarget({ target: input.target }).target);
    return targets;
  }

  async createPortmap(principal: Principal, input: PortmapInput): Promise<Portmap> {
    return this.portmaps.insert(checkedTarget(input), principal.user.id);
  }

  async updatePortmap(id: string, patch: Partial<PortmapInput>): Promise<Portmap> {
    const updated = await this.portmaps.update(id, checkedTarget(patch));
    if (!updated) throw notFound(`Port preset ${id}`);
    return updated;
  }

  async deletePortmap(id: string): Promise<void> {
    if (!(await this.portmaps.remove(id))) throw notFound(`Port preset ${id}`);
  }
}

/** A preset targets devices like a resource does, without an action. */
function checkedTarget<T extends { target?: string }>(input: T): T {
  if (input.target === undefined) return input;
  let parsed;
  try {
    parsed = parseResource(input.target);
  } catch (err) {
    throw badRequest(`body.target: ${(err as Error).message}`, { field: 'target' });
  }
  if (parsed.action) throw badRequest('body.target: a preset targets devices ("*", "tag:<tag>" or "node:<id>"), without an action.', { field: 'target' });
  return input;
}
