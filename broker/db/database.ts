import { AsyncLocalStorage } from 'node:async_hooks';
import fs from 'node:fs';
import path from 'node:path';
import { Kysely, Migrator, PostgresDialect, SqliteDialect, sql, type MigrationProvider, type Transaction } from 'kysely';
import SqliteDatabase from 'better-sqlite3';
import pg from 'pg';
import type { Logger } from 'pino';
import { BoundedMap } from '../../shared/bounded-map.js';
import { ensurePrivateFile, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, tighten } from '../data-dir.js';
import type { Database } from './schema.js';
import type { Dialect } from './dialect.js';
import { migrations } from './migrations/index.js';

export type { Dialect } from './dialect.js';
export type Db = Kysely<Database>;

export interface Store {
  /** Resolves to the ambient transaction while `transaction` runs (see `ambient`). */
  db: Db;
  dialect: Dialect;
  /**
   * Runs `work` in one database transaction that every use of `db` in its async context joins,
   * nested `db.transaction()` calls included: the work commits or rolls back as a whole.
   */
  transaction<T>(work: (trx: Transaction<Database>) => Promise<T>): Promise<T>;
  /** Runs `task` once the open transaction commits (never if it rolls back), or now outside one. */
  afterCommit(task: () => void): void;
  /**
   * Runs `task` if the open transaction rolls back (never if it commits; never outside one): what
   * must outlive a failed request, such as a counted attempt, is written again then.
   */
  afterRollback(task: () => void): void;
  /** Whether a transaction is open in the current async context. */
  inTransaction(): boolean;
  /**
   * Statements sent to the database so far (transaction control included, migrations too): the
   * work per request or per session counted, steadier than timings on a shared machine.
   */
  statements(): number;
  close(): Promise<void>;
}

/** The transaction open in an async context, and what waits for its commit. */
interface Frame {
  trx: Transaction<Database>;
  afterCommit: Array<() => void>;
  afterRollback: Array<() => void>;
  /** false once committed or rolled back: timers and listeners set up inside still carry the frame. */
  open: boolean;
}

/**
 * A Db that answers with the transaction open in the current async context, if any. Services keep
 * the Db they were built with and still join a transaction the router opened around them: SQLite
 * has one connection, so a query outside the open transaction would wait for it forever.
 */
function ambient(root: Db, current: AsyncLocalStorage<Frame>): Db {
  const openFrame = () => {
    const frame = current.getStore();
    return frame?.open ? frame : undefined;
  };
  /** Transactions begun and not yet committed or rolled back (nested ones join theirs, uncounted). */
  let running = 0;
  const run = async <T>(work: (trx: Transaction<Database>) => Promise<T>): Promise<T> => {
    const open = openFrame();
    // A nested transaction joins the open one (Kysely refuses transaction() on a Transaction).
    if (open) return work(open.trx);
    const frames: Frame[] = [];
    let committed = false;
    running += 1;
    try {
      const result = await root.transaction().execute((trx) => {
        const frame: Frame = { trx, afterCommit: [], afterRollback: [], open: true };
        frames.push(frame);
        return current.run(frame, () => work(trx));
      });
      committed = true;
      for (const frame of frames) {
        frame.open = false;
        for (const task of frame.afterCommit) task();
      }
      return result;
    } finally {
      for (const frame of frames) {
        frame.open = false;
        if (!committed) for (const task of frame.afterRollback) task();
      }
      // On Node 20 an entered AsyncLocalStorage keeps an async hook and V8 promise hooks on for the
      // whole process: every promise, tick, timer and socket write, a console's keystrokes included,
      // ran its init hook. Off again once no transaction runs (the next `current.run` turns it
      // on); frames left on resources made meanwhile are closed, so they join nothing.
      running -= 1;
      if (running === 0) current.disable();
    }
  };
  return new Proxy(root, {
    get(target, property) {
      if (property === 'transaction') return () => ({ execute: run });
      const subject = openFrame()?.trx ?? target;
      // Kysely keeps its state in private fields: getters and methods must see the real object.
      const value = Reflect.get(subject, property, subject);
      return typeof value === 'function' ? value.bind(subject) : value;
    },
  });
}

/**
 * Kysely prepares every query anew; preparing costs more than running a small query. The broker runs
 * a bounded set of query shapes, so prepared statements are kept by their SQL text.
 */
function withStatementCache(sqlite: SqliteDatabase.Database, max = 500): SqliteDatabase.Database {
  const cache = new BoundedMap<string, SqliteDatabase.Statement>(max);
  const prepare = (source: string) => {
    let statement = cache.get(source);
    if (!statement) {
      statement = sqlite.prepare(source);
      cache.set(source, statement);
    }
    return statement;
  };
  return new Proxy(sqlite, {
    get(target, property, receiver) {
      if (property === 'prepare') return prepare;
      const value = Reflect.get(target, property, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * What a lost or hung database costs a PostgreSQL connection, at most (a partition, a failover):
 * connecting, a statement (on the server), a reply (on the client: the connection is then dropped,
 * as what it was doing is unknown), a transaction left idle by a broker cut off mid-way (its locks,
 * such as the audit chain's, go with it), and dead peers found by TCP keepalive. Once the database
 * answers again new connections are made: the broker recovers by itself.
 */
export const PG_TIMEOUTS = {
  connectionTimeoutMillis: 10_000,
  statement_timeout: 60_000,
  query_timeout: 65_000,
  idle_in_transaction_session_timeout: 30_000,
  idleTimeoutMillis: 30_000,
  keepAlive: true,
  keepAliveInitialDelayMillis: 10_000,
} as const;

/** How much sooner than the client's reply timeout the server gives up on a statement. */
const STATEMENT_BEFORE_REPLY_MS = 5000;

/**
 * PG_TIMEOUTS with another reply timeout (DATABASE_QUERY_TIMEOUT_MS): the statement timeout stays
 * 5 s under it, so the server normally ends a slow statement (an error, the connection kept) before
 * the client gives up on the reply (the connection dropped).
 */
export function pgTimeouts(queryTimeoutMs: number = PG_TIMEOUTS.query_timeout) {
  return { ...PG_TIMEOUTS, query_timeout: queryTimeoutMs, statement_timeout: queryTimeoutMs - STATEMENT_BEFORE_REPLY_MS };
}

/**
 * An idle connection that fails (the database restarted, the network went) is logged and dropped by
 * the pool rather than crashing the process; so is one lost while taken from the pool between two
 * statements (a transaction), whose work then fails on its next statement (the pool drops it when it
 * comes back). One whose reply timed out is closed so that it does not go back to the pool still
 * waiting for that reply.
 */
function watchPool(pool: pg.Pool, logger?: Pick<Logger, 'warn'>): void {
  // Logged by the connection's own listener below (the pool re-emits only the errors of idle ones).
  pool.on('error', () => {});
  pool.on('connect', (client) => {
    // The pool listens only while a connection is idle: without this, one lost while in use ends the process.
    client.on('error', (err) => logger?.warn({ error: err.message, errorCode: (err as { code?: string }).code }, 'database connection lost'));
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      const result = query(...args);
      if (result instanceof Promise) {
        result.catch((err: Error) => {
          if (err?.message === 'Query read timeout') (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
        });
      }
      return result;
    };
  });
}

/** Whether an error means the database could not be reached (as opposed to refusing what was asked). */
export function isUnreachable(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  const code = typeof e?.code === 'string' ? e.code : '';
  const message = typeof e?.message === 'string' ? e.message : '';
  return (
    ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'EPIPE', '57P03', '57P01', '08006', '08001'].includes(
      code,
    ) || /timeout|terminated unexpectedly|Connection terminated/i.test(message)
  );
}

/** Opens the store named by `url` (sqlite:<file> or postgres://...) and brings its schema up to date. */
export async function openStore(url: string, schema = '', logger?: Pick<Logger, 'warn'>, queryTimeoutMs?: number): Promise<Store> {
  let db: Db;
  let dialect: Dialect;
  let migrationDb: Db | undefined;
  let statements = 0;
  // Kysely calls it after each statement it sent, `begin` and `commit` included.
  const count = () => void (statements += 1);
  if (url.startsWith('sqlite:')) {
    const file = url.slice('sqlite:'.length);
    if (file !== ':memory:') {
      // SQLite makes -wal and -shm with the mode of the database file: a private file keeps all three private.
      fs.mkdirSync(path.dirname(path.resolve(file)), { recursive: true, mode: PRIVATE_DIR_MODE });
      ensurePrivateFile(file, logger);
      for (const extra of ['-wal', '-shm']) tighten(`${file}${extra}`, PRIVATE_FILE_MODE, logger);
    }
    const sqlite = new SqliteDatabase(file);
    sqlite.pragma('journal_mode = WAL'); // readers never wait for the writer; a crash keeps every commit
    sqlite.pragma('synchronous = NORMAL');
    sqlite.pragma('foreign_keys = ON');
    sqlite.pragma('busy_timeout = 5000');
    db = new Kysely<Database>({ dialect: new SqliteDialect({ database: withStatementCache(sqlite) }), log: count });
    dialect = 'sqlite';
  } else {
    const timeouts = pgTimeouts(queryTimeoutMs);
    const pool = new pg.Pool({ connectionString: url, max: 10, ...timeouts, ...(schema ? { options: `-c search_path=${schema}` } : {}) });
    watchPool(pool, logger);
    try {
      const client = await pool.connect();
      try {
        if (schema) await client.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
      } finally {
        client.release();
      }
    } catch (err) {
      // Unreachable (or refusing): nothing is left open behind, so the caller may try again.
      await pool.end().catch(() => {});
      throw err;
    }
    db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }), log: count });
    dialect = 'postgres';
    // Migrations may rewrite large tables: they run without the statement timeouts of the pool.
    const { statement_timeout: _s, query_timeout: _q, idle_in_transaction_session_timeout: _i, ...patient } = timeouts;
    const migrationPool = new pg.Pool({ connectionString: url, max: 2, ...patient, ...(schema ? { options: `-c search_path=${schema}` } : {}) });
    watchPool(migrationPool, logger);
    migrationDb = new Kysely<Database>({ dialect: new PostgresDialect({ pool: migrationPool }) });
  }
  const all = migrations(dialect);
  // A store that records exactly the current migrations (every start but the first after an
  // upgrade) has nothing to migrate: one query instead of Kysely's look for its own tables, which
  // introspects every schema of the database and takes its lock.
  if (await recordsMigrations(db, Object.keys(all))) {
    await migrationDb?.destroy();
    return storeOn(db, dialect, () => statements);
  }
  const provider: MigrationProvider = { getMigrations: async () => all };
  // With a schema, the migration tables live in it too: otherwise a second store on the same database
  // (another schema) sees the first one's tables and skips creating its own.
  const migrator = new Migrator({ db: migrationDb ?? db, provider, ...(schema && dialect === 'postgres' ? { migrationTableSchema: schema } : {}) });
  // Kysely's migrator looks for its own tables by introspecting every schema of the database; a schema
  // another tenant drops at that moment makes PostgreSQL's catalog functions throw (3F000, 42P01, and
  // 42703 from pg_get_serial_sequence on a column whose table just went) before any migration ran. That is not ours: look again, a few times.
  let outcome = await migrator.migrateToLatest();
  for (let attempt = 1; attempt < 10 && outcome.error && !outcome.results?.length && isConcurrentCatalogChange(outcome.error); attempt++) {
    await new Promise((resolve) => setTimeout(resolve, 50 * attempt));
    outcome = await migrator.migrateToLatest();
  }
  await migrationDb?.destroy();
  const { error, results } = outcome;
  if (error) {
    await db.destroy();
    const failed = results?.find((r) => r.status === 'Error');
    throw new Error(`database migration ${failed?.migrationName ?? ''} failed: ${(error as Error).message ?? error}`);
  }
  return storeOn(db, dialect, () => statements);
}

/** Whether the store's migration table records exactly `names` (false when it has none). */
async function recordsMigrations(db: Db, names: string[]): Promise<boolean> {
  try {
    const { rows } = await sql<{ name: string }>`SELECT name FROM kysely_migration`.execute(db);
    const recorded = rows.map((r) => r.name).sort();
    const wanted = [...names].sort();
    return recorded.length === wanted.length && recorded.every((name, i) => name === wanted[i]);
  } catch {
    return false;
  }
}

/** The Store over an open, migrated database. */
function storeOn(root: Db, dialect: Dialect, statements: () => number): Store {
  const current = new AsyncLocalStorage<Frame>();
  const shared = ambient(root, current);
  return {
    db: shared,
    dialect,
    transaction: (work) => shared.transaction().execute(work),
    afterCommit: (task) => {
      const open = current.getStore();
      if (open?.open) open.afterCommit.push(task);
      else task();
    },
    afterRollback: (task) => {
      const open = current.getStore();
      if (open?.open) open.afterRollback.push(task);
    },
    inTransaction: () => current.getStore()?.open === true,
    statements,
    close: () => root.destroy(),
  };
}

/** A catalog object that vanished under an introspection query: another schema or table dropped meanwhile. */
function isConcurrentCatalogChange(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return code === '3F000' || code === '42P01' || code === '42703';
}

/** Drops a PostgreSQL schema (test clean-up). */
export async function dropSchema(url: string, schema: string): Promise<void> {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await pool.end();
  }
}

export { sql };
