import { Secret, TOTP } from 'otpauth';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type ApiAnswer, type TestBroker } from '../support/broker.js';
import { startTestSmtp, type TestSmtp } from '../support/smtp.js';
import { expectError, insertUser, REFRESH_COOKIE, setCookie, setUserColumns } from './auth-helpers.js';

let t: TestBroker;
let smtp: TestSmtp;

beforeAll(async () => {
  smtp = await startTestSmtp();
  t = await startTestBroker({ env: { SMTP_URL: smtp.url } });
});
afterAll(async () => {
  await t?.close();
  await smtp?.close();
});

type User = { id: string; email: string; password: string };

async function userWith2fa(twoFactor: number | null = 1): Promise<User> {
  return (await insertUser(t, { twoFactor })) as User;
}

/** Password step of a user with 2FA: the 401 answer with its challenge. */
async function passwordStep(u: User): Promise<ApiAnswer> {
  const r = await t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } });
  expectError(r, 401, '2fa_required');
  expect(typeof r.body.challenge).toBe('string');
  return r;
}

/** Password step and an emailed code: the challenge to verify and the code from the mail. */
async function emailCode(u: User): Promise<{ challenge: string; code: string }> {
  const first = await passwordStep(u);
  const r = await t.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'email' } });
  expect(r.status).toBe(200);
  const mail = await smtp.next(u.email, { subject: /sign-in code/ });
  const code = /\b(\d{6})\b/.exec(mail.text)?.[1];
  expect(code).toBeDefined();
  return { challenge: r.body.challenge, code: code as string };
}

const totpCode = (secret: string, timestamp = Date.now()) =>
  new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 }).generate({ timestamp });

/** A wrong code that surely differs from the right one. */
const wrongCode = (right: string) => String((Number(right) + 1) % 1_000_000).padStart(6, '0');

describe('second factor by email', () => {
  it('runs login → challenge-get → mailed code → challenge-verify and answers a working token and refresh cookie', async () => {
    const u = await userWith2fa();
    const first = await passwordStep(u);
    expect(first.body.providers).toEqual(['email']);

    const got = await t.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'email' } });
    expect(got.status).toBe(200);
    expect(got.body.challenge).not.toBe(first.body.challenge);
    const mail = await smtp.next(u.email, { subject: /sign-in code/ });
    const code = /\b(\d{6})\b/.exec(mail.text)?.[1] as string;
    expect(code).toMatch(/^\d{6}$/);

    const verified = await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: got.body.challenge, code } });
    expect(verified.status).toBe(200);
    expect(verified.body.token).toMatch(/^ey/);
    expect(setCookie(verified, REFRESH_COOKIE)).toBeDefined();
    expect((await t.api('GET', '/api/v2/profile', { token: verified.body.token })).body.email).toBe(u.email);
    // The sign-in is an audit entry of the user (the password step alone is not one), without the code or the token.
    const audit = await t.api('GET', `/api/v2/commitlist?user_id=${u.id}&event=session.login`, { token: t.adminToken });
    expect(audit.body.items.map((e: { options: { method: string } }) => e.options.method)).toEqual(['password+second_factor']);
    expect(audit.body.items[0]).toMatchObject({ result: 'ok', action: 'POST /api/v2/challenge-verify', user_email: u.email });
    expect(JSON.stringify(audit.body)).not.toContain(verified.body.token);
    expect(JSON.stringify(audit.body)).not.toContain(`"${code}"`);
  });

  it('serves challenge-verify at the root path as well', async () => {
    const u = await userWith2fa();
    const { challenge, code } = await emailCode(u);
    const r = await t.api('POST', '/challenge-verify', { body: { challenge, code } });
    expect(r.status).toBe(200);
    expect((await t.api('GET', '/api/v2/profile', { token: r.body.token })).status).toBe(200);
    expectError(await t.api('POST', '/challenge-verify', { body: { challenge } }), 400, 'invalid_request');
  });

  it('stores challenges and codes only hashed', async () => {
    const u = await userWith2fa();
    const { challenge, code } = await emailCode(u);
    const rows = await t.broker.services.store.db.selectFrom('challenges').selectAll().where('user_id', '=', u.id).execute();
    expect(rows.length).toBe(2);
    for (const row of rows) {
      expect(row.id_hash).not.toContain(challenge);
      expect(row.code_hash ?? '').not.toContain(code);
    }
  });

  it('spends every challenge once', async () => {
    const u = await userWith2fa();
    const first = await passwordStep(u);
    const got = await t.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'email' } });
    const code = /\b(\d{6})\b/.exec((await smtp.next(u.email)).text)?.[1] as string;
    expectError(await t.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'email' } }), 401, 'challenge_used');
    expect((await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: got.body.challenge, code } })).status).toBe(200);
    expectError(await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: got.body.challenge, code } }), 401, 'challenge_used');
  });

  it('refuses an expired challenge and an unknown one', async () => {
    const u = await userWith2fa();
    const first = await passwordStep(u);
    await t.broker.services.store.db
      .updateTable('challenges')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('user_id', '=', u.id)
      .execute();
    expectError(await t.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'email' } }), 401, 'challenge_expired');
    expectError(await t.api('POST', '/api/v2/challenge-get', { body: { challenge: 'made-up', preferProvider: 'email' } }), 401, 'invalid_challenge');
    expectError(await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: 'made-up', code: '123456' } }), 401, 'invalid_challenge');
  });

  it('refuses an expired code challenge even with the right code', async () => {
    const u = await userWith2fa();
    const { challenge, code } = await emailCode(u);
    await t.broker.services.store.db
      .updateTable('challenges')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('user_id', '=', u.id)
      .execute();
    expectError(await t.api('POST', '/api/v2/challenge-verify', { body: { challenge, code } }), 401, 'challenge_expired');
  });

  it('burns a challenge after 5 wrong codes: then even the right code answers 429', async () => {
    const u = await userWith2fa();
    const { challenge, code } = await emailCode(u);
    const bad = wrongCode(code);
    for (let left = 4; left >= 0; left--) {
      const r = await t.api('POST', '/api/v2/challenge-verify', { body: { challenge, code: bad } });
      expectError(r, 401, 'invalid_code');
      expect(r.body.attempts_left).toBe(left);
    }
    expectError(await t.api('POST', '/api/v2/challenge-verify', { body: { challenge, code } }), 429, 'too_many_attempts');
  });

  it('keeps the wrong-code count when a new code is asked for', async () => {
    const u = await userWith2fa();
    const { challenge, code } = await emailCode(u);
    for (let i = 0; i < 3; i++)
      expectError(await t.api('POST', '/api/v2/challenge-verify', { body: { challenge, code: wrongCode(code) } }), 401, 'invalid_code');
    const again = await t.api('POST', '/api/v2/challenge-get', { body: { challenge, preferProvider: 'email' } });
    expect(again.status).toBe(200);
    const fresh = /\b(\d{6})\b/.exec((await smtp.next(u.email)).text)?.[1] as string;
    const r = await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: again.body.challenge, code: wrongCode(fresh) } });
    expectError(r, 401, 'invalid_code');
    expect(r.body.attempts_left).toBe(1);
    // The code of the first mail belongs to the spent challenge.
    expectError(
      await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: again.body.challenge, code } }),
      401,
      code === fresh ? 'challenge_used' : 'invalid_code',
    );
  });

  it('limits wrong codes per user across fresh challenges (429 with Retry-After)', async () => {
    const u = await userWith2fa();
    let limited: ApiAnswer | undefined;
    for (let round = 0; round < 3 && !limited; round++) {
      const { challenge, code } = await emailCode(u);
      for (let i = 0; i < 4; i++) {
        const r = await t.api('POST', '/api/v2/challenge-verify', { body: { challenge, code: wrongCode(code) } });
        if (r.status === 429) {
          limited = r;
          break;
        }
        expectError(r, 401, 'invalid_code');
      }
    }
    expect(limited).toBeDefined();
    expectError(limited as ApiAnswer, 429, 'rate_limited');
    expect(Number(limited?.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('asks to choose a provider before a code is verified', async () => {
    const u = await userWith2fa();
    const first = await passwordStep(u);
    const r = await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: first.body.challenge, code: '123456' } });
    expectError(r, 400, 'provider_not_chosen');
    expect(r.body.field).toBe('challenge');
  });

  it('refuses google without an authenticator app, and an unknown provider', async () => {
    const u = await userWith2fa();
    const first = await passwordStep(u);
    const r = await t.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'google' } });
    expectError(r, 400, 'provider_unavailable');
    expect(r.body.field).toBe('preferProvider');
    const sms = await t.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'sms' } });
    expectError(sms, 400, 'invalid_request');
    expect(sms.body.field).toBe('preferProvider');
  });

  it('refuses a user disabled between password and code', async () => {
    const u = await userWith2fa();
    const { challenge, code } = await emailCode(u);
    await setUserColumns(t, u.id, { disabled: 1 });
    expectError(await t.api('POST', '/api/v2/challenge-verify', { body: { challenge, code } }), 401, 'user_disabled');
  });
});

describe('authenticator app (TOTP)', () => {
  it('enrols, signs in with app codes, refuses a code twice, and is removed with the password', async () => {
    const u = await insertUser(t);
    const token = await t.login(u.email, u.password as string);

    const start = await t.api('POST', '/api/v2/profile/totp', { token });
    expect(start.status).toBe(200);
    expect(start.body.secret).toMatch(/^[A-Z2-7]{32}$/);
    expect(start.body.otpauth_url).toMatch(/^otpauth:\/\/totp\/Fleet:/);
    expect(start.body.otpauth_url).toContain(`secret=${start.body.secret}`);
    expect(start.body.qr_data_url).toMatch(/^data:image\/png;base64,/);
    const secret: string = start.body.secret;

    const wrong = await t.api('POST', '/api/v2/profile/totp/confirm', { token, body: { code: wrongCode(totpCode(secret)) } });
    expectError(wrong, 400, 'invalid_code');
    expect(wrong.body.field).toBe('code');

    const now = Date.now();
    const confirmCode = totpCode(secret, now);
    const confirmed = await t.api('POST', '/api/v2/profile/totp/confirm', { token, body: { code: confirmCode } });
    expect(confirmed.status).toBe(200);
    expect(confirmed.body.two_factor.providers).toEqual(['email', 'google']);
    // Enrolling the app turns the second factor on for this user, whatever the account policy.
    expect(confirmed.body.two_factor.enabled).toBe(true);
    expectError(await t.api('POST', '/api/v2/profile/totp', { token }), 409, 'totp_already_enabled');
    expectError(await t.api('POST', '/api/v2/profile/totp/confirm', { token, body: { code: confirmCode } }), 409, 'totp_not_started');

    // The next sign-in asks for the second factor, with no administrator turning it on.
    const first = await passwordStep(u as User);
    expect(first.body.providers).toEqual(['email', 'google']);
    const got = await t.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'google' } });
    expect(got.status).toBe(200);
    // The code used to confirm the app is spent: it is not accepted again within its window.
    const reused = await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: got.body.challenge, code: confirmCode } });
    expectError(reused, 401, 'code_already_used');
    // The app's next code (within the ±1 step window) is accepted, once.
    const nextCode = totpCode(secret, now + 30_000);
    const ok = await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: got.body.challenge, code: nextCode } });
    expect(ok.status).toBe(200);
    expect((await t.api('GET', '/api/v2/profile', { token: ok.body.token })).status).toBe(200);

    const second = await passwordStep(u as User);
    const got2 = await t.api('POST', '/api/v2/challenge-get', { body: { challenge: second.body.challenge, preferProvider: 'google' } });
    expectError(await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: got2.body.challenge, code: nextCode } }), 401, 'code_already_used');
    expectError(
      await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: got2.body.challenge, code: '000000' === nextCode ? '111111' : '000000' } }),
      401,
      'invalid_code',
    );

    // Removal needs exactly one proof.
    const neither = await t.api('DELETE', '/api/v2/profile/totp', { token, body: {} });
    expectError(neither, 400, 'invalid_request');
    expect(neither.body.field).toBe('code');
    expectError(await t.api('DELETE', '/api/v2/profile/totp', { token, body: { code: '123456', password: 'x' } }), 400, 'invalid_request');
    const badPassword = await t.api('DELETE', '/api/v2/profile/totp', { token, body: { password: 'not-my-password' } });
    expectError(badPassword, 400, 'wrong_password');
    expect(badPassword.body.field).toBe('password');
    const removed = await t.api('DELETE', '/api/v2/profile/totp', { token, body: { password: u.password } });
    expect(removed.status).toBe(200);
    expect(removed.body.two_factor.providers).toEqual(['email']);
    expectError(await t.api('DELETE', '/api/v2/profile/totp', { token, body: { password: u.password } }), 409, 'totp_not_enabled');

    const third = await passwordStep(u as User);
    expect(third.body.providers).toEqual(['email']);
    expectError(
      await t.api('POST', '/api/v2/challenge-get', { body: { challenge: third.body.challenge, preferProvider: 'google' } }),
      400,
      'provider_unavailable',
    );
  });

  it('is removed with a current app code', async () => {
    const u = await insertUser(t);
    const token = await t.login(u.email, u.password as string);
    const secret = (await t.api('POST', '/api/v2/profile/totp', { token })).body.secret as string;
    const now = Date.now();
    expect((await t.api('POST', '/api/v2/profile/totp/confirm', { token, body: { code: totpCode(secret, now) } })).status).toBe(200);
    expectError(await t.api('DELETE', '/api/v2/profile/totp', { token, body: { code: totpCode(secret, now) } }), 400, 'code_already_used');
    const wrong = await t.api('DELETE', '/api/v2/profile/totp', { token, body: { code: wrongCode(totpCode(secret, now + 30_000)) } });
    expectError(wrong, 400, 'invalid_code');
    const removed = await t.api('DELETE', '/api/v2/profile/totp', { token, body: { code: totpCode(secret, now + 30_000) } });
    expect(removed.status).toBe(200);
    expect(removed.body.two_factor.providers).toEqual(['email']);
  });

  it('keeps the secret out of the database until it is confirmed', async () => {
    const u = await insertUser(t);
    const token = await t.login(u.email, u.password as string);
    await t.api('POST', '/api/v2/profile/totp', { token });
    const row = await t.broker.services.store.db.selectFrom('users').select(['totp_secret', 'totp_pending']).where('id', '=', u.id).executeTakeFirstOrThrow();
    expect(row.totp_secret).toBeNull();
    expect(row.totp_pending).not.toBeNull();
    expect((await t.api('GET', '/api/v2/profile', { token })).body.two_factor.providers).toEqual(['email']);
  });
});

describe('account 2FA policy', () => {
  it('is off by default, readable with users:read and changed with users:manage only', async () => {
    const reader = await t.userWith([{ permission: 'users:read' }]);
    const nobody = await t.userWith([{ permission: 'device:read' }]);
    expect((await t.api('GET', '/api/v2/settings/two-factor', { token: reader.token })).body).toEqual({ enabled: false });
    expectError(await t.api('GET', '/api/v2/settings/two-factor'), 401, 'unauthorized');
    expectError(await t.api('GET', '/api/v2/settings/two-factor', { token: nobody.token }), 403, 'forbidden');
    expectError(await t.api('PUT', '/api/v2/settings/two-factor', { token: reader.token, body: { enabled: true } }), 403, 'forbidden');
    const bad = await t.api('PUT', '/api/v2/settings/two-factor', { token: t.adminToken, body: { enabled: 'yes' } });
    expectError(bad, 400, 'invalid_request');
    expect(bad.body.field).toBe('enabled');
    expect((await t.api('GET', '/api/v2/settings/two-factor', { token: reader.token })).body).toEqual({ enabled: false });
  });

  it('applies to users without an override; the per-user override wins both ways', async () => {
    const follows = await userWith2fa(null);
    const exempt = await userWith2fa(0);
    const forced = await userWith2fa(1);
    const login = (u: User) => t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } });
    try {
      expect((await login(follows)).status).toBe(200);
      expectError(await login(forced), 401, '2fa_required');

      const on = await t.api('PUT', '/api/v2/settings/two-factor', { token: t.adminToken, body: { enabled: true } });
      expect(on.status).toBe(200);
      expect(on.body).toEqual({ enabled: true });
      expect((await t.api('GET', '/api/v2/settings/two-factor', { token: t.adminToken })).body).toEqual({ enabled: true });
      // The users API reads the same setting for the `two_factor.enabled` of its records.
      expect(await t.broker.services.settings.get('two_factor_policy')).toEqual({ enabled: true });

      expectError(await login(follows), 401, '2fa_required');
      expect((await login(exempt)).status).toBe(200);
      expectError(await login(forced), 401, '2fa_required');
      const token = await (async () => {
        const { challenge, code } = await emailCode(follows);
        return (await t.api('POST', '/api/v2/challenge-verify', { body: { challenge, code } })).body.token as string;
      })();
      expect((await t.api('GET', '/api/v2/profile', { token })).body.two_factor).toEqual({ enabled: true, providers: ['email'] });
      // Existing sessions are not affected by the policy.
      expect((await t.api('GET', '/api/v2/profile', { token: t.adminToken })).status).toBe(200);
    } finally {
      await t.api('PUT', '/api/v2/settings/two-factor', { token: t.adminToken, body: { enabled: false } });
    }
    expect((await login(follows)).status).toBe(200);
    expectError(await login(forced), 401, '2fa_required');
  });
});
