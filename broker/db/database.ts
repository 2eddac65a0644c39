import fs from 'node:fs';
import path from 'node:path';
import { Kysely, Migrator, PostgresDialect, SqliteDialect, sql, type MigrationProvider } from 'kysely';
import SqliteDatabase from 'better-sqlite3';
import pg from 'pg';
import type { Logger } from 'pino';
import { ensurePrivateFile, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, tighten } from '../data-dir.js';
import type { Database } from './schema.js';
import { migrations } from './migrations.js';

export type Dialect = 'sqlite' | 'postgres';
export type Db = Kysely<Database>;

export interface Store {
  db: Db;
  dialect: Dialect;
  close(): Promise<void>;
}

// int8 (bigint, bigserial, count(*)) as a JS number: our counters stay far below 2^53.
pg.types.setTypeParser(20, (value) => Number(value));

/**
 * Kysely prepares every query anew; preparing costs more than running a small query. The broker runs
 * a bounded set of query shapes, so prepared statements are kept by their SQL text.
 */
function withStatementCache(sqlite: SqliteDatabase.Database, max = 500): SqliteDatabase.Database {
  const cache = new Map<string, SqliteDatabase.Statement>();
  const prepare = (source: string) => {
    let statement = cache.get(source);
    if (!statement) {
      statement = sqlite.prepare(source);
      if (cache.size >= max) cache.delete(cache.keys().next().value as string);
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

/** Opens the store named by `url` (sqlite:<file> or postgres://...) and brings its schema up to date. */
export async function openStore(url: string, schema = '', logger?: Pick<Logger, 'warn'>): Promise<Store> {
  let db: Db;
  let dialect: Dialect;
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
    db = new Kysely<Database>({ dialect: new SqliteDialect({ database: withStatementCache(sqlite) }) });
    dialect = 'sqlite';
  } else {
    const pool = new pg.Pool({
      connectionString: url,
      max: 10,
      ...(schema ? { options: `-c search_path=${schema}` } : {}),
    });
    if (schema) {
      const client = await pool.connect();
      try {
        await client.query(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
      } finally {
        client.release();
      }
    }
    db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
    dialect = 'postgres';
  }
  const all = migrations(dialect);
  const provider: MigrationProvider = { getMigrations: async () => all };
  // With a schema, the migration tables live in it too: otherwise a second store on the same database
  // (another schema) sees the first one's tables and skips creating its own.
  const migrator = new Migrator({ db, provider, ...(schema && dialect === 'postgres' ? { migrationTableSchema: schema } : {}) });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    await db.destroy();
    const failed = results?.find((r) => r.status === 'Error');
    throw new Error(`database migration ${failed?.migrationName ?? ''} failed: ${(error as Error).message ?? error}`);
  }
  return { db, dialect, close: () => db.destroy() };
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
