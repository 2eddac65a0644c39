import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../db/database.js';
import { DomainError } from '../errors.js';
import { RateLimiter } from './ratelimit.js';

async function refusal(attempt: Promise<unknown>): Promise<DomainError | undefined> {
  try {
    await attempt;
  } catch (err) {
    return err as DomainError;
  }
  return undefined;
}

let store: Store;
beforeEach(async () => {
  store = await openStore('sqlite::memory:');
});
afterEach(async () => {
  await store.close();
});

describe('RateLimiter', () => {
  it('refuses the attempt past the limit with 429 and Retry-After until the window ends', async () => {
    const limiter = new RateLimiter(store, 't', 3, 60_000);
    for (let i = 0; i < 3; i++) await limiter.hit('k', 1000);
    const err = await refusal(limiter.hit('k', 11_000));
    expect(err?.kind).toBe('rate_limited');
    expect(err?.code).toBe('rate_limited');
    expect(err?.extras.retryAfterSeconds).toBe(50);
    expect(await refusal(limiter.hit('other', 11_000))).toBeUndefined();
    expect(await refusal(limiter.hit('k', 61_000))).toBeUndefined();
  });

  it('gives back released attempts, but not into a later window', async () => {
    const limiter = new RateLimiter(store, 't', 2, 60_000);
    await limiter.hit('k', 0);
    await limiter.hit('k', 0);
    await limiter.release('k', 0);
    expect(await refusal(limiter.hit('k', 0))).toBeUndefined();
    expect((await refusal(limiter.hit('k', 0)))?.kind).toBe('rate_limited');
    await limiter.release('k', 70_000); // window over: nothing to give back
    await limiter.hit('k', 70_000);
    await limiter.hit('k', 70_000);
    expect((await refusal(limiter.hit('k', 70_000)))?.kind).toBe('rate_limited');
  });

  it('tells people the wait in whole minutes, and machines in seconds', async () => {
    const limiter = new RateLimiter(store, 't', 1, 15 * 60_000);
    await limiter.hit('k', 0);
    const long = await refusal(limiter.hit('k', 3_000));
    expect(long?.message).toBe('Too many attempts; try again in 15 minutes.');
    expect(long?.extras.retryAfterSeconds).toBe(897);
    expect(long?.details.retry_after).toBe(897);
    const short = await refusal(limiter.hit('k', 15 * 60_000 - 30_000));
    expect(short?.message).toBe('Too many attempts; try again in 1 minute.');
  });

  it('reset clears the count; limiters with other names count apart', async () => {
    const limiter = new RateLimiter(store, 't', 1, 60_000);
    const other = new RateLimiter(store, 'u', 1, 60_000);
    await limiter.hit('k', 0);
    expect(await refusal(other.hit('k', 0))).toBeUndefined();
    await limiter.reset('k');
    expect(await refusal(limiter.hit('k', 0))).toBeUndefined();
    expect((await refusal(other.hit('k', 0)))?.kind).toBe('rate_limited');
  });

  it('an attempt counted in a transaction that rolls back still counts', async () => {
    const limiter = new RateLimiter(store, 't', 2, 60_000);
    for (let i = 0; i < 2; i++) {
      const failed = await refusal(
        store.transaction(async () => {
          await limiter.hit('k', 0);
          throw new DomainError('unauthenticated', 'invalid_credentials', 'wrong');
        }),
      );
      expect(failed?.kind).toBe('unauthenticated');
    }
    // The replay runs right after the rollback; let it land.
    await new Promise((resolve) => setImmediate(resolve));
    expect((await refusal(limiter.hit('k', 1)))?.kind).toBe('rate_limited');
  });

  it('keeps one row per key and window, and counts atomically with many attempts at once', async () => {
    const limiter = new RateLimiter(store, 't', 50, 60_000);
    const answers = await Promise.all(Array.from({ length: 60 }, () => refusal(limiter.hit('k', 0))));
    expect(answers.filter((a) => a === undefined)).toHaveLength(50);
    const rows = await store.db.selectFrom('rate_limits').selectAll().execute();
    expect(rows).toHaveLength(1);
    expect(rows[0].count).toBe(60);
  });
});
