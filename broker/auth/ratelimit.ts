import { sql } from 'kysely';
import type { Store } from '../db/database.js';
import { rateLimited, type DomainError } from '../errors.js';

/** What a limiter needs of the store: queries, and a word when the open transaction rolls back. */
export type LimitStore = Pick<Store, 'db' | 'afterRollback'>;

/**
 * A fixed-window counter per key (account, address), kept in the database (`rate_limits`) so that
 * every broker on one database counts the same attempts. Counting is one atomic upsert: a window
 * that has ended starts afresh, otherwise the count goes up, and the new count comes back
 * (`INSERT … ON CONFLICT DO UPDATE … RETURNING`, the same statement on SQLite and PostgreSQL).
 *
 * Inside a request's transaction the upsert joins it (on PostgreSQL the row stays locked until the
 * request ends, so parallel attempts on one key queue up and cannot exceed the limit). A refused
 * request rolls its transaction back, and its count with it: the attempt is then counted again
 * once the rollback is done, so a failed attempt is never forgotten.
 *
 * Expired windows are deleted by the periodic sweep (broker/db/expiry.ts).
 */
export class RateLimiter {
  constructor(
    private readonly store: LimitStore,
    /** Distinguishes limiters sharing the table: `<name>:<key>`. */
    private readonly name: string,
    private readonly limit: number,
    private readonly windowMs: number,
  ) {}

  /** Counts one attempt; throws rate_limited (429 with Retry-After) once the key is over its limit. */
  async hit(key: string, now = Date.now()): Promise<void> {
    const retry = await this.count(key, now);
    if (retry > 0) throw tooManyAttempts(retry);
  }

  /** Counts one attempt; answers the seconds until the window ends once the key is over its limit, else 0. */
  async count(key: string, now = Date.now()): Promise<number> {
    const row = await this.increment(key, now);
    this.store.afterRollback(() => {
      this.increment(key, now).catch(() => undefined);
    });
    const start = Number(row.window_start);
    return row.count > this.limit ? Math.max(1, Math.ceil((start + this.windowMs - now) / 1000)) : 0;
  }

  /**
   * Gives back one attempt counted by `hit` (a successful sign-in does not use up the address's
   * budget). Counting first and giving back afterwards keeps parallel attempts within the limit.
   */
  async release(key: string, now = Date.now()): Promise<void> {
    await this.store.db
      .updateTable('rate_limits')
      .set((eb) => ({ count: eb('count', '-', 1) }))
      .where('key', '=', this.keyOf(key))
      .where('expires_at', '>', now)
      .where('count', '>', 0)
      .execute();
  }

  async reset(key: string): Promise<void> {
    await this.store.db.deleteFrom('rate_limits').where('key', '=', this.keyOf(key)).execute();
  }

  private keyOf(key: string): string {
    return `${this.name}:${key}`;
  }

  private increment(key: string, now: number): Promise<{ count: number; window_start: number | string }> {
    const ended = sql<boolean>`rate_limits.expires_at <= ${now}`;
    return this.store.db
      .insertInto('rate_limits')
      .values({ key: this.keyOf(key), window_start: now, count: 1, expires_at: now + this.windowMs })
      .onConflict((oc) =>
        oc.column('key').doUpdateSet({
          window_start: sql`CASE WHEN ${ended} THEN ${now} ELSE rate_limits.window_start END`,
          expires_at: sql`CASE WHEN ${ended} THEN ${now + this.windowMs} ELSE rate_limits.expires_at END`,
          count: sql`CASE WHEN ${ended} THEN 1 ELSE rate_limits.count + 1 END`,
        }),
      )
      .returning(['count', 'window_start'])
      .executeTakeFirstOrThrow();
  }
}

/** rate_limited: the wait in seconds (`retry_after`, and the Retry-After header) and in minutes for people. */
export function tooManyAttempts(retryAfterSeconds: number): DomainError {
  const minutes = Math.max(1, Math.ceil(retryAfterSeconds / 60));
  return rateLimited('rate_limited', `Too many attempts; try again in ${minutes} minute${minutes === 1 ? '' : 's'}.`, retryAfterSeconds, {
    retry_after: retryAfterSeconds,
  });
}
