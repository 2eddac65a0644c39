import crypto from 'node:crypto';
import jwt from 'jsonwebtoken';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

describe('token expiry', () => {
  it('refuses a token once it has expired, even right after it was accepted', async () => {
    const claims = jwt.decode(t.adminToken) as { sub: string; sid: string };
    const secret = await t.broker.services.settings.get<string>('jwt_secret');
    const shortLived = jwt.sign({ sub: claims.sub, sid: claims.sid, typ: 'access' }, crypto.createSecretKey(Buffer.from(secret as string, 'utf8')), {
      algorithm: 'HS256',
      expiresIn: 2,
      issuer: 'fleet-broker',
    });
    expect((await t.api('GET', '/api/v2/profile', { token: shortLived })).status).toBe(200);
    // Its two seconds pass on the clock the broker (in this process) reads, not in a wait: only Date
    // is moved on, timers and sockets keep real time.
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 2600 });
    try {
      const after = await t.api('GET', '/api/v2/profile', { token: shortLived });
      expect(after.status).toBe(401);
      expect(after.body).toMatchObject({ code: 401, error: 'token_expired' });
    } finally {
      vi.useRealTimers();
    }
  });

  it('refuses a token signed with another secret', async () => {
    const forged = jwt.sign({ sub: 'x', sid: 'y', typ: 'access' }, 'not-the-secret-not-the-secret-not-the-secret', {
      algorithm: 'HS256',
      issuer: 'fleet-broker',
    });
    const r = await t.api('GET', '/api/v2/profile', { token: forged });
    expect(r.status).toBe(401);
    expect(r.body.error).toBe('invalid_token');
  });
});
