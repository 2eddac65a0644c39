import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { startTestSmtp, type TestSmtp } from '../support/smtp.js';
import { expectError, insertUser, REFRESH_COOKIE, setCookie, setUserColumns } from './auth-helpers.js';

let t: TestBroker;
let smtp: TestSmtp;

beforeAll(async () => {
  smtp = await startTestSmtp();
  t = await startTestBroker({ env: { SMTP_URL: smtp.url, PUBLIC_URL: 'https://fleet.example.com/' } });
});
afterAll(async () => {
  await t?.close();
  await smtp?.close();
});

/** The token of a password link in a mail's text. */
function linkToken(text: string): string {
  const m = /https:\/\/fleet\.example\.com\/set-password\?token=([A-Za-z0-9_-]+)/.exec(text);
  expect(m, text).not.toBeNull();
  return (m as RegExpExecArray)[1];
}

describe('sign-in', () => {
  it('answers a token and an HttpOnly refresh cookie for the API path on the right password', async () => {
    const u = await insertUser(t);
    const r = await t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } });
    expect(r.status).toBe(200);
    expect(r.body.token).toMatch(/^ey/);
    const cookie = setCookie(r, REFRESH_COOKIE);
    expect(cookie).toBeDefined();
    expect(cookie?.attributes).toMatch(/HttpOnly/i);
    expect(cookie?.attributes).toMatch(/Path=\/api\/v2/);
    expect((await t.api('GET', '/api/v2/profile', { token: r.body.token })).status).toBe(200);
  });

  it('accepts the email in any case', async () => {
    const u = await insertUser(t);
    const r = await t.api('POST', '/api/v2/login', { body: { email: u.email.toUpperCase(), password: u.password } });
    expect(r.status).toBe(200);
  });

  it('refuses a wrong password and an unknown user alike', async () => {
    const u = await insertUser(t);
    expectError(await t.api('POST', '/api/v2/login', { body: { email: u.email, password: 'wrong-password' } }), 401, 'invalid_credentials');
    expectError(await t.api('POST', '/api/v2/login', { body: { email: 'nobody@example.com', password: 'wrong-password' } }), 401, 'invalid_credentials');
  });

  it('rejects bad input with 400 naming the field', async () => {
    const missing = await t.api('POST', '/api/v2/login', { body: { email: 'a@example.com' } });
    expectError(missing, 400, 'invalid_request');
    expect(missing.body.field).toBe('password');
    const extra = await t.api('POST', '/api/v2/login', { body: { email: 'a@example.com', password: 'x', remember: true } });
    expectError(extra, 400, 'invalid_request');
  });

  it('limits wrong passwords per account from one address: 429 with Retry-After, even for the right password', async () => {
    const u = await insertUser(t);
    for (let i = 0; i < 10; i++) {
      expectError(await t.api('POST', '/api/v2/login', { body: { email: u.email, password: `wrong-${i}` } }), 401, 'invalid_credentials');
    }
    const limited = await t.api('POST', '/api/v2/login', { body: { email: u.email, password: 'wrong-again' } });
    expectError(limited, 429, 'rate_limited');
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(limited.body.retry_after).toBe(Number(limited.headers.get('retry-after')));
    expect(limited.body.message).toBe('Too many attempts; try again in 15 minutes.');
    expectError(await t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } }), 429, 'rate_limited');
    // Other accounts from the same address are not locked out by it.
    const other = await insertUser(t);
    expect((await t.api('POST', '/api/v2/login', { body: { email: other.email, password: other.password } })).status).toBe(200);
  });

  it('refuses a disabled user at login, and their tokens and refresh cookie stop working', async () => {
    const u = await insertUser(t);
    const r = await t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } });
    const cookie = setCookie(r, REFRESH_COOKIE)?.pair as string;
    await setUserColumns(t, u.id, { disabled: 1 });
    expectError(await t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } }), 401, 'user_disabled');
    expectError(await t.api('GET', '/api/v2/profile', { token: r.body.token }), 401, 'user_disabled');
    expectError(await t.api('POST', '/api/v2/refresh-jwt', { headers: { cookie } }), 401, 'token_revoked');
  });
});

describe('token renewal and logout', () => {
  it('renews with the refresh cookie: the new token is in the body and the Refreshed-Token header', async () => {
    const u = await insertUser(t);
    const login = await t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } });
    const cookie = setCookie(login, REFRESH_COOKIE)?.pair as string;
    const r = await t.api('POST', '/api/v2/refresh-jwt', { headers: { cookie } });
    expect(r.status).toBe(200);
    expect(r.body.token).toMatch(/^ey/);
    expect(r.headers.get('refreshed-token')).toBe(r.body.token);
    expect(r.body.token).not.toBe(login.body.token);
    expect((await t.api('GET', '/api/v2/profile', { token: r.body.token })).body.email).toBe(u.email);
  });

  it('renews with a still-valid bearer token', async () => {
    const u = await insertUser(t);
    const token = await t.login(u.email, u.password as string);
    const r = await t.api('POST', '/api/v2/refresh-jwt', { token });
    expect(r.status).toBe(200);
    expect(r.headers.get('refreshed-token')).toBe(r.body.token);
    expect((await t.api('GET', '/api/v2/profile', { token: r.body.token })).status).toBe(200);
  });

  it('refuses renewal without credentials, with a forged cookie and with a forged token', async () => {
    expectError(await t.api('POST', '/api/v2/refresh-jwt'), 401, 'unauthorized');
    expectError(await t.api('POST', '/api/v2/refresh-jwt', { headers: { cookie: `${REFRESH_COOKIE}=forged` } }), 401, 'token_revoked');
    expectError(await t.api('POST', '/api/v2/refresh-jwt', { token: 'eyJhbGciOiJIUzI1NiJ9.e30.forged' }), 401, 'invalid_token');
  });

  it('logout revokes the token, tokens renewed from it and its refresh cookie', async () => {
    const u = await insertUser(t);
    const login = await t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } });
    const cookie = setCookie(login, REFRESH_COOKIE)?.pair as string;
    const renewed = (await t.api('POST', '/api/v2/refresh-jwt', { token: login.body.token })).body.token;
    const out = await t.api('POST', '/api/v2/logout', { token: login.body.token });
    expect(out.status).toBe(204);
    expect(setCookie(out, REFRESH_COOKIE)?.pair).toBe(`${REFRESH_COOKIE}=`);
    expectError(await t.api('GET', '/api/v2/profile', { token: login.body.token }), 401, 'token_revoked');
    expectError(await t.api('GET', '/api/v2/profile', { token: renewed }), 401, 'token_revoked');
    expectError(await t.api('POST', '/api/v2/refresh-jwt', { headers: { cookie } }), 401, 'token_revoked');
    expectError(await t.api('POST', '/api/v2/logout'), 401, 'unauthorized');
  });
});

describe('profile', () => {
  it('shows the own user record with roles and permissions', async () => {
    const u = await t.userWith([{ permission: 'device:read', resources: ['tag:prod'] }, { permission: 'files:read' }]);
    const r = await t.api('GET', '/api/v2/profile', { token: u.token });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      user_id: u.id,
      email: u.email,
      fname: 'Test',
      roles: [u.roleId],
      disabled: false,
      two_factor: { enabled: false, providers: ['email'] },
      permissions: ['device:read', 'files:read'],
    });
    expect(r.body.created_at).toMatch(/^\d{4}-/);
    expect(r.body.last_login).toMatch(/^\d{4}-/);
    expect(r.body.password_hash).toBeUndefined();
    expect(r.body.totp_secret).toBeUndefined();
  });

  it('needs a token', async () => {
    expectError(await t.api('GET', '/api/v2/profile'), 401, 'unauthorized');
    expectError(await t.api('PATCH', '/api/v2/profile', { body: { fname: 'X' } }), 401, 'unauthorized');
    expectError(await t.api('POST', '/api/v2/profile/password', { body: { current_password: 'a', new_password: 'bbbbbbbb' } }), 401, 'unauthorized');
    expectError(await t.api('POST', '/api/v2/profile/totp'), 401, 'unauthorized');
  });

  it('changes the own name, and only the given fields', async () => {
    const u = await t.userWith([]);
    const before = (await t.api('GET', '/api/v2/profile', { token: u.token })).body;
    const r = await t.api('PATCH', '/api/v2/profile', { token: u.token, body: { fname: '  Grace ' } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ fname: 'Grace', lname: before.lname });
    const r2 = await t.api('PATCH', '/api/v2/profile', { token: u.token, body: { lname: 'Hopper' } });
    expect(r2.body).toMatchObject({ fname: 'Grace', lname: 'Hopper' });
    expect((await t.api('GET', '/api/v2/profile', { token: u.token })).body).toMatchObject({ fname: 'Grace', lname: 'Hopper' });
  });

  it('rejects an empty name and fields that cannot be changed here', async () => {
    const u = await t.userWith([]);
    const empty = await t.api('PATCH', '/api/v2/profile', { token: u.token, body: { fname: '   ' } });
    expectError(empty, 400, 'invalid_request');
    expect(empty.body.field).toBe('fname');
    expectError(await t.api('PATCH', '/api/v2/profile', { token: u.token, body: { email: 'me@example.com' } }), 400, 'invalid_request');
    expectError(await t.api('PATCH', '/api/v2/profile', { token: u.token, body: { roles: [] } }), 400, 'invalid_request');
  });

  it('changes the password: other sessions end, the calling one stays', async () => {
    const u = await insertUser(t);
    const a = await t.login(u.email, u.password as string);
    const b = await t.login(u.email, u.password as string);

    const wrong = await t.api('POST', '/api/v2/profile/password', { token: a, body: { current_password: 'not-it', new_password: 'new-password-1' } });
    expectError(wrong, 400, 'wrong_password');
    expect(wrong.body.field).toBe('current_password');
    const short = await t.api('POST', '/api/v2/profile/password', { token: a, body: { current_password: u.password, new_password: 'short' } });
    expectError(short, 400, 'invalid_request');
    expect(short.body.field).toBe('new_password');

    const ok = await t.api('POST', '/api/v2/profile/password', { token: a, body: { current_password: u.password, new_password: 'new-password-1' } });
    expect(ok.status).toBe(204);
    expect((await t.api('GET', '/api/v2/profile', { token: a })).status).toBe(200);
    expectError(await t.api('GET', '/api/v2/profile', { token: b }), 401, 'token_revoked');
    expectError(await t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } }), 401, 'invalid_credentials');
    expect((await t.api('POST', '/api/v2/login', { body: { email: u.email, password: 'new-password-1' } })).status).toBe(200);
  });
});

describe('password links', () => {
  it('a user created without a password gets a welcome link, cannot sign in before using it, and uses it once', async () => {
    const u = await insertUser(t, { password: null, fname: 'Linus' });
    await t.broker.services.auth.sendWelcomeMail({ id: u.id, email: u.email, fname: 'Linus', lname: 'Tester' }, { hasPassword: false });
    const mail = await smtp.next(u.email, { subject: /Welcome/ });
    expect(mail.text).toContain('Hello Linus');
    const token = linkToken(mail.text);
    expect(mail.raw).not.toContain('password_hash');

    // Answered exactly like a wrong password: the answer does not tell that the account exists.
    const notSet = await t.api('POST', '/api/v2/login', { body: { email: u.email, password: 'anything-at-all' } });
    const unknown = await t.api('POST', '/api/v2/login', { body: { email: `nobody-${u.id}@example.com`, password: 'anything-at-all' } });
    expectError(notSet, 401, 'invalid_credentials');
    expect(notSet.body).toEqual(unknown.body);

    const short = await t.api('POST', '/api/v2/password/set', { body: { token, password: 'short' } });
    expectError(short, 400, 'invalid_request');
    expect(short.body.field).toBe('password');

    const set = await t.api('POST', '/api/v2/password/set', { body: { token, password: 'my-first-password' } });
    expect(set.status).toBe(200);
    expect(set.body).toEqual({ email: u.email });

    const again = await t.api('POST', '/api/v2/password/set', { body: { token, password: 'another-password' } });
    expectError(again, 400, 'link_used');
    expect(again.body.field).toBe('token');
    expect((await t.api('POST', '/api/v2/login', { body: { email: u.email, password: 'my-first-password' } })).status).toBe(200);
  });

  it('a user created with a password gets a welcome mail without a link', async () => {
    const u = await insertUser(t);
    await t.broker.services.auth.sendWelcomeMail({ id: u.id, email: u.email, fname: 'Ada', lname: 'Tester' }, { hasPassword: true });
    const mail = await smtp.next(u.email, { subject: /Welcome/ });
    expect(mail.text).not.toContain('set-password');
    const rows = await t.broker.services.store.db.selectFrom('password_tokens').selectAll().where('user_id', '=', u.id).execute();
    expect(rows).toHaveLength(0);
  });

  it('stores link tokens only hashed', async () => {
    const u = await insertUser(t, { password: null });
    await t.broker.services.auth.sendWelcomeMail({ id: u.id, email: u.email, fname: 'Ada', lname: 'Tester' }, { hasPassword: false });
    const token = linkToken((await smtp.next(u.email)).text);
    const rows = await t.broker.services.store.db.selectFrom('password_tokens').selectAll().where('user_id', '=', u.id).execute();
    expect(rows).toHaveLength(1);
    expect(rows[0].token_hash).not.toContain(token);
    expect(rows[0].purpose).toBe('welcome');
    const hours = (Date.parse(rows[0].expires_at) - Date.now()) / 3_600_000;
    expect(hours).toBeGreaterThan(71);
    expect(hours).toBeLessThanOrEqual(72);
  });

  it('refuses unknown and expired links with 400 naming the token', async () => {
    const unknown = await t.api('POST', '/api/v2/password/set', { body: { token: 'not-a-real-token', password: 'long-enough-1' } });
    expectError(unknown, 400, 'invalid_link');
    expect(unknown.body.field).toBe('token');

    const u = await insertUser(t, { password: null });
    await t.broker.services.auth.sendWelcomeMail({ id: u.id, email: u.email, fname: 'Ada', lname: 'Tester' }, { hasPassword: false });
    const token = linkToken((await smtp.next(u.email)).text);
    await t.broker.services.store.db
      .updateTable('password_tokens')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('user_id', '=', u.id)
      .execute();
    expectError(await t.api('POST', '/api/v2/password/set', { body: { token, password: 'long-enough-1' } }), 400, 'link_expired');
  });

  it('forgot password: 202 always; an active user gets a reset link that sets a new password and ends their sessions', async () => {
    const u = await insertUser(t);
    const token = await t.login(u.email, u.password as string);

    const unknown = await t.api('POST', '/api/v2/password/forgot', { body: { email: 'nobody-here@example.com' } });
    expect(unknown.status).toBe(202);
    const r = await t.api('POST', '/api/v2/password/forgot', { body: { email: u.email.toUpperCase() } });
    expect(r.status).toBe(202);
    expect(r.body).toEqual(unknown.body);

    const mail = await smtp.next(u.email, { subject: /Reset/ });
    const link = linkToken(mail.text);
    const set = await t.api('POST', '/api/v2/password/set', { body: { token: link, password: 'after-reset-123' } });
    expect(set.status).toBe(200);
    expectError(await t.api('GET', '/api/v2/profile', { token }), 401, 'token_revoked');
    expectError(await t.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } }), 401, 'invalid_credentials');
    expect((await t.api('POST', '/api/v2/login', { body: { email: u.email, password: 'after-reset-123' } })).status).toBe(200);
    expect(smtp.pending('nobody-here@example.com')).toHaveLength(0);
  });

  it('forgot password: a disabled user gets no mail; the answer is the same', async () => {
    const u = await insertUser(t);
    await setUserColumns(t, u.id, { disabled: 1 });
    const r = await t.api('POST', '/api/v2/password/forgot', { body: { email: u.email } });
    expect(r.status).toBe(202);
    const rows = await t.broker.services.store.db.selectFrom('password_tokens').selectAll().where('user_id', '=', u.id).execute();
    expect(rows).toHaveLength(0);
  });

  it('forgot password is rate-limited per email address', async () => {
    const email = 'flood-target@example.com';
    for (let i = 0; i < 5; i++) expect((await t.api('POST', '/api/v2/password/forgot', { body: { email } })).status).toBe(202);
    const limited = await t.api('POST', '/api/v2/password/forgot', { body: { email } });
    expectError(limited, 429, 'rate_limited');
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
  });

  it('forgot password validates its input', async () => {
    const r = await t.api('POST', '/api/v2/password/forgot', { body: {} });
    expectError(r, 400, 'invalid_request');
    expect(r.body.field).toBe('email');
  });
});

describe('API document', () => {
  it('documents every sign-in route with a summary, and challenge-verify under both paths', async () => {
    const doc = (await t.api('GET', '/api/v2/openapi.json')).body;
    const ops: [string, string][] = [
      ['/api/v2/login', 'post'],
      ['/api/v2/challenge-get', 'post'],
      ['/api/v2/challenge-verify', 'post'],
      ['/challenge-verify', 'post'],
      ['/api/v2/refresh-jwt', 'post'],
      ['/api/v2/logout', 'post'],
      ['/api/v2/profile', 'get'],
      ['/api/v2/profile', 'patch'],
      ['/api/v2/profile/password', 'post'],
      ['/api/v2/profile/totp', 'post'],
      ['/api/v2/profile/totp/confirm', 'post'],
      ['/api/v2/profile/totp', 'delete'],
      ['/api/v2/password/set', 'post'],
      ['/api/v2/password/forgot', 'post'],
      ['/api/v2/settings/two-factor', 'get'],
      ['/api/v2/settings/two-factor', 'put'],
    ];
    for (const [path, method] of ops) {
      const op = doc.paths[path]?.[method];
      expect(op, `${method} ${path}`).toBeDefined();
      expect(op.summary.length).toBeGreaterThan(5);
      expect(op.description.length).toBeGreaterThan(20);
    }
  });
});
