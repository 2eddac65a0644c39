/**
 * Writing the audit trail: the service the broker holds, with its lifecycle (sessions left open by a
 * stopped broker, refusal summaries, the retention), the entries of changes, configuration commits,
 * refused calls and remote sessions (a start, people joining, one end), all through the chain's
 * writer. Reading lives in list.ts, the chain's integrity and retention in checkpoints.ts.
 */
import type { AuditEntry, AuditVerification, ListPage } from '../../shared/api-types.js';
import { sessionsHeldBy } from '../cluster/audit-queries.js';
import type { Db, Dialect } from '../db/database.js';
import type { AuditTable } from '../db/schema.js';
import { pruneChain, verifyChain } from './checkpoints.js';
import { bounded, boundedOptions, MAX_CHANGE_OPTIONS_BYTES, MAX_OPTIONS_BYTES, REFUSALS_EVENT, REMOTE_END_LIKE, REMOTE_START } from './entries.js';
import { listEntries, type AuditQuery } from './list.js';
import { RefusalBudget, type RefusalSource, type RefusalSummary } from './refusals.js';
import { AuditWriter, type Append, type NewEntry } from './writer.js';

// Names other modules import from here, kept where they were.
export { bounded, boundedOptions, CHECKPOINT_EVENT, MAX_CHANGE_OPTIONS_BYTES, MAX_OPTIONS_BYTES, REFUSALS_EVENT } from './entries.js';
export { commitSearch, describe, type AuditQuery } from './list.js';

export interface AuditActor {
  id: string;
  email: string;
}

export interface RemoteAuditStart {
  event: string; // e.g. remote.console
  /** Absent when the caller could not be identified (bad token, spent ticket): the source address stands for them. */
  user?: AuditActor;
  deviceId: string;
  action: string; // console | tunnel | copy | reload
  options: Record<string, unknown>;
  allowed: boolean;
  reason: string;
  ip: string;
  source: 'api' | 'web' | 'cli' | 'ssh' | 'qbee';
  sessionId?: string;
}

/**
 * A remote-access attempt refused before any session could start: a request the entry point cannot
 * serve, no device named, a bad token, a refused sign-in. Its entry is `<event>.denied`.
 */
export interface RefusedAttempt {
  /** `remote.<action>` unless named (a refused qbee upgrade is `remote.qbee`, an SSH sign-in `remote.ssh`) */
  event?: string;
  /** who made it; absent when the caller could not be identified (the source address stands for them) */
  principal?: { user: AuditActor; sessionId?: string };
  /** the device it named, '' when none */
  deviceId: string;
  action: string;
  options: Record<string, unknown>;
  reason: string;
  ip: string;
  source: RemoteAuditStart['source'];
}

export interface RemoteAuditEnd {
  durationMs: number | null;
  bytesIn: number | null;
  bytesOut: number | null;
  reason: string;
  /** 'ended' (default); 'denied' when the device refused the session, 'error' when it failed to open it. */
  result?: 'ended' | 'denied' | 'error';
}

const DAY_MS = 86_400_000;
/** How often the retention runs (and at start). */
const RETENTION_EVERY_MS = 3_600_000;

export interface AuditOptions {
  brokerId: string;
  otherLiveBrokers?: () => Promise<string[]>;
  /** Entries older than this many days are deleted behind a checkpoint; 0 keeps everything. */
  retentionDays?: number;
  /** Refused entries per source a window (see refusals.ts). */
  refusals?: RefusalBudget;
  logger?: { warn(obj: object, msg: string): void; error(obj: object, msg: string): void };
}

/** What a session's end entry repeats of its start. */
type StartOfSession = Pick<AuditTable, 'event' | 'user_id' | 'user_email' | 'device_id' | 'action' | 'source_ip' | 'source' | 'session_id'>;
/** Live sessions whose start is kept for their end (beyond, the start is read back). */
const MAX_LIVE_STARTS = 100_000;

/** A remote-access attempt's entry: `remote.<action>.start`, or `.denied`. */
function startEntry(entry: RemoteAuditStart): NewEntry {
  return {
    event: `${entry.event}.${entry.allowed ? 'start' : 'denied'}`,
    user_id: entry.user?.id ?? null,
    user_email: entry.user?.email ?? null,
    device_id: bounded(entry.deviceId, 100),
    action: entry.action,
    options: boundedOptions(entry.options),
    result: entry.allowed ? 'allowed' : 'denied',
    reason: entry.reason,
    source_ip: bounded(entry.ip, 100),
    source: entry.source,
    session_id: entry.sessionId ?? null,
  };
}

/**
 * The audit trail, an append-only chain: each entry carries `sha`, SHA-256 over the previous entry's
 * sha and its own content, so an edited or deleted row is found by `verify`. Remote-access attempts are
 * written before the session starts (a failed write refuses the session) and their end is an entry of
 * its own; changes made through the API are written in the transaction of the change (see router.ts).
 */
export class AuditService {
  constructor(
    private readonly db: Db,
    private readonly dialect: Dialect,
    /**
     * Which broker this is, and (several brokers on one database) the other brokers alive now:
     * a live session's start is stored with its broker, so a restart closes only its own.
     */
    private readonly owner: AuditOptions = { brokerId: 'local' },
  ) {
    this.refusals = owner.refusals ?? new RefusalBudget();
    this.writer = new AuditWriter(db, dialect);
  }

  private readonly refusals: RefusalBudget;
  /** Appends outside a transaction go through it, in groups (group commit). */
  private readonly writer: AuditWriter;
  /**
   * What a live session's end repeats of its start, kept from the start this broker wrote: ending
   * it then needs no read. A session started elsewhere (or forgotten past the bound) is read.
   */
  private readonly liveStarts = new Map<number, StartOfSession>();
  private timers: NodeJS.Timeout[] = [];
  private background = new Set<Promise<unknown>>();

  /**
   * Background work: summaries of ended refusal windows every window, and — with a retention —
   * the deletion of old entries behind a checkpoint now and hourly. A failure is logged and tried
   * again next time; nothing else waits for it.
   */
  start(): void {
    const run = (what: string, work: () => Promise<unknown>) => {
      const p = work()
        .catch((err) => this.owner.logger?.warn({ err }, `audit ${what} failed`))
        .finally(() => this.background.delete(p));
      this.background.add(p);
    };
    const summaries = setInterval(() => run('summary', () => this.writeSummaries(this.refusals.due())), this.refusals.windowMs);
    summaries.unref();
    this.timers.push(summaries);
    const days = this.owner.retentionDays ?? 0;
    if (days > 0) {
      const prune = () => run('retention', () => this.prune(new Date(Date.now() - days * DAY_MS)));
      prune();
      const every = setInterval(prune, RETENTION_EVERY_MS);
      every.unref();
      this.timers.push(every);
    }
  }

  /** Stops the background work and writes the summaries of the refusals counted so far. */
  async close(): Promise<void> {
    for (const timer of this.timers) clearInterval(timer);
    this.timers = [];
    await Promise.allSettled([...this.background]);
    await this.writeSummaries(this.refusals.drain()).catch((err) => this.owner.logger?.warn({ err }, 'audit summary failed'));
    await this.writer.flushed();
  }

  /**
   * A refused attempt from this source: true when it gets an entry of its own. Past the rate it is
   * counted instead; the summary of a window that ended is written first.
   */
  private async admitRefusal(source: RefusalSource, event: string): Promise<boolean> {
    const { write, summaries } = this.refusals.take(source, event);
    await this.writeSummaries(summaries);
    return write;
  }

  private async writeSummaries(summaries: RefusalSummary[]): Promise<void> {
    for (const s of summaries) {
      await this.append({
        event: REFUSALS_EVENT,
        user_id: s.user?.id ?? null,
        user_email: s.user?.email ?? null,
        device_id: null,
        action: 'summary',
        options: boundedOptions({ from: s.from, to: s.to, count: s.count, events: s.events, limit: this.refusals.limit }),
        result: 'denied',
        reason: `${s.count} more refused calls from ${bounded(s.ip, 100)} between ${s.from} and ${s.to}, counted, not written one by one (over ${this.refusals.limit} a minute)`,
        source_ip: bounded(s.ip, 100),
        source: 'api',
        session_id: null,
      });
    }
  }

  /**
   * Retention: deletes the entries older than `cutoff` behind a checkpoint entry (see checkpoints.ts).
   * Answers how many entries went.
   */
  async prune(cutoff: Date): Promise<{ deleted: number; checkpoint?: number }> {
    return pruneChain(this.db, this.dialect, cutoff, (entry) => this.append(entry));
  }

  /**
   * Sessions open when the broker stopped (crash, kill) can no longer end: their end is written now.
   * With several brokers, those held by another broker that is alive are left to it.
   */
  async init(): Promise<void> {
    const others = (await this.owner.otherLiveBrokers?.()) ?? [];
    await this.closeOpenSessions('broker restarted', others);
  }

  /**
   * Writes the end of every open remote session except those held by the brokers in `keep`
   * (sessions of no known broker, or of this one, are closed). Returns how many were closed.
   */
  async closeOpenSessions(reason: string, keep: string[] = []): Promise<number> {
    let query = this.db
      .selectFrom('audit as s')
      .selectAll('s')
      .where('s.event', 'like', 'remote.%.start')
      .where('s.ended_at', 'is', null)
      .where((eb) => eb.not(eb.exists(eb.selectFrom('audit as e').select('e.id').whereRef('e.ref_id', '=', 's.id').where('e.event', 'like', REMOTE_END_LIKE))));
    // Held by a broker in `keep`: left to it (a session's holder is recorded with its start).
    if (keep.length > 0) query = query.where('s.id', 'not in', sessionsHeldBy(this.db, keep));
    const open = await query.orderBy('s.id').execute();
    // Queued together, written in groups. Another broker sweeping the same sessions, or the holder
    // ending one: the first end written wins.
    const written = await Promise.all(
      open.filter((start) => REMOTE_START.test(start.event)).map((start) => this.appendEnd(start, { durationMs: null, bytesIn: null, bytesOut: null, reason })),
    );
    return written.filter(Boolean).length;
  }

  /**
   * Appends through the group writer, or — inside a transaction (a change and its entry commit
   * together) — in that transaction. Answers the id, or undefined for an end already written.
   */
  private write(append: Append): Promise<number | undefined> {
    const entry = { ...append.entry, reason: append.entry.reason === null ? null : bounded(append.entry.reason) };
    if (this.db.isTransaction) return this.writer.write([{ ...append, entry }]).then(([id]) => id);
    return this.writer.submit({ ...append, entry });
  }

  /** Appends one entry to the chain; returns its id. Joins the caller's transaction if one is open. */
  async append(entry: NewEntry): Promise<number> {
    return (await this.write({ entry })) as number;
  }

  async recordChange(entry: {
    event: string;
    user?: AuditActor;
    action: string;
    deviceId?: string;
    options: unknown;
    ip: string;
    result?: string;
    reason?: string;
    sessionId?: string;
  }): Promise<void> {
    const result = entry.result ?? 'ok';
    // A refusal past the rate of its source is counted, and summarised later.
    if (result !== 'ok' && !(await this.admitRefusal({ ip: entry.ip, user: entry.user }, entry.event))) return;
    await this.append({
      event: entry.event,
      user_id: entry.user?.id ?? null,
      user_email: entry.user?.email ?? null,
      device_id: entry.deviceId ? bounded(entry.deviceId, 100) : null,
      action: bounded(entry.action, 200),
      options: boundedOptions(entry.options, result === 'ok' ? MAX_CHANGE_OPTIONS_BYTES : MAX_OPTIONS_BYTES),
      result,
      reason: entry.reason ?? null,
      source_ip: bounded(entry.ip, 100),
      source: 'api',
      session_id: entry.sessionId ?? null,
    });
  }

  /**
   * A configuration commit is an entry of the trail (event `config.commit`): the commit's sha is the
   * entry's. Joins the caller's transaction, so the commit and its entry land together.
   */
  async recordCommit(entry: { user: AuditActor; ip: string; message: string; changes: string[] }): Promise<{ id: number; sha: string }> {
    const id = await this.append({
      event: 'config.commit',
      user_id: entry.user.id,
      user_email: entry.user.email,
      device_id: null,
      action: 'POST /api/v2/commit',
      options: JSON.stringify({ message: entry.message, changes: entry.changes, labels: [] }),
      result: 'ok',
      reason: null,
      source_ip: bounded(entry.ip, 100),
      source: 'api',
      session_id: null,
    });
    const row = await this.db.selectFrom('audit').select('sha').where('id', '=', id).executeTakeFirstOrThrow();
    return { id, sha: row.sha };
  }

  /**
   * Writes a remote-access attempt; returns the entry id to close it later. A refused attempt past
   * the rate of its source is counted instead (summarised later) and answers 0.
   */
  async recordRemoteStart(entry: RemoteAuditStart): Promise<number> {
    if (!entry.allowed) {
      if (!(await this.admitRefusal({ ip: entry.ip, user: entry.user }, `${entry.event}.denied`))) return 0;
      return this.appendStart(entry);
    }
    // The start and its broker go in together: a sweep never sees a live start without its owner.
    const start = startEntry(entry);
    const id = (await this.write({ entry: start, owner: this.owner.brokerId })) as number;
    if (this.liveStarts.size < MAX_LIVE_STARTS) this.liveStarts.set(id, start);
    return id;
  }

  /**
   * Writes a remote-access attempt refused before any session could start, as every entry point
   * (WebSocket, qbee, SSH) audits one: denied, counted against its source's refusal rate. Never
   * throws: the refusal stands whether or not its entry is written, and a failed write is logged.
   */
  async recordRefusedAttempt(attempt: RefusedAttempt): Promise<void> {
    const event = attempt.event ?? `remote.${attempt.action}`;
    try {
      await this.recordRemoteStart({
        event,
        user: attempt.principal?.user,
        deviceId: attempt.deviceId,
        action: attempt.action,
        options: attempt.options,
        allowed: false,
        reason: attempt.reason,
        ip: attempt.ip,
        source: attempt.source,
        sessionId: attempt.principal?.sessionId,
      });
    } catch (err) {
      this.owner.logger?.error({ err, event, source: attempt.source, deviceId: attempt.deviceId }, 'refused remote-access attempt not audited');
    }
  }

  private async appendStart(entry: RemoteAuditStart): Promise<number> {
    return this.append(startEntry(entry));
  }

  /**
   * Someone joins a live console: its owner re-attaching after a dropped connection
   * (`remote.console.attach`) or another user watching it (`remote.console.watch`). An entry of its
   * own pointing at the session's start entry (ref_id), allowed or denied; the session stays one.
   */
  async recordRemoteJoin(entry: {
    event: string;
    startId?: number;
    user?: AuditActor;
    deviceId: string;
    options: Record<string, unknown>;
    allowed: boolean;
    reason: string;
    ip: string;
    source: RemoteAuditStart['source'];
    sessionId?: string;
  }): Promise<number> {
    return this.append({
      event: entry.event,
      user_id: entry.user?.id ?? null,
      user_email: entry.user?.email ?? null,
      device_id: bounded(entry.deviceId, 100),
      action: 'console',
      options: boundedOptions(entry.options),
      result: entry.allowed ? 'allowed' : 'denied',
      reason: entry.reason,
      source_ip: bounded(entry.ip, 100),
      source: entry.source,
      session_id: entry.sessionId ?? null,
      ...(entry.startId !== undefined ? { ref_id: entry.startId } : {}),
    });
  }

  /**
   * Ends a remote-access session: an entry of its own (`remote.<action>.end`) pointing at its start.
   * Nothing is written when its end already was (another broker took this one for gone and ended it).
   */
  async recordRemoteEnd(startId: number, end: RemoteAuditEnd): Promise<void> {
    const kept = this.liveStarts.get(startId);
    this.liveStarts.delete(startId);
    const start = kept ? { ...kept, id: startId } : await this.db.selectFrom('audit').selectAll().where('id', '=', startId).executeTakeFirstOrThrow();
    if (!(await this.appendEnd(start, end)))
      this.owner.logger?.warn({ startId }, 'session already ended in the audit by another broker: no second end written');
  }

  /**
   * One session has one end, whoever writes it: under the chain's lock (which every writer of the
   * trail takes), the end is written only when none is; with it, in the same transaction, the
   * session's broker is released (the sweep of gone brokers reads both). Answers whether it wrote.
   */
  private async appendEnd(start: StartOfSession & { id: number | string }, end: RemoteAuditEnd): Promise<boolean> {
    const id = await this.write({
      endOf: Number(start.id),
      entry: {
        event: start.event.replace(/\.start$/, '.end'),
        user_id: start.user_id,
        user_email: start.user_email,
        device_id: start.device_id,
        action: start.action,
        options: '{}',
        result: end.result ?? 'ended',
        reason: end.reason,
        source_ip: start.source_ip,
        source: start.source,
        session_id: start.session_id,
        ref_id: Number(start.id),
        duration_ms: end.durationMs === null ? null : Math.round(end.durationMs),
        bytes_in: end.bytesIn,
        bytes_out: end.bytesOut,
      },
    });
    return id !== undefined;
  }

  /** Walks the chain (see checkpoints.ts): names the first entry whose sha does not match. */
  async verify(): Promise<AuditVerification> {
    return verifyChain(this.db);
  }

  /** A page of the trail as GET /commitlist asks it (see list.ts). */
  async list(q: AuditQuery): Promise<ListPage<AuditEntry>> {
    return listEntries(this.db, q);
  }
}
