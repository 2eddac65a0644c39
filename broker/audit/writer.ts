import { AsyncResource } from 'node:async_hooks';
import type { CompiledQuery, RawBuilder } from 'kysely';
import { recordSessionHoldersQuery, releaseSessionsQuery } from '../cluster/audit-queries.js';
import { sql, type Db, type Dialect } from '../db/database.js';
import type { AuditTable } from '../db/schema.js';
import { asStored, entrySha, HASHED_COLUMNS } from './chain.js';
import { REMOTE_END_LIKE } from './entries.js';

/** An entry as a writer hands it in: the chain gives it its id, time and sha. */
export type NewEntry = Omit<AuditTable, 'id' | 'sha' | 'ts' | 'ref_id' | 'ended_at' | 'duration_ms' | 'bytes_in' | 'bytes_out'> &
  Partial<Pick<AuditTable, 'ref_id' | 'duration_ms' | 'bytes_in' | 'bytes_out'>>;

/** One entry to append, with what rides in its transaction. */
export interface Append {
  entry: NewEntry;
  /** A live session's start: the broker holding it is recorded with it (a sweep never sees a live start without its owner). */
  owner?: string;
  /** A session's end (the id of its start): written only when that session has no end yet; its broker is released. */
  endOf?: number;
}

/**
 * Taken before the chain's head is read, so writers sharing a database append one at a time: on
 * PostgreSQL an advisory lock per schema; on SQLite a write that changes nothing takes the file's
 * write lock (a transaction that read first could not upgrade once another connection wrote).
 * These statements are for entries joining a transaction already open; a group of the writer's own
 * takes the lock as it begins (BEGIN_LOCKED).
 */
export const CHAIN_LOCK = {
  postgres: sql`select pg_advisory_xact_lock(hashtext('fleet-audit-chain:' || current_schema()))`,
  sqlite: sql`update audit set id = id where 0`,
};

/**
 * A group's transaction begun with the chain's lock held, in one round trip: on SQLite `begin
 * immediate` (the write lock from the start, as the no-op UPDATE took it); on PostgreSQL `begin` and
 * the advisory lock sent together (no parameters: one simple-protocol message, two statements run in
 * turn, so the head is still read by a later statement, from a snapshot taken after the lock).
 */
const BEGIN_LOCKED = {
  postgres: sql.raw(`begin; select pg_advisory_xact_lock(hashtext('fleet-audit-chain:' || current_schema()))`),
  sqlite: sql`begin immediate`,
};

const COMMIT = sql`commit`;
const ROLLBACK = sql`rollback`;

/** Rows per INSERT: 19 columns each stays far below SQLite's and PostgreSQL's bound on parameters. */
const ROWS_PER_INSERT = 100;
/** The columns an INSERT of the writer names, in this order: every column of the table, the sha last. */
const INSERTED_COLUMNS = [...HASHED_COLUMNS, 'sha'] as const satisfies ReadonlyArray<keyof AuditTable>;
/** Entries in one transaction at most: a burst is written in groups of this size. */
const MAX_GROUP = 500;
/**
 * How long the first entry of a group waits for others (group commit's window): entries queued
 * within it share one transaction and one lock. Groups that queue while one commits wait no longer.
 */
export const GROUP_WINDOW_MS = 1;
/**
 * Under load, the least time from one group's start to the next one's: after a group of several
 * entries (others are arriving too), an entry that arrives within this of that group's start waits
 * until then (at most this long), so that entries arriving together share a group instead of each few
 * taking a 1 ms window of their own. Every group costs about the same whatever its size (the lock, the
 * head's read, the commit and its pages: 9–13 pages on SQLite), and under sessions opened and closed
 * 32 at a time about 4 entries shared each at 1 ms. Once QUIET_AFTER_SINGLES groups in a row held one
 * entry each (a lone caller, or one writing one entry after another, from the start) the next waits
 * GROUP_WINDOW_MS only, as before. (PostgreSQL's `commit_delay` applies likewise only when other
 * transactions are active.)
 */
export const BUSY_WINDOW_MS = 4;
/** Groups of one entry in a row after which the writer counts as quiet again (GROUP_WINDOW_MS). */
export const QUIET_AFTER_SINGLES = 8;

/**
 * An entry's text as both databases can keep it: NUL (which PostgreSQL's text refuses) and lone
 * surrogates (which UTF-8 cannot hold) become U+FFFD, so the row written, its sha and the row
 * `verify` reads back are one text. Options are JSON, whose escapes already keep both.
 */
function storable(entry: NewEntry): NewEntry {
  const out: Record<string, unknown> = { ...entry };
  for (const [key, value] of Object.entries(out)) if (typeof value === 'string') out[key] = asStored(value).replaceAll('\u0000', '\ufffd');
  return out as NewEntry;
}

/**
 * The statements every group sends, compiled once (those naming ids or rows, once per count of them)
 * and sent again with the group's parameters: building and compiling them with Kysely's query builder
 * at every group was as much of the broker's work as SQLite running them. The same text, the same
 * parameters: a compiled statement is kept only when its parameters are the ones asked for, in the
 * order this fills them in (checked on its first compile; otherwise it is compiled every time). Kept
 * texts are bounded by the counts: ids up to MAX_GROUP, rows up to ROWS_PER_INSERT.
 */
export class GroupStatements {
  private headQuery?: CompiledQuery<{ id: number | string; sha: string }>;
  private readonly releases = new Map<number, CompiledQuery | null>();
  private readonly endeds = new Map<number, CompiledQuery<{ ref_id: number | string | null }> | null>();
  private readonly inserts = new Map<number, CompiledQuery | null>();
  private readonly holders = new Map<number, CompiledQuery | null>();
  private readonly controls = new Map<RawBuilder<unknown>, CompiledQuery>();
  /** Statements compiled (for tests: a group's are compiled once). */
  compiled = 0;

  /** A transaction's control (BEGIN_LOCKED, commit, rollback): one of a few constant texts without parameters. */
  control(trx: Db, statement: RawBuilder<unknown>): CompiledQuery {
    let compiled = this.controls.get(statement);
    if (!compiled) {
      this.compiled += 1;
      compiled = statement.compile(trx);
      this.controls.set(statement, compiled);
    }
    return compiled;
  }

  /** The chain's head: the last entry's id and sha. */
  head(trx: Db): CompiledQuery<{ id: number | string; sha: string }> {
    if (!this.headQuery) {
      this.compiled += 1;
      this.headQuery = trx.selectFrom('audit').select(['id', 'sha']).orderBy('id', 'desc').limit(1).compile();
    }
    return this.headQuery;
  }

  /** Releases the sessions ending (cluster/audit-queries.ts releaseSessionsQuery). */
  release(trx: Db, ids: number[]): CompiledQuery {
    return this.reused(this.releases, ids.length, ids, () => releaseSessionsQuery(trx, ids).compile());
  }

  /** Which of these sessions already have an end entry. */
  ended(trx: Db, ids: number[]): CompiledQuery<{ ref_id: number | string | null }> {
    return this.reused(this.endeds, ids.length, [...ids, REMOTE_END_LIKE], () =>
      trx.selectFrom('audit').select('ref_id').where('ref_id', 'in', ids).where('event', 'like', REMOTE_END_LIKE).compile(),
    );
  }

  /**
   * Appends these rows (at most ROWS_PER_INSERT). Every row names every column, in INSERTED_COLUMNS'
   * order: a value the entry left undefined is sent as null, which the chain hashed it as.
   */
  insert(trx: Db, rows: AuditTable[]): CompiledQuery {
    const parameters: unknown[] = [];
    for (const row of rows) for (const column of INSERTED_COLUMNS) parameters.push(row[column] ?? null);
    return this.reused(this.inserts, rows.length, parameters, () => {
      const named = rows.map((row) => Object.fromEntries(INSERTED_COLUMNS.map((column) => [column, row[column] ?? null])) as unknown as AuditTable);
      return trx.insertInto('audit').values(named).compile();
    });
  }

  /** Records the brokers holding the sessions starting (cluster/audit-queries.ts recordSessionHoldersQuery). */
  holdersOf(trx: Db, owners: { audit_id: number; broker_id: string }[]): CompiledQuery {
    const parameters = owners.flatMap((o) => [o.audit_id, o.broker_id]);
    return this.reused(this.holders, owners.length, parameters, () => recordSessionHoldersQuery(trx, owners).compile());
  }

  /** Compiled statements kept (for tests: bounded whatever the groups' sizes). */
  kept(): number {
    return this.releases.size + this.endeds.size + this.inserts.size + this.holders.size + this.controls.size + (this.headQuery ? 1 : 0);
  }

  private reused<R>(kept: Map<number, CompiledQuery<R> | null>, count: number, parameters: unknown[], compile: () => CompiledQuery<R>): CompiledQuery<R> {
    const known = kept.get(count);
    if (known) return { ...known, parameters };
    this.compiled += 1;
    const fresh = compile();
    // Kept up to MAX_GROUP ids (a group's ends) or ROWS_PER_INSERT rows: a few hundred texts at most.
    if (known === undefined && kept.size < MAX_GROUP) {
      const same = fresh.parameters.length === parameters.length && fresh.parameters.every((p, i) => p === parameters[i]);
      kept.set(count, same ? fresh : null);
    }
    return fresh;
  }
}

interface Queued extends Append {
  resolve(id: number | undefined): void;
  reject(err: unknown): void;
}

/**
 * The audit trail's one writer per broker: group commit. Entries are queued; whenever the writer is
 * idle it takes everything queued so far (all that arrived while the previous group was committing,
 * or within the group's window: GROUP_WINDOW_MS, BUSY_WINDOW_MS under load) and appends it in one
 * transaction: one chain lock, one read of the head, one INSERT per hundred rows, one commit. Each
 * caller's promise settles once its group committed, so an entry reported written is durable (a
 * start before the session's first byte). The chain is the one `verify` walks: each row's sha covers
 * the previous row's, in id order.
 *
 * A group that fails (one entry the database refuses) is written again entry by entry, so only that
 * entry's caller sees the failure.
 */
export class AuditWriter {
  private queue: Queued[] = [];
  private readonly statements = new GroupStatements();
  private running?: Promise<void>;
  /** When the last group began (performance.now()), and the groups of one entry in a row since one of several: for BUSY_WINDOW_MS. */
  private lastGroupAt = Number.NEGATIVE_INFINITY;
  private singles = QUIET_AFTER_SINGLES;
  /** Groups commit outside any transaction open where their entries were queued (see database.ts `ambient`). */
  private readonly detached = AsyncResource.bind((work: () => Promise<void>) => work());

  constructor(
    private readonly db: Db,
    private readonly dialect: Dialect,
  ) {}

  /** Queues an entry; resolves with its id once committed, or undefined when it was an end already written. */
  submit(append: Append): Promise<number | undefined> {
    return new Promise((resolve, reject) => {
      this.queue.push({ ...append, resolve, reject });
      if (this.running) return;
      // Started after the group's window (longer while groups of several follow each other:
      // BUSY_WINDOW_MS): what else arrives meanwhile joins the group.
      const busy = this.singles < QUIET_AFTER_SINGLES ? Math.ceil(this.lastGroupAt + BUSY_WINDOW_MS - performance.now()) : 0;
      const wait = Math.max(GROUP_WINDOW_MS, busy);
      this.running = new Promise<void>((done) => setTimeout(() => void this.detached(() => this.drain()).finally(done), wait));
    });
  }

  /** Resolves once everything queued so far is committed (or failed). */
  async flushed(): Promise<void> {
    while (this.running) await this.running;
  }

  private async drain(): Promise<void> {
    this.lastGroupAt = performance.now();
    this.singles = this.queue.length > 1 ? 0 : this.singles + 1;
    try {
      while (this.queue.length > 0) {
        const group = this.queue.splice(0, MAX_GROUP);
        try {
          const ids = await this.write(group);
          group.forEach((q, i) => q.resolve(ids[i]));
        } catch (err) {
          if (group.length === 1) {
            group[0].reject(err);
            continue;
          }
          for (const q of group) {
            try {
              q.resolve((await this.write([q]))[0]);
            } catch (one) {
              q.reject(one);
            }
          }
        }
      }
    } finally {
      this.running = undefined;
    }
  }

  /**
   * Appends `group` in one transaction (joining the caller's when one is open); answers each entry's
   * id, undefined for an end that was already written.
   */
  async write(group: Append[]): Promise<Array<number | undefined>> {
    if (!this.db.isTransaction) return this.locked((trx) => this.append(trx, group));
    return this.db.transaction().execute(async (trx) => {
      await CHAIN_LOCK[this.dialect].execute(trx);
      return this.append(trx, group);
    });
  }

  /**
   * `work` in a transaction that holds the chain's lock from its first round trip (BEGIN_LOCKED):
   * readers go on; another writer, of this process or another, waits for the commit.
   */
  private locked<T>(work: (trx: Db) => Promise<T>): Promise<T> {
    return this.db.connection().execute(async (connection) => {
      let result: T;
      try {
        await connection.executeQuery(this.statements.control(connection, BEGIN_LOCKED[this.dialect]));
        result = await work(connection);
        await connection.executeQuery(this.statements.control(connection, COMMIT));
      } catch (err) {
        // Also when the begin half failed (PostgreSQL's lock timed out after its `begin`): a pooled
        // connection never goes back inside an aborted transaction. Nothing to roll back when the
        // database already did (or never began): the error is the caller's.
        await connection.executeQuery(this.statements.control(connection, ROLLBACK)).catch(() => {});
        throw err;
      }
      return result;
    });
  }

  /** The group's rows after the chain's head, under its lock (see write). */
  private async append(trx: Db, group: Append[]): Promise<Array<number | undefined>> {
    const ending = group.flatMap((q) => (q.endOf === undefined ? [] : [q.endOf]));
    const ended = new Set<number>();
    if (ending.length > 0) {
      await trx.executeQuery(this.statements.release(trx, ending));
      const found = await trx.executeQuery(this.statements.ended(trx, ending));
      for (const row of found.rows) ended.add(Number(row.ref_id));
    }
    const head = (await trx.executeQuery(this.statements.head(trx))).rows[0];
    let id = head ? Number(head.id) : 0;
    let previous = head?.sha ?? '';
    // Read under the lock: times rise with ids across writers, as the retention's cut-off expects.
    const now = new Date().toISOString();
    const rows: AuditTable[] = [];
    const ids: Array<number | undefined> = [];
    const owners: { audit_id: number; broker_id: string }[] = [];
    for (const q of group) {
      // One session, one end: whoever wrote first (another broker, or an earlier entry of this group).
      if (q.endOf !== undefined) {
        if (ended.has(q.endOf)) {
          ids.push(undefined);
          continue;
        }
        ended.add(q.endOf);
      }
      id += 1;
      const row: Omit<AuditTable, 'sha'> = {
        ref_id: null,
        ended_at: null,
        duration_ms: null,
        bytes_in: null,
        bytes_out: null,
        ...storable(q.entry),
        id,
        ts: now,
      };
      previous = entrySha(previous, row);
      rows.push({ ...row, sha: previous });
      ids.push(id);
      if (q.owner) owners.push({ audit_id: id, broker_id: q.owner });
    }
    for (let i = 0; i < rows.length; i += ROWS_PER_INSERT) await trx.executeQuery(this.statements.insert(trx, rows.slice(i, i + ROWS_PER_INSERT)));
    if (owners.length > 0) await trx.executeQuery(this.statements.holdersOf(trx, owners));
    return ids;
  }
}
