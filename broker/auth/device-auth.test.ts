import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../db/database.js';
import { DomainError } from '../errors.js';
import { DEVICE_CODE_TTL_SECONDS, DeviceAuthService, MAX_PENDING_PER_ADDRESS, normalizeUserCode } from './device-auth.js';

let store: Store;
beforeEach(async () => {
  store = await openStore('sqlite::memory:');
});
afterEach(async () => {
  await store.close();
});

function service() {
  let now = 1_000_000;
  const started: string[] = [];
  const s = new DeviceAuthService(
    store.db,
    {
      startSession: async (userId) => {
        started.push(userId);
        return { token: `token-of-${userId}`, refreshToken: 'refresh', sessionId: 's', refreshMaxAgeSeconds: 60 };
      },
      isActiveUser: async (userId) => userId !== 'disabled-user',
    },
    { publicUrl: 'https://fleet.example.com/', tokenTtlSeconds: 900 },
    () => now,
  );
  return { s, started, advance: (seconds: number) => (now += seconds * 1000) };
}

async function errorOf(p: Promise<unknown> | (() => unknown)): Promise<DomainError> {
  try {
    await (typeof p === 'function' ? p() : p);
  } catch (err) {
    return err as DomainError;
  }
  throw new Error('expected a refusal');
}

describe('device authorization codes', () => {
  it('reads user codes in any case, with or without the dash, and nothing else', () => {
    expect(normalizeUserCode('bcdf-ghjk')).toBe('BCDF-GHJK');
    expect(normalizeUserCode('BCDFGHJK')).toBe('BCDF-GHJK');
    expect(normalizeUserCode('ABCD-EFGH')).toBeUndefined(); // vowels are never issued
    expect(normalizeUserCode('BCDF-GHJ')).toBeUndefined();
  });

  it('expires: the token endpoint says expired_token, the console no longer finds the code', async () => {
    const { s, advance } = service();
    const auth = await s.start('10.0.0.1', 'cli');
    expect(auth.verification_uri).toBe('https://fleet.example.com/cli-login');
    advance(DEVICE_CODE_TTL_SECONDS + 1);
    expect((await errorOf(() => s.decide(auth.user_code, { userId: 'u', ip: '10.0.0.2' }, 'approved'))).kind).toBe('not_found');
    expect((await errorOf(s.token(auth.device_code, '10.0.0.1', 'cli'))).code).toBe('expired_token');
  });

  it('issues no session for a user disabled between approval and collection', async () => {
    const { s, started } = service();
    const auth = await s.start('10.0.0.1', 'cli');
    await s.decide(auth.user_code, { userId: 'disabled-user', ip: '10.0.0.2' }, 'approved');
    expect((await errorOf(s.token(auth.device_code, '10.0.0.1', 'cli'))).code).toBe('authorization_declined');
    expect(started).toEqual([]);
  });

  it('bounds the requests waiting per address', async () => {
    const { s, advance } = service();
    for (let i = 0; i < MAX_PENDING_PER_ADDRESS; i++) await s.start('10.0.0.9', 'cli');
    expect((await errorOf(() => s.start('10.0.0.9', 'cli'))).kind).toBe('rate_limited');
    expect((await s.start('10.0.0.10', 'cli')).user_code).toMatch(/^[A-Z]{4}-[A-Z]{4}$/);
    advance(DEVICE_CODE_TTL_SECONDS + 1);
    expect((await s.start('10.0.0.9', 'cli')).interval).toBe(5);
  });

  it('hands the session out once: of two polls at once, one wins; a decision is final', async () => {
    const { s, started } = service();
    const auth = await s.start('10.0.0.1', 'cli');
    expect((await errorOf(s.token(auth.device_code, '10.0.0.1', 'cli'))).code).toBe('authorization_pending');
    await s.decide(auth.user_code.toLowerCase(), { userId: 'u1', ip: '10.0.0.2' }, 'approved');
    expect((await errorOf(() => s.decide(auth.user_code, { userId: 'u1', ip: '10.0.0.2' }, 'declined'))).kind).toBe('conflict');
    const polls = await Promise.allSettled([s.token(auth.device_code, '10.0.0.1', 'cli'), s.token(auth.device_code, '10.0.0.1', 'cli')]);
    expect(polls.filter((p) => p.status === 'fulfilled')).toHaveLength(1);
    const lost = polls.find((p) => p.status === 'rejected') as PromiseRejectedResult;
    expect((lost.reason as DomainError).code).toBe('bad_verification_code');
    expect(started).toEqual(['u1']);
    expect(await store.db.selectFrom('device_codes').selectAll().execute()).toHaveLength(0);
  });

  it("belongs to the first user who enters it: another user's look-up, approval or decline answers 404 like an unknown code", async () => {
    const { s, started } = service();
    const auth = await s.start('10.0.0.1', 'cli');
    const owner = { userId: 'owner', ip: '10.0.0.2' };
    const other = { userId: 'other', ip: '10.0.0.3' };
    expect((await s.describe(auth.user_code, owner)).user_code).toBe(auth.user_code);
    for (const attempt of [
      () => s.describe(auth.user_code, other),
      () => s.decide(auth.user_code, other, 'declined'),
      () => s.decide(auth.user_code, other, 'approved'),
    ]) {
      const refused = await errorOf(attempt);
      expect(refused.kind).toBe('not_found');
      expect(refused.message).toBe((await errorOf(() => s.describe('BCDF-GHJK', other))).message);
    }
    expect((await errorOf(s.token(auth.device_code, '10.0.0.1', 'cli'))).code).toBe('authorization_pending');
    await s.decide(auth.user_code, owner, 'approved');
    expect((await s.token(auth.device_code, '10.0.0.1', 'cli')).access_token).toBe('token-of-owner');
    expect(started).toEqual(['owner']);
  });
});
