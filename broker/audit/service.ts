import type { Selectable } from 'kysely';
import type { AuditEntry, AuditVerification, ListPage } from '../../shared/api-types.js';
import { sql, type Db, type Dialect } from '../db/database.js';
import type { AuditTable } from '../db/schema.js';
import { z } from 'zod';
import { parseJsonSearch } from '../http/search.js';
import { entrySha } from './chain.js';
import { RefusalBudget, type RefusalSource, type RefusalSummary } from './refusals.js';
import { AuditWriter, CHAIN_LOCK, type Append, type NewEntry } from './writer.js';

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

export interface RemoteAuditEnd {
  durationMs: number | null;
  bytesIn: number | null;
  bytesOut: number | null;
  reason: string;
  /** 'ended' (default); 'denied' when the device refused the session, 'error' when it failed to open it. */
  result?: 'ended' | 'denied' | 'error';
}

export interface AuditQuery {
  device_id?: string;
  user_id?: string;
  action?: string;
  result?: string;
  event?: string;
  from?: string;
  to?: string;
  /** qbee's CommitListSearch as JSON (commitSearch); its filters narrow the trail. */
  search?: string;
  sort_field?: 'created' | 'user_id' | 'type';
  sort_direction?: 'asc' | 'desc';
  offset: number;
  items_per_page: number;
}

/** qbee's `YYYY-MM-DD hh:ii:ss` (UTC). */
const DATE_TIME = /^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})$/;
const dateTime = z
  .string()
  .regex(DATE_TIME, 'must be "YYYY-MM-DD hh:mm:ss" (UTC)')
  .refine((v) => !Number.isNaN(Date.parse(v.replace(' ', 'T') + 'Z')), 'is not a date');

/** qbee's CommitListSearch (qbee-cli commit.go): what GET /commitlist's `search` may hold. */
export const commitSearch = z.object({
  commit_sha: z.string().max(64).optional().describe('Part of the entry’s sha (case-insensitive)'),
  message: z.string().max(1000).optional().describe('Part of a configuration commit’s message (case-insensitive): configuration commits only'),
  user_id: z.string().max(64).optional().describe('Exactly this user'),
  committer: z.string().max(200).optional().describe('Part of the first or last name of the user'),
  change_sha: z.string().max(64).optional().describe('Part of the sha of one of a configuration commit’s changes'),
  labels_include: z.array(z.string().max(100)).max(100).optional().describe('Labels every entry must carry (no entry carries labels here)'),
  labels_exclude: z.array(z.string().max(100)).max(100).optional().describe('Labels no entry may carry'),
  start_date: dateTime.optional().describe('From, inclusive'),
  end_date: dateTime.optional().describe('Until, inclusive'),
});

/** A LIKE pattern matching `text` anywhere, its wildcards taken literally (escape '\\'). */
const containing = (text: string) => `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

/** Longest reason or address kept: what an entry records of a request is bounded. */
const MAX_TEXT = 300;

export function bounded(text: string, max = MAX_TEXT): string {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

/**
 * Bytes of an entry's options (JSON) kept at most; longer ones are cut and marked. Refusals and
 * remote-access attempts — what a caller who is not let in can make — get a few KiB; a change that
 * succeeded (an authorized caller, fields bounded by the redaction) keeps more of its before and after.
 */
export const MAX_OPTIONS_BYTES = 4096;
export const MAX_CHANGE_OPTIONS_BYTES = 64 * 1024;

/**
 * Options as stored: their JSON, or — past `max` bytes — `{cut: true, bytes, start}`: the start of
 * that JSON as text (three quarters of `max`, less when escaping grows it) and its full size, so a
 * huge request body never makes a huge entry and a reader sees that something was left out.
 */
export function boundedOptions(options: unknown, max = MAX_OPTIONS_BYTES): string {
  const json = JSON.stringify(options ?? {});
  const bytes = Buffer.byteLength(json);
  if (bytes <= max) return json;
  const raw = Buffer.from(json);
  for (let keep = Math.floor((max * 3) / 4); ; keep = Math.floor(keep / 2)) {
    // A character cut in two at the end is dropped.
    const start = raw
      .subarray(0, keep)
      .toString('utf8')
      .replace(/\uFFFD+$/, '');
    const cut = JSON.stringify({ cut: true, bytes, start });
    if (Buffer.byteLength(cut) <= max || keep === 0) return cut;
  }
}

/** Event of a checkpoint: entries older than the retention were deleted up to `deleted_through`. */
export const CHECKPOINT_EVENT = 'audit.checkpoint';
/** Event of a summary: refusals from one source past the rate, counted instead of written. */
export const REFUSALS_EVENT = 'audit.refusals';

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
  logger?: { warn(obj: object, msg: string): void };
}

interface CheckpointOptions {
  deleted_through: number;
  deleted_through_sha: string;
  deleted: number;
  cutoff: string;
}

const REMOTE_START = /^remote\.[a-z]+\.start$/;

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
   * Retention: deletes the entries older than `cutoff`, behind a checkpoint entry appended first
   * (event audit.checkpoint) that records the id and sha of the last entry deleted, so `verify`
   * starts from it. One transaction under the chain's lock: appends wait, and a verify sees the
   * chain before or after, never between. Answers how many entries went.
   */
  async prune(cutoff: Date): Promise<{ deleted: number; checkpoint?: number }> {
    return this.db.transaction().execute(async (trx) => {
      await CHAIN_LOCK[this.dialect].execute(trx);
      const last = await trx
        .selectFrom('audit')
        .select(['id', 'sha'])
        .where('ts', '<', cutoff.toISOString())
        .where('event', '!=', CHECKPOINT_EVENT)
        .orderBy('id', 'desc')
        .limit(1)
        .executeTakeFirst();
      if (!last) return { deleted: 0 };
      const through = Number(last.id);
      const { n } = await trx
        .selectFrom('audit')
        .select((eb) => eb.fn.countAll<number | string>().as('n'))
        .where('id', '<=', through)
        .executeTakeFirstOrThrow();
      // The sha of the last entry deleted is the checkpoint's: the chain goes on from it.
      const options: CheckpointOptions = { deleted_through: through, deleted_through_sha: last.sha, deleted: Number(n), cutoff: cutoff.toISOString() };
      const checkpoint = await this.append({
        event: CHECKPOINT_EVENT,
        user_id: null,
        user_email: null,
        device_id: null,
        action: 'retention',
        options: JSON.stringify(options),
        result: 'ok',
        reason: `${Number(n)} entries older than ${cutoff.toISOString()} deleted (AUDIT_RETENTION_DAYS)`,
        source_ip: null,
        source: 'broker',
        session_id: null,
      });
      await trx.deleteFrom('remote_session_owners').where('audit_id', '<=', through).execute();
      await trx.deleteFrom('audit').where('id', '<=', through).execute();
      return { deleted: Number(n), checkpoint };
    });
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
      .leftJoin('remote_session_owners as o', 'o.audit_id', 's.id')
      .selectAll('s')
      .where('s.event', 'like', 'remote.%.start')
      .where('s.ended_at', 'is', null)
      .where((eb) => eb.not(eb.exists(eb.selectFrom('audit as e').select('e.id').whereRef('e.ref_id', '=', 's.id').where('e.event', 'like', 'remote.%.end'))));
    if (keep.length > 0) query = query.where((eb) => eb.or([eb('o.broker_id', 'is', null), eb('o.broker_id', 'not in', keep)]));
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

  /**
   * Walks the chain from its first entry; names the first entry whose sha does not match. When the
   * retention deleted the oldest entries, the walk starts from the newest checkpoint: the first entry
   * kept must chain to the sha of the last entry deleted that the checkpoint records (the checkpoint
   * itself is an entry of the chain, checked in turn). Entries deleted at the start without a
   * checkpoint, or beyond the one it names, break the chain at the first entry kept.
   */
  async verify(): Promise<AuditVerification> {
    let previous = '';
    let after = -1;
    let entries = 0;
    let from: AuditVerification['checkpoint'];
    const checkpoint = await this.db
      .selectFrom('audit')
      .select(['id', 'options'])
      .where('event', '=', CHECKPOINT_EVENT)
      .orderBy('id', 'desc')
      .limit(1)
      .executeTakeFirst();
    if (checkpoint) {
      const o = parseCheckpoint(checkpoint.options);
      if (o) {
        previous = o.deleted_through_sha;
        from = { id: Number(checkpoint.id), deleted_through: o.deleted_through };
      }
    }
    for (;;) {
      // From the first entry there is: one at or before the checkpoint's last deleted one (left over, put back) does not chain to it.
      const rows = await this.db.selectFrom('audit').selectAll().where('id', '>', after).orderBy('id').limit(1000).execute();
      if (rows.length === 0) return { ok: true, entries, ...(from ? { checkpoint: from } : {}) };
      for (const row of rows) {
        const expected = entrySha(previous, row);
        if (row.sha !== expected)
          return { ok: false, entries, ...(from ? { checkpoint: from } : {}), first_bad: { id: Number(row.id), sha: row.sha ?? '', expected } };
        entries += 1;
        previous = row.sha;
        after = Number(row.id);
      }
    }
  }

  async list(q: AuditQuery): Promise<ListPage<AuditEntry>> {
    let query = this.db.selectFrom('audit');
    if (q.device_id) query = query.where('device_id', '=', q.device_id);
    if (q.user_id) query = query.where('user_id', '=', q.user_id);
    if (q.action) query = query.where('action', '=', q.action);
    if (q.result) query = query.where('result', '=', q.result);
    if (q.event) {
      // A prefix, matched literally: `_` and `%` in event codes are not wildcards.
      const prefix = `${q.event.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
      query = query.where(sql<boolean>`event like ${prefix} escape '\\'`);
    }
    if (q.from) query = query.where('ts', '>=', q.from);
    if (q.to) query = query.where('ts', '<=', q.to);
    const s = parseJsonSearch(q.search, commitSearch);
    if (s.commit_sha) query = query.where(sql<boolean>`lower(sha) like ${containing(s.commit_sha.toLowerCase())} escape '\\'`);
    if (s.message) {
      // A commit's options are JSON written by recordCommit, its message first: the message's JSON
      // text is matched, up to the key that follows it (which an escaped message cannot contain).
      const text = JSON.stringify(s.message).slice(1, -1).toLowerCase();
      const pattern = `{"message":"${containing(text)}","changes":%`;
      query = query.where('event', '=', 'config.commit').where(sql<boolean>`lower(options) like ${pattern} escape '\\'`);
    }
    if (s.user_id) query = query.where('user_id', '=', s.user_id);
    if (s.committer) {
      const name = containing(s.committer.toLowerCase());
      query = query.where('user_id', 'in', (eb) =>
        eb
          .selectFrom('users')
          .select('users.id')
          .where((w) => w.or([w(sql`lower(users.fname)`, 'like', name), w(sql`lower(users.lname)`, 'like', name)])),
      );
    }
    if (s.change_sha) {
      const change = containing(s.change_sha.toLowerCase());
      query = query.where('event', '=', 'config.commit').where('sha', 'in', (eb) =>
        eb
          .selectFrom('config_changes')
          .select('config_changes.commit_sha')
          .where(sql<boolean>`config_changes.sha like ${change} escape '\\'`),
      );
    }
    // No entry carries labels: requiring one finds nothing, excluding them excludes nothing.
    if (s.labels_include && s.labels_include.length > 0) query = query.where(sql<boolean>`1 = 0`);
    if (s.start_date) query = query.where('ts', '>=', new Date(`${s.start_date.replace(' ', 'T')}Z`).toISOString());
    if (s.end_date) query = query.where('ts', '<', new Date(Date.parse(`${s.end_date.replace(' ', 'T')}Z`) + 1000).toISOString());
    const { total } = await query.select((eb) => eb.fn.countAll<number>().as('total')).executeTakeFirstOrThrow();
    const direction = q.sort_direction ?? 'desc';
    const ordered =
      q.sort_field === 'user_id'
        ? query.selectAll().orderBy('user_id', direction).orderBy('id', direction)
        : q.sort_field === 'type'
          ? query.selectAll().orderBy('event', direction).orderBy('id', direction)
          : query.selectAll().orderBy('id', direction);
    const rows = await ordered.offset(q.offset).limit(q.items_per_page).execute();
    // A session's start is shown with its end joined, as readers expect one line per session.
    const starts = rows.filter((r) => REMOTE_START.test(r.event)).map((r) => Number(r.id));
    const ends = new Map<number, Selectable<AuditTable>>();
    if (starts.length > 0) {
      // Only end entries: a console's attach and watch entries point at its start too.
      const found = await this.db.selectFrom('audit').selectAll().where('ref_id', 'in', starts).where('event', 'like', 'remote.%.end').execute();
      for (const end of found) ends.set(Number(end.ref_id), end);
    }
    return { total: Number(total), items: rows.map((r) => present(r, ends.get(Number(r.id)))) };
  }
}

function parseCheckpoint(options: string): CheckpointOptions | undefined {
  try {
    const o = JSON.parse(options) as Partial<CheckpointOptions>;
    if (typeof o.deleted_through === 'number' && typeof o.deleted_through_sha === 'string') return o as CheckpointOptions;
  } catch {
    // not a checkpoint's options: verified from the start
  }
  return undefined;
}

function present(row: Selectable<AuditTable>, end?: Selectable<AuditTable>): AuditEntry {
  const entry: AuditEntry = {
    ...row,
    id: Number(row.id),
    ref_id: row.ref_id === null ? null : Number(row.ref_id),
    options: JSON.parse(row.options) as unknown,
    message: '',
    type: row.event.split('.')[0],
    created: Math.floor(Date.parse(row.ts) / 1000),
  };
  const count = (v: number | null) => (v === null ? null : Number(v));
  if (end) {
    entry.ended_at = end.ts;
    entry.end_result = end.result;
    entry.end_reason = end.reason;
    entry.duration_ms = end.duration_ms;
    entry.bytes_in = end.bytes_in;
    entry.bytes_out = end.bytes_out;
  }
  // bigint columns may come back as text from PostgreSQL.
  entry.duration_ms = count(entry.duration_ms);
  entry.bytes_in = count(entry.bytes_in);
  entry.bytes_out = count(entry.bytes_out);
  entry.message = describe(entry, end);
  // A configuration commit reads as qbee's Commit: its message, the shas of its changes, its labels.
  if (row.event === 'config.commit' && entry.options && typeof entry.options === 'object') {
    const o = entry.options as { message?: unknown; changes?: unknown; labels?: unknown };
    if (typeof o.message === 'string') entry.message = o.message;
    entry.changes = Array.isArray(o.changes) ? (o.changes as string[]) : [];
    entry.labels = Array.isArray(o.labels) ? (o.labels as string[]) : [];
  }
  return entry;
}

const ARTICLE: Record<string, string> = {
  console: 'a console',
  tunnel: 'a tunnel',
  copy: 'a copy',
  reload: 'an agent reload',
  connect: 'a qbee-v1 connection',
};

/** The commit message: who did what, and how it went. */
export function describe(
  entry: Pick<AuditEntry, 'event' | 'user_email' | 'source_ip' | 'action' | 'device_id' | 'result' | 'reason'>,
  end?: { reason: string | null },
): string {
  if (entry.event === CHECKPOINT_EVENT) return `Retention: ${entry.reason ?? 'old entries deleted'}`;
  const who = entry.user_email ?? `an unidentified caller from ${entry.source_ip ?? 'an unknown address'}`;
  if (entry.event === REFUSALS_EVENT) return `${entry.user_email ?? 'an unidentified caller'}: ${entry.reason ?? 'refused calls summarised'}`;
  const outcome = entry.reason && entry.result !== 'ok' ? `${entry.result}: ${entry.reason}` : entry.result;
  if (entry.event.startsWith('remote.')) {
    const what = ARTICLE[entry.action] ?? entry.action;
    const on = entry.device_id ? ` on ${entry.device_id}` : '';
    if (entry.event.endsWith('.end')) return `${who} ended ${what}${on} (${outcome})`;
    if (entry.event.endsWith('.attach')) return `${who} re-attached to ${what}${on} (${outcome})`;
    if (entry.event.endsWith('.watch')) return `${who} watched ${what}${on}, read-only (${outcome})`;
    const ended = end ? `, ended: ${end.reason ?? 'ended'}` : '';
    return `${who} opened ${what}${on} (${outcome}${ended})`;
  }
  return `${who}: ${entry.event} ${entry.action} (${outcome})`;
}
