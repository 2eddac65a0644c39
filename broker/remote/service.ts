/**
 * Remote access as the HTTP routes see it: the live sessions listed and ended, tickets for
 * browsers, and the port presets; the WebSocket sessions are sessions.ts's, reading recordings
 * back recording-reads.ts's, the agent's reload and directory listings device-actions.ts's.
 */
import fs from 'node:fs';
import type { RecordingListItem, RemoteCapabilities } from '../../shared/api-types.js';
import type { DirectoryListing, ReloadMode } from '../../shared/protocol.js';
import { parseResource, type RemoteRequest } from '../../shared/resources.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import { presetApplies } from '../access/remote.js';
import type { AuditService } from '../audit/service.js';
import type { Db } from '../db/database.js';
import { nodeTitles } from '../devices/directory.js';
import type { Config } from '../environment.js';
import { invalid, notFound } from '../errors.js';
import { listDirectory, reloadAgent } from './device-actions.js';
import { PortmapStore, type Portmap, type PortmapInput } from './portmaps.js';
import { listRecordings, readRecording } from './recording-reads.js';
import { removeOldRecordings } from './recordings.js';
import { RemoteSessions, type LiveSessionView, type RemoteSessionsDeps, type RemoteSource } from './sessions.js';
import { TicketStore } from './tickets.js';

export { directoryListing } from './device-actions.js';

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
  config: Pick<Config, 'trustProxy' | 'dataDir' | 'recordingRetentionDays' | 'consoleDetachGraceSeconds' | 'remoteRecheckMs'>;
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
  audit: Pick<AuditService, 'recordRemoteStart' | 'recordRemoteEnd' | 'recordRemoteJoin' | 'recordRefusedAttempt' | 'recordChange'>;
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

  /** A console's recording for whoever may read it, every read audited (see recording-reads.ts). */
  recording(principal: Principal, sessionId: string, ip: string): Promise<{ stream: fs.ReadStream; size: number }> {
    return readRecording(this.deps, principal, sessionId, ip);
  }

  /** The console recordings the caller may play, newest first (see recording-reads.ts). */
  listRecordings(
    principal: Principal,
    query: { device_id?: string; offset: number; items_per_page: number },
  ): Promise<{ items: RecordingListItem[]; total: number }> {
    return listRecordings(this.deps, principal, query);
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
    const names = await nodeTitles(this.deps.db, ids);
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

  /** Restarts the agent's work loop, or has it run its configuration now: decided and audited (see device-actions.ts). */
  reload(principal: Principal, deviceId: string, ip: string, source: RemoteSource, mode: ReloadMode = 'restart'): Promise<{ ok: true; device_id: string }> {
    return reloadAgent(this.deps, principal, deviceId, ip, source, mode);
  }

  /** Lists a directory on the device for the file browser, decided and audited as a copy (see device-actions.ts). */
  listDirectory(principal: Principal, deviceId: string, dirPath: string, ip: string, source: RemoteSource): Promise<DirectoryListing> {
    return listDirectory(this.deps, principal, deviceId, dirPath, ip, source);
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
    throw invalid(`body.target: ${(err as Error).message}`, { field: 'target' });
  }
  if (parsed.action) throw invalid('body.target: a preset targets devices ("*", "tag:<tag>" or "node:<id>"), without an action.', { field: 'target' });
  return input;
}
