/**
 * What the writers of users and of roles share: the identity lock they serialise on (the checks of
 * one change — seats, the last administrator, a role still in use — hold when it commits), and the
 * LIKE pattern of their list searches. No table is queried here.
 */
import { sql, type Kysely } from 'kysely';
import type { Dialect } from '../db/database.js';
import type { Database } from '../db/schema.js';

/** The store, or a transaction on it. */
export type Executor = Kysely<Database>;

// An arbitrary constant naming the advisory lock that serialises changes to users and roles.
const IDENTITY_LOCK = 727_001;

/**
 * Serialises writers of users and roles for the rest of the transaction, so that checks made in
 * it (seats, the last administrator, a role still in use) hold when it commits. SQLite runs one
 * write transaction at a time already; PostgreSQL takes a transaction-scoped advisory lock.
 */
export async function lockIdentity(db: Executor, dialect: Dialect): Promise<void> {
  if (dialect === 'postgres') await sql`SELECT pg_advisory_xact_lock(${IDENTITY_LOCK})`.execute(db);
}

/** A unique constraint refused the write (SQLite or PostgreSQL). */
export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string };
  return e?.code === '23505' || e?.code === 'SQLITE_CONSTRAINT_UNIQUE' || e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

/**
 * A change to users or roles: one transaction under the identity lock. A unique constraint that
 * refuses a write (a race the checks made in `work` could not see) surfaces as `duplicate()`,
 * the caller's 409.
 */
export async function writeIdentity<T>(db: Executor, dialect: Dialect, work: (trx: Executor) => Promise<T>, duplicate: () => Error): Promise<T> {
  try {
    return await db.transaction().execute(async (trx) => {
      await lockIdentity(trx, dialect);
      return work(trx);
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw duplicate();
    throw err;
  }
}

/** `%text%` for LIKE, with the wildcards of the text itself escaped (used with ESCAPE '\'). */
export function likePattern(text: string): string {
  return `%${text.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}
