/**
 * Recovery codes of an authenticator app: issued at enrolment (shown once, stored hashed), each
 * good for one sign-in in place of an app code, under the limits of app codes; replaced on request
 * (password or app code); audited with how many are left.
 */
import crypto from 'node:crypto';
import { Secret, TOTP } from 'otpauth';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { expectError, insertUser } from './auth-helpers.js';

let t: TestBroker;

beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

const CODE = /^[0-9a-hjkmnp-tv-z]{4}(-[0-9a-hjkmnp-tv-z]{4}){3}$/;

const totpCode = (secret: string, timestamp = Date.now()) =>
  new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 }).generate({ timestamp });

interface Enrolled {
  id: string;
  email: string;
  password: string;
  token: string;
  secret: string;
  codes: string[];
}

/** A user with a confirmed authenticator app, and the recovery codes its confirmation answered. */
async function enrolled(): Promise<Enrolled> {
  const u = await insertUser(t);
  const token = await t.login(u.email, u.password as string);
  const secret = (await t.api('POST', '/api/v2/profile/totp', { token })).body.secret as string;
  const confirmed = await t.api('POST', '/api/v2/profile/totp/confirm', { token, body: { code: totpCode(secret) } });
  expect(confirmed.status).toBe(200);
  return { id: u.id, email: u.email, password: u.password as string, token, secret, codes: confirmed.body.recovery_codes };
}

/** Password step and the `google` provider: the challenge a code is verified against. */
async function googleChallenge(u: { email: string; password: string }): Promise<string> {
  const first = await t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } });
  expectError(first, 401, '2fa_required');
  const got = await t.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'google' } });
  expect(got.status).toBe(200);
  return got.body.challenge;
}

const verify = (challenge: string, code: string) => t.api('POST', '/api/v2/challenge-verify', { body: { challenge, code } });

describe('recovery codes', () => {
  it('are answered once at enrolment, ten distinct codes, and stored only as hashes', async () => {
    const u = await enrolled();
    expect(u.codes).toHaveLength(10);
    for (const code of u.codes) expect(code).toMatch(CODE);
    expect(new Set(u.codes).size).toBe(10);
    const profile = await t.api('GET', '/api/v2/profile', { token: u.token });
    expect(profile.body.recovery_codes_left).toBe(10);
    expect(profile.body.recovery_codes).toBeUndefined();
    const rows = await t.broker.services.store.db.selectFrom('recovery_codes').selectAll().where('user_id', '=', u.id).execute();
    expect(rows).toHaveLength(10);
    const stored = JSON.stringify(rows);
    for (const code of u.codes) {
      expect(stored).not.toContain(code);
      expect(stored).not.toContain(code.replace(/-/g, ''));
    }
    expect(rows.map((r) => r.code_hash).sort()).toEqual(
      u.codes
        .map((c) =>
          crypto
            .createHash('sha256')
            .update(`recovery:${u.id}:${c.replace(/-/g, '')}`)
            .digest('hex'),
        )
        .sort(),
    );
  });

  it('sign in once each in place of an app code, say how many are left, and are audited', async () => {
    const u = await enrolled();
    const ok = await verify(await googleChallenge(u), u.codes[0]);
    expect(ok.status).toBe(200);
    expect(ok.body.recovery_codes_left).toBe(9);
    expect((await t.api('GET', '/api/v2/profile', { token: ok.body.token })).body).toMatchObject({ email: u.email, recovery_codes_left: 9 });

    // Used once: never again.
    const again = await verify(await googleChallenge(u), u.codes[0]);
    expectError(again, 401, 'invalid_code');
    // Typed without dashes, in capitals, with spaces: the same code.
    const typed = await verify(await googleChallenge(u), ` ${u.codes[1].replace(/-/g, '').toUpperCase()} `);
    expect(typed.status).toBe(200);
    expect(typed.body.recovery_codes_left).toBe(8);
    // An app code still signs in, and its answer carries no count.
    const app = await verify(await googleChallenge(u), totpCode(u.secret, Date.now() + 30_000));
    expect(app.status).toBe(200);
    expect(app.body.recovery_codes_left).toBeUndefined();

    const audit = await t.api('GET', `/api/v2/commitlist?user_id=${u.id}&event=session.login`, { token: t.adminToken });
    const recovered = audit.body.items.filter((e: { options: { method: string } }) => e.options.method === 'password+recovery_code');
    expect(recovered.map((e: { options: { recovery_codes_left: number } }) => e.options.recovery_codes_left).sort()).toEqual([8, 9]);
    expect(recovered[0]).toMatchObject({ result: 'ok', action: 'POST /api/v2/challenge-verify', user_email: u.email });
    for (const code of u.codes) expect(JSON.stringify(audit.body)).not.toContain(code.replace(/-/g, ''));
  });

  it('count a wrong one toward the same limits as app codes: 5 burn the challenge', async () => {
    const u = await enrolled();
    const challenge = await googleChallenge(u);
    const made = 'zzzz-zzzz-zzzz-zzzz';
    for (let left = 4; left >= 0; left--) {
      const wrong = await verify(challenge, made);
      expectError(wrong, 401, 'invalid_code');
      expect(wrong.body.attempts_left).toBe(left);
    }
    // Burned: even a right recovery code is refused, and it stays unused.
    expectError(await verify(challenge, u.codes[0]), 429, 'too_many_attempts');
    expect((await t.api('GET', '/api/v2/profile', { token: u.token })).body.recovery_codes_left).toBe(10);
  });

  it('do not work for another user, nor with the mailed-code provider', async () => {
    const a = await enrolled();
    const b = await enrolled();
    expectError(await verify(await googleChallenge(b), a.codes[0]), 401, 'invalid_code');
    const first = await t.api('POST', '/api/v2/login', { body: { email: a.email, password: a.password } });
    const mailed = await t.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'email' } });
    expect(mailed.status).toBe(200);
    expectError(await verify(mailed.body.challenge, a.codes[0]), 401, 'invalid_code');
    // Neither attempt spent a's code.
    expect((await verify(await googleChallenge(a), a.codes[0])).status).toBe(200);
  });

  it('are replaced with the password or an app code: the old ones stop working', async () => {
    const u = await enrolled();
    const path = '/api/v2/profile/totp/recovery-codes';
    expectError(await t.api('POST', path, { token: u.token, body: {} }), 400, 'invalid_request');
    expectError(await t.api('POST', path, { token: u.token, body: { password: 'not-the-password' } }), 400, 'wrong_password');
    expectError(await t.api('POST', path, { token: u.token, body: { code: '12345x' } }), 400, 'invalid_code');
    expectError(await t.api('POST', path, { body: { password: u.password } }), 401, 'unauthorized');

    const renewed = await t.api('POST', path, { token: u.token, body: { password: u.password } });
    expect(renewed.status).toBe(200);
    expect(renewed.body.recovery_codes).toHaveLength(10);
    expect(renewed.body.recovery_codes_left).toBe(10);
    for (const code of renewed.body.recovery_codes) expect(u.codes).not.toContain(code);
    expectError(await verify(await googleChallenge(u), u.codes[2]), 401, 'invalid_code');

    const byCode = await t.api('POST', path, { token: u.token, body: { code: totpCode(u.secret, Date.now() + 30_000) } });
    expect(byCode.status).toBe(200);
    expectError(await verify(await googleChallenge(u), renewed.body.recovery_codes[0]), 401, 'invalid_code');
    const ok = await verify(await googleChallenge(u), byCode.body.recovery_codes[0]);
    expect(ok.status).toBe(200);
    expect(ok.body.recovery_codes_left).toBe(9);

    const audit = await t.api('GET', `/api/v2/commitlist?user_id=${u.id}&event=profile.recovery_codes.regenerate`, { token: t.adminToken });
    expect(audit.body.items.filter((e: { result: string }) => e.result === 'ok')).toHaveLength(2);
    const all = JSON.stringify(audit.body);
    for (const code of [...renewed.body.recovery_codes, ...byCode.body.recovery_codes]) expect(all).not.toContain(code);
    expect(all).not.toContain(u.password);
  });

  it('need an authenticator app, and go with it when it is removed', async () => {
    const plain = await insertUser(t);
    const token = await t.login(plain.email, plain.password as string);
    expectError(await t.api('POST', '/api/v2/profile/totp/recovery-codes', { token, body: { password: plain.password } }), 409, 'totp_not_enabled');
    expect((await t.api('GET', '/api/v2/profile', { token })).body.recovery_codes_left).toBe(0);

    const u = await enrolled();
    const removed = await t.api('DELETE', '/api/v2/profile/totp', { token: u.token, body: { password: u.password } });
    expect(removed.status).toBe(200);
    expect(removed.body.recovery_codes_left).toBe(0);
    expect(await t.broker.services.store.db.selectFrom('recovery_codes').selectAll().where('user_id', '=', u.id).execute()).toEqual([]);
  });
});
