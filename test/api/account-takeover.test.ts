/**
 * A user manager must not take over an account holding more than they do (password, email, second
 * factor, enabled state, removal, reset links), an administrator resets passwords only through
 * single-use links, and wrong passwords from one address cannot lock the owner out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';
import { startTestSmtp, type TestSmtp } from '../support/smtp.js';
import { expectError } from './auth-helpers.js';

let t: TestBroker;
let smtp: TestSmtp;
let adminId: string;

beforeAll(async () => {
  smtp = await startTestSmtp();
  // TRUST_PROXY: each request names its address in X-Forwarded-For, as behind a reverse proxy.
  t = await startTestBroker({ env: { SMTP_URL: smtp.url, PUBLIC_URL: 'https://fleet.example.com/', TRUST_PROXY: 'true' } });
  const list = await t.api('GET', `/api/v2/userlist?search=${encodeURIComponent(ADMIN.email)}`, { token: t.adminToken });
  adminId = list.body.items[0].user_id;
});
afterAll(async () => {
  await t?.close();
  await smtp?.close();
});

const from = (address: string) => ({ 'x-forwarded-for': address });

function linkToken(link: string): string {
  const m = /^https:\/\/fleet\.example\.com\/set-password\?token=([A-Za-z0-9_-]+)$/m.exec(link);
  expect(m, link).not.toBeNull();
  return (m as RegExpExecArray)[1];
}

/** The role of the issue: users:read, users:manage and roles:read, nothing else. */
function userManager() {
  return t.userWith([{ permission: 'users:read' }, { permission: 'users:manage' }, { permission: 'roles:read' }]);
}

async function roleWith(name: string, policies: { permission: string; resources?: string[] }[]): Promise<string> {
  const r = await t.api('POST', '/api/v2/role', { token: t.adminToken, body: { name, policies } });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return r.body.id;
}

describe('a user manager cannot take over a stronger account', () => {
  it('refuses every way into the Administrator with 403 privilege_escalation and changes nothing', async () => {
    const manager = await userManager();
    const before = (await t.api('GET', `/api/v2/user/${adminId}`, { token: t.adminToken })).body;
    const patch = (body: unknown) => t.api('PATCH', `/api/v2/user/${adminId}`, { token: manager.token, body });
    const attempts = [
      await patch({ password: 'taken-over-123' }),
      await patch({ email: 'attacker@example.com', two_factor: { enabled: false } }),
      await patch({ two_factor: { enabled: false } }),
      await patch({ two_factor: { enabled: true } }),
      await patch({ email: 'attacker@example.com' }),
      await patch({ disabled: true }),
      await t.api('PUT', `/api/v2/user/${adminId}`, { token: manager.token, body: { ...before, email: 'attacker@example.com' } }),
      await t.api('PUT', `/api/v2/user/${adminId}`, { token: manager.token, body: { ...before, password: 'taken-over-123' } }),
      await t.api('POST', `/api/v2/user/${adminId}/password-reset`, { token: manager.token, body: { send_email: false } }),
      await t.api('POST', `/api/v2/user/${adminId}/password-reset`, { token: manager.token, body: { send_email: true } }),
      await t.api('DELETE', `/api/v2/user/${adminId}`, { token: manager.token }),
    ];
    for (const r of attempts) {
      expectError(r, 403, 'privilege_escalation');
      expect(r.body.message).toContain(ADMIN.email);
      expect(r.body.missing.length).toBeGreaterThan(0);
    }
    expect(attempts[0].body.message).toContain('password');

    const after = await t.api('GET', `/api/v2/user/${adminId}`, { token: t.adminToken });
    expect(after.body).toEqual(before);
    const stored = await t.broker.services.store.db.selectFrom('password_tokens').selectAll().where('user_id', '=', adminId).execute();
    expect(stored).toHaveLength(0);
    expect(smtp.pending(ADMIN.email)).toHaveLength(0);
    expect((await t.api('GET', '/api/v2/profile', { token: t.adminToken })).status).toBe(200);
    await t.login(ADMIN.email, ADMIN.password);
  });

  it("cannot turn off the account's second-factor policy that the Administrator follows; may turn it on", async () => {
    const manager = await userManager();
    const policy = (token: string, enabled: boolean) => t.api('PUT', '/api/v2/settings/two-factor', { token, body: { enabled } });
    expect((await policy(manager.token, true)).status).toBe(200);
    try {
      const off = await policy(manager.token, false);
      expectError(off, 403, 'privilege_escalation');
      expect(off.body.message).toContain('second-factor policy');
      expect((await t.api('GET', '/api/v2/settings/two-factor', { token: t.adminToken })).body).toEqual({ enabled: true });
    } finally {
      expect((await policy(t.adminToken, false)).status).toBe(200);
    }
  });

  it('refuses the change on a user holding a permission on wider resources than the manager', async () => {
    const labOnly = await t.userWith([{ permission: 'users:manage' }, { permission: 'users:read' }, { permission: 'device:read', resources: ['tag:lab'] }]);
    const everywhere = await t.userWith([{ permission: 'device:read' }]);
    const r = await t.api('PATCH', `/api/v2/user/${everywhere.id}`, { token: labOnly.token, body: { disabled: true } });
    expectError(r, 403, 'privilege_escalation');
    expect(r.body.missing).toEqual([{ permission: 'device:read', resource: '*' }]);
    expect((await t.api('GET', `/api/v2/user/${everywhere.id}`, { token: t.adminToken })).body.disabled).toBe(false);
  });

  it('refuses taking the Administrator role away from an Administrator', async () => {
    const manager = await userManager();
    const other = await t.api('POST', '/api/v2/user', {
      token: t.adminToken,
      body: {
        fname: 'Second',
        lname: 'Admin',
        email: 'second-admin@example.com',
        roles: [...(await t.api('GET', `/api/v2/user/${adminId}`, { token: t.adminToken })).body.roles],
        password: 'second-admin-1',
      },
    });
    expect(other.status).toBe(201);
    const lesser = await roleWith('Readers of users', [{ permission: 'users:read' }]);
    const r = await t.api('PATCH', `/api/v2/user/${other.body.user_id}`, { token: manager.token, body: { roles: [lesser] } });
    expectError(r, 403, 'privilege_escalation');
    expect((await t.api('GET', `/api/v2/user/${other.body.user_id}`, { token: t.adminToken })).body.roles).toEqual(other.body.roles);
  });

  it('still lets the manager act on users holding no more than they do, and on their own record', async () => {
    const manager = await userManager();
    const readers = await roleWith('User readers', [{ permission: 'users:read' }]);
    const created = await t.api('POST', '/api/v2/user', {
      token: manager.token,
      body: { fname: 'Lesser', lname: 'User', email: 'lesser@example.com', roles: [readers], password: 'lesser-password-1' },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const id = created.body.user_id;
    const patch = (body: unknown) => t.api('PATCH', `/api/v2/user/${id}`, { token: manager.token, body });
    expect((await patch({ email: 'lesser-2@example.com', two_factor: { enabled: false } })).status).toBe(200);
    expect((await patch({ disabled: true })).status).toBe(200);
    expect((await patch({ disabled: false })).status).toBe(200);
    const link = await t.api('POST', `/api/v2/user/${id}/password-reset`, { token: manager.token, body: { send_email: false } });
    expect(link.status).toBe(200);
    expect((await t.api('DELETE', `/api/v2/user/${id}`, { token: manager.token })).status).toBe(204);

    const own = await t.api('PATCH', `/api/v2/user/${manager.id}`, { token: manager.token, body: { fname: 'Myself', email: `renamed-${manager.email}` } });
    expect(own.status, JSON.stringify(own.body)).toBe(200);
    expect(own.body).toMatchObject({ fname: 'Myself', email: `renamed-${manager.email}` });
    // Renaming a stronger user is no way into their account: still allowed.
    const lname = (await t.api('GET', `/api/v2/user/${adminId}`, { token: t.adminToken })).body.lname;
    const rename = await t.api('PATCH', `/api/v2/user/${adminId}`, { token: manager.token, body: { lname: 'Renamed' } });
    expect(rename.status).toBe(200);
    expect((await t.api('PATCH', `/api/v2/user/${adminId}`, { token: t.adminToken, body: { lname } })).status).toBe(200);
  });
});

describe('passwords of others are reset through single-use links only', () => {
  it('PATCH and PUT refuse a password with 400 naming the field, also for an Administrator', async () => {
    const user = await t.userWith([{ permission: 'users:read' }]);
    const patch = await t.api('PATCH', `/api/v2/user/${user.id}`, { token: t.adminToken, body: { password: 'set-by-admin-1' } });
    expectError(patch, 400, 'password_not_settable');
    expect(patch.body.field).toBe('password');
    expect(patch.body.message).toContain('password-reset');
    const record = (await t.api('GET', `/api/v2/user/${user.id}`, { token: t.adminToken })).body;
    const put = await t.api('PUT', `/api/v2/user/${user.id}`, { token: t.adminToken, body: { ...record, fname: 'Changed', password: 'set-by-admin-1' } });
    expectError(put, 400, 'password_not_settable');
    expect((await t.api('GET', `/api/v2/user/${user.id}`, { token: t.adminToken })).body).toEqual(record);
    // Nor on oneself: that goes through the profile, which asks for the current password.
    expectError(await t.api('PATCH', `/api/v2/user/${adminId}`, { token: t.adminToken, body: { password: 'set-by-admin-1' } }), 400, 'password_not_settable');
    expectError(await t.api('POST', '/api/v2/login', { body: { email: user.email, password: 'set-by-admin-1' } }), 401, 'invalid_credentials');
    await t.login(user.email, user.password);
  });

  it('a link shown once: the old password works until it is used; using it ends the sessions; it works once', async () => {
    const user = await t.userWith([{ permission: 'users:read' }]);
    const r = await t.api('POST', `/api/v2/user/${user.id}/password-reset`, { token: t.adminToken, body: { send_email: false } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(Object.keys(r.body).sort()).toEqual(['expires_at', 'link']);
    expect(Date.parse(r.body.expires_at)).toBeGreaterThan(Date.now());
    const token = linkToken(r.body.link);
    expect(smtp.pending(user.email)).toHaveLength(0);
    expect((await t.api('GET', '/api/v2/profile', { token: user.token })).status).toBe(200);

    const set = await t.api('POST', '/api/v2/password/set', { body: { token, password: 'handed-over-123' } });
    expect(set.status).toBe(200);
    expectError(await t.api('GET', '/api/v2/profile', { token: user.token }), 401, 'token_revoked');
    expectError(await t.api('POST', '/api/v2/password/set', { body: { token, password: 'again-and-again' } }), 400, 'link_used');
    expectError(await t.api('POST', '/api/v2/login', { body: { email: user.email, password: user.password } }), 401, 'invalid_credentials');
    await t.login(user.email, 'handed-over-123');

    const audit = await t.api('GET', `/api/v2/commitlist?event=user.password`, { token: t.adminToken });
    expect(audit.status).toBe(200);
    expect(JSON.stringify(audit.body)).toContain(user.id);
    expect(JSON.stringify(audit.body)).not.toContain(token);
  });

  it('send_email mails the link to the address on record and answers 202 without it', async () => {
    const user = await t.userWith([{ permission: 'users:read' }]);
    const r = await t.api('POST', `/api/v2/user/${user.id}/password-reset`, { token: t.adminToken, body: { send_email: true } });
    expect(r.status).toBe(202);
    expect(JSON.stringify(r.body)).not.toContain('set-password');
    const mail = await smtp.next(user.email, { subject: /Reset/ });
    expect(mail.text).toContain('an administrator asked');
    const token = linkToken(mail.text);
    expect((await t.api('POST', '/api/v2/password/set', { body: { token, password: 'from-the-mail-1' } })).status).toBe(200);
    await t.login(user.email, 'from-the-mail-1');
  });

  it('answers 404 for an unknown user and 400 for a bad body', async () => {
    expectError(await t.api('POST', '/api/v2/user/no-such-user/password-reset', { token: t.adminToken, body: { send_email: false } }), 404, 'not_found');
    const bad = await t.api('POST', `/api/v2/user/${adminId}/password-reset`, { token: t.adminToken, body: {} });
    expectError(bad, 400, 'invalid_request');
    expect(bad.body.field).toBe('send_email');
  });
});

describe('wrong passwords from one address do not lock the owner out', () => {
  it('blocks the attacking address for that account, not the owner signing in from elsewhere', async () => {
    const victim = await t.userWith([{ permission: 'users:read' }]);
    const attacker = from('203.0.113.7');
    for (let i = 0; i < 10; i++) {
      expectError(
        await t.api('POST', '/api/v2/login', { headers: attacker, body: { email: victim.email, password: `guess-${i}` } }),
        401,
        'invalid_credentials',
      );
    }
    const limited = await t.api('POST', '/api/v2/login', { headers: attacker, body: { email: victim.email, password: 'guess-again' } });
    expectError(limited, 429, 'rate_limited');
    expect(limited.body.message).toMatch(/^Too many attempts; try again in \d+ minutes?\.$/);
    const retry = Number(limited.headers.get('retry-after'));
    expect(retry).toBeGreaterThan(0);
    expect(limited.body.message).toContain(`${Math.ceil(retry / 60)} minute`);
    // Even the right password from the attacking address is refused for now.
    expectError(await t.api('POST', '/api/v2/login', { headers: attacker, body: { email: victim.email, password: victim.password } }), 429, 'rate_limited');

    const owner = await t.api('POST', '/api/v2/login', { headers: from('198.51.100.20'), body: { email: victim.email, password: victim.password } });
    expect(owner.status, JSON.stringify(owner.body)).toBe(200);
    // The attacking address may still sign in to other accounts (its own budget is per address).
    const other = await t.userWith([{ permission: 'users:read' }]);
    const elsewhere = await t.api('POST', '/api/v2/login', { headers: attacker, body: { email: other.email, password: other.password } });
    expect(elsewhere.status).toBe(200);
  });

  it('locks the Administrator for no one but the attacker', async () => {
    const attacker = from('203.0.113.99');
    for (let i = 0; i < 11; i++) await t.api('POST', '/api/v2/login', { headers: attacker, body: { email: ADMIN.email, password: `guess-${i}` } });
    expectError(await t.api('POST', '/api/v2/login', { headers: attacker, body: ADMIN }), 429, 'rate_limited');
    expect((await t.api('POST', '/api/v2/login', { headers: from('198.51.100.1'), body: ADMIN })).status).toBe(200);
  });
});
