import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../db/database.js';
import { DomainError } from '../errors.js';
import { SignInThrottle } from './sign-in-throttle.js';

async function refusal(attempt: Promise<void>): Promise<DomainError | undefined> {
  try {
    await attempt;
  } catch (err) {
    return err as DomainError;
  }
  return undefined;
}

const WINDOW = 15 * 60_000;

let store: Store;
beforeEach(async () => {
  store = await openStore('sqlite::memory:');
});
afterEach(async () => {
  await store.close();
});

describe('SignInThrottle', () => {
  it('wrong passwords from one address block only that account from that address', async () => {
    const throttle = new SignInThrottle(store, async () => undefined);
    for (let i = 0; i < 10; i++) await throttle.admit('a@example.com', '203.0.113.7', 0);
    const err = await refusal(throttle.admit('a@example.com', '203.0.113.7', 1000));
    expect(err?.kind).toBe('rate_limited');
    expect(err?.extras.retryAfterSeconds).toBe(899);
    expect(err?.message).toBe('Too many attempts; try again in 15 minutes.');
    expect(await refusal(throttle.admit('a@example.com', '198.51.100.1', 1000))).toBeUndefined();
    expect(await refusal(throttle.admit('b@example.com', '203.0.113.7', 1000))).toBeUndefined();
    expect(await refusal(throttle.admit('a@example.com', '203.0.113.7', WINDOW))).toBeUndefined();
  });

  it('a correct password starts the pair afresh', async () => {
    const throttle = new SignInThrottle(store, async () => undefined);
    for (let i = 0; i < 10; i++) await throttle.admit('a@example.com', '198.51.100.1', 0);
    await throttle.succeeded('a@example.com', '198.51.100.1', 0);
    expect(await refusal(throttle.admit('a@example.com', '198.51.100.1', 0))).toBeUndefined();
  });

  it('past the account-wide limit only the address of the last sign-in still gets through, itself still limited', async () => {
    const looked: string[] = [];
    const throttle = new SignInThrottle(store, async (account) => {
      looked.push(account);
      return '198.51.100.1';
    });
    // 100 wrong passwords from ten addresses, each within its own pair limit.
    for (let a = 0; a < 10; a++) for (let i = 0; i < 10; i++) await throttle.admit('a@example.com', `203.0.113.${a}`, 0);
    expect(looked).toEqual([]);
    expect((await refusal(throttle.admit('a@example.com', '203.0.113.200', 0)))?.kind).toBe('rate_limited');
    expect(looked).toEqual(['a@example.com']);
    for (let i = 0; i < 10; i++) expect(await refusal(throttle.admit('a@example.com', '198.51.100.1', 0))).toBeUndefined();
    expect((await refusal(throttle.admit('a@example.com', '198.51.100.1', 0)))?.kind).toBe('rate_limited');
    // Other accounts are untouched, and the window ends.
    expect(await refusal(throttle.admit('b@example.com', '203.0.113.200', 0))).toBeUndefined();
    expect(await refusal(throttle.admit('a@example.com', '203.0.113.200', WINDOW))).toBeUndefined();
  });

  it('an account that never signed in is closed to everyone past the account-wide limit, until a reset link is used', async () => {
    const throttle = new SignInThrottle(store, async () => undefined);
    for (let a = 0; a < 10; a++) for (let i = 0; i < 10; i++) await throttle.admit('new@example.com', `203.0.113.${a}`, 0);
    expect((await refusal(throttle.admit('new@example.com', '198.51.100.1', 0)))?.kind).toBe('rate_limited');
    await throttle.cleared('new@example.com', '198.51.100.1');
    expect(await refusal(throttle.admit('new@example.com', '198.51.100.1', 0))).toBeUndefined();
  });
});
