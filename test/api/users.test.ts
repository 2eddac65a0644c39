import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { PERMISSION_NAMES } from '../../shared/permissions.js';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let adminId: string;
let adminRoleId: string;
let viewerRoleId: string;
let otherRoleId: string;

const USER_KEYS = ['created_at', 'disabled', 'email', 'fname', 'last_login', 'lname', 'roles', 'two_factor', 'user_id'];

beforeAll(async () => {
  t = await startTestBroker();
  const list = await t.api('GET', `/api/v2/userlist?search=${encodeURIComponent(ADMIN.email)}`, { token: t.adminToken });
  adminId = list.body.items[0].user_id;
  adminRoleId = list.body.items[0].roles[0];
  const role = await t.api('POST', '/api/v2/role', {
    token: t.adminToken,
    body: { name: 'Viewer', policies: [{ permission: 'users:read' }, { permission: 'device:read', resources: ['tag:prod'] }] },
  });
  expect(role.status).toBe(201);
  viewerRoleId = role.body.id;
  otherRoleId = (await t.api('POST', '/api/v2/role', { token: t.adminToken, body: { name: 'Other', policies: [{ permission: 'audit:read' }] } })).body.id;
});

afterAll(async () => {
  await t?.close();
});

afterEach(() => {
  vi.restoreAllMocks();
});

let n = 0;
function newUser(extra: Record<string, unknown> = {}) {
  n += 1;
  return { fname: 'Ada', lname: `Lovelace ${n}`, email: `ada${n}@example.com`, roles: [viewerRoleId], ...extra };
}

async function createUser(extra: Record<string, unknown> = {}) {
  const r = await t.api('POST', '/api/v2/user', { token: t.adminToken, body: newUser(extra) });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  // The record as GET /user shows it; `welcome_mail` belongs to the creation's answer only.
  const { welcome_mail: _delivery, ...record } = r.body;
  return record;
}

describe('POST /user', () => {
  it('creates a user with the exact record shape and sends the welcome mail', async () => {
    const mail = vi.spyOn(t.broker.services.auth, 'sendWelcomeMail');
    const body = newUser({ email: '  Grace.Hopper@Example.com ' });
    const r = await t.api('POST', '/api/v2/user', { token: t.adminToken, body });
    expect(r.status).toBe(201);
    // The record, and where the welcome mail went: this broker has no SMTP_URL, so to the outbox.
    expect(Object.keys(r.body).sort()).toEqual([...USER_KEYS, 'welcome_mail'].sort());
    expect(r.body.welcome_mail).toBe('outbox');
    expect(r.body).toMatchObject({
      fname: 'Ada',
      email: 'grace.hopper@example.com',
      roles: [viewerRoleId],
      disabled: false,
      two_factor: { enabled: false, providers: ['email'] },
      last_login: null,
    });
    expect(r.body.user_id).toEqual(expect.any(String));
    expect(Date.parse(r.body.created_at)).not.toBeNaN();
    expect(mail).toHaveBeenCalledTimes(1);
    expect(mail).toHaveBeenCalledWith({ id: r.body.user_id, email: 'grace.hopper@example.com', fname: 'Ada', lname: body.lname }, { hasPassword: false });
  });

  it('a user created without a password cannot sign in yet', async () => {
    const user = await createUser();
    const login = await t.api('POST', '/api/v2/login', { body: { email: user.email, password: 'anything-at-all' } });
    expect(login.status).toBe(401);
  });

  it('a user created with a password (API user) signs in at once and holds the role', async () => {
    const mail = vi.spyOn(t.broker.services.auth, 'sendWelcomeMail');
    const user = await createUser({ password: 'script-password-1' });
    expect(mail.mock.calls[0][1]).toEqual({ hasPassword: true });
    const token = await t.login(user.email, 'script-password-1');
    // Hashed at the broker's own cost (the tests' throwaway users carry a cheaper one, test/support/broker.ts).
    const stored = await t.broker.services.store.db.selectFrom('users').select('password_hash').where('id', '=', user.user_id).executeTakeFirstOrThrow();
    expect(stored.password_hash).toMatch(/^scrypt\$32768\$8\$1\$/);
    expect((await t.api('GET', '/api/v2/userlist', { token })).status).toBe(200);
    expect((await t.api('POST', '/api/v2/user', { token, body: newUser() })).status).toBe(403);
    const me = await t.api('GET', `/api/v2/user/${user.user_id}`, { token: t.adminToken });
    expect(me.body.last_login).not.toBeNull();
  });

  it('still creates the user when the welcome mail fails', async () => {
    vi.spyOn(t.broker.services.auth, 'sendWelcomeMail').mockRejectedValueOnce(new Error('smtp down'));
    const body = newUser();
    const r = await t.api('POST', '/api/v2/user', { token: t.adminToken, body });
    expect(r.status).toBe(201);
    expect(r.body.welcome_mail).toBe('failed');
    expect((await t.api('GET', `/api/v2/user/${r.body.user_id}`, { token: t.adminToken })).status).toBe(200);
  });

  it('stores a per-user two-factor override', async () => {
    const user = await createUser({ two_factor: { enabled: true } });
    expect(user.two_factor).toEqual({ enabled: true, providers: ['email'] });
  });

  it.each([
    ['roles', { roles: [] }],
    ['roles', { roles: undefined }],
    ['roles', { roles: ['no-such-role'] }],
    ['email', { email: 'not-an-email' }],
    ['email', { email: undefined }],
    ['fname', { fname: '' }],
    ['fname', { fname: 'Bad\u0000Name' }],
    ['password', { password: 'short' }],
    ['two_factor', { two_factor: { enabled: 'yes' } }],
    ['two_factor', { two_factor: { enabled: true, extra: 1 } }],
  ])('answers 400 naming %s for bad input %j', async (field, extra) => {
    const r = await t.api('POST', '/api/v2/user', { token: t.adminToken, body: newUser(extra) });
    expect(r.status).toBe(400);
    expect(r.body.code).toBe(400);
    expect(String(r.body.field)).toMatch(new RegExp(`^${field}`));
  });

  it('names the unknown role ids', async () => {
    const r = await t.api('POST', '/api/v2/user', { token: t.adminToken, body: newUser({ roles: [viewerRoleId, 'ghost-role'] }) });
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ field: 'roles', unknown_roles: ['ghost-role'] });
    expect(r.body.message).toContain('ghost-role');
  });

  it('rejects unknown fields', async () => {
    const r = await t.api('POST', '/api/v2/user', { token: t.adminToken, body: newUser({ disabled: true }) });
    expect(r.status).toBe(400);
  });

  it('answers 409 duplicate_email whatever the case', async () => {
    const user = await createUser();
    const r = await t.api('POST', '/api/v2/user', { token: t.adminToken, body: newUser({ email: user.email.toUpperCase() }) });
    expect(r.status).toBe(409);
    expect(r.body).toMatchObject({ code: 409, error: 'duplicate_email' });
  });
});

describe('GET /user and /userlist', () => {
  it('reads a user and answers 404 for an unknown id', async () => {
    const user = await createUser();
    const r = await t.api('GET', `/api/v2/user/${user.user_id}`, { token: t.adminToken });
    expect(r.status).toBe(200);
    expect(r.body).toEqual(user);
    const missing = await t.api('GET', '/api/v2/user/00000000-0000-0000-0000-000000000000', { token: t.adminToken });
    expect(missing.status).toBe(404);
    expect(missing.body).toMatchObject({ code: 404, error: 'not_found' });
  });

  it('lists with total, seats, paging and search on name or email', async () => {
    const a = await createUser({ fname: 'Zebulon', email: 'zeb-unique@example.com' });
    const all = await t.api('GET', '/api/v2/userlist?items_per_page=1000', { token: t.adminToken });
    expect(all.status).toBe(200);
    expect(all.body.total).toBe(all.body.items.length);
    expect(all.body.seats).toEqual({ used: all.body.items.filter((u: { disabled: boolean }) => !u.disabled).length, max: 100 });
    const page = await t.api('GET', '/api/v2/userlist?items_per_page=2&offset=1', { token: t.adminToken });
    expect(page.body.items).toHaveLength(2);
    expect(page.body.items[0].user_id).toBe(all.body.items[1].user_id);
    expect(page.body.total).toBe(all.body.total);
    const byName = await t.api('GET', '/api/v2/userlist?search=zebulon%20lovelace', { token: t.adminToken });
    expect(byName.body.items.map((u: { user_id: string }) => u.user_id)).toEqual([a.user_id]);
    const byEmail = await t.api('GET', '/api/v2/userlist?search=ZEB-UNIQUE', { token: t.adminToken });
    expect(byEmail.body.total).toBe(1);
    // LIKE wildcards in the search are taken literally.
    const wild = await t.api('GET', '/api/v2/userlist?search=%25', { token: t.adminToken });
    expect(wild.body.total).toBe(0);
  });

  it.each(['items_per_page=0', 'items_per_page=1001', 'offset=-1', 'items_per_page=abc'])('answers 400 for %s', async (q) => {
    const r = await t.api('GET', `/api/v2/userlist?${q}`, { token: t.adminToken });
    expect(r.status).toBe(400);
  });

  it('shows the effective two-factor state: override, else the account policy; google once TOTP is set', async () => {
    const plain = await createUser();
    const off = await createUser({ two_factor: { enabled: false } });
    await t.broker.services.settings.set('two_factor_policy', { enabled: true });
    try {
      expect((await t.api('GET', `/api/v2/user/${plain.user_id}`, { token: t.adminToken })).body.two_factor.enabled).toBe(true);
      expect((await t.api('GET', `/api/v2/user/${off.user_id}`, { token: t.adminToken })).body.two_factor.enabled).toBe(false);
      await t.broker.services.store.db.updateTable('users').set({ totp_secret: 'JBSWY3DPEHPK3PXP' }).where('id', '=', plain.user_id).execute();
      const r = await t.api('GET', `/api/v2/user/${plain.user_id}`, { token: t.adminToken });
      expect(r.body.two_factor).toEqual({ enabled: true, providers: ['email', 'google'] });
      const back = await t.api('PATCH', `/api/v2/user/${off.user_id}`, { token: t.adminToken, body: { two_factor: { enabled: null } } });
      expect(back.body.two_factor.enabled).toBe(true);
    } finally {
      await t.broker.services.settings.set('two_factor_policy', { enabled: false });
    }
  });
});

describe('PUT and PATCH /user', () => {
  it('PUT replaces name, email and roles; the record read back can be sent again', async () => {
    const user = await createUser();
    const read = (await t.api('GET', `/api/v2/user/${user.user_id}`, { token: t.adminToken })).body;
    const r = await t.api('PUT', `/api/v2/user/${user.user_id}`, {
      token: t.adminToken,
      body: { ...read, fname: 'Augusta', lname: 'King', email: 'augusta@example.com', roles: [viewerRoleId, otherRoleId] },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ user_id: user.user_id, fname: 'Augusta', lname: 'King', email: 'augusta@example.com', disabled: false });
    expect([...r.body.roles].sort()).toEqual([viewerRoleId, otherRoleId].sort());
    expect(r.body.created_at).toBe(user.created_at);
  });

  it('PUT needs every replaced field and a matching user_id', async () => {
    const user = await createUser();
    const missing = await t.api('PUT', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { fname: 'A', lname: 'B', email: 'x@example.com' } });
    expect(missing.status).toBe(400);
    expect(missing.body.field).toBe('roles');
    const other = await t.api('PUT', `/api/v2/user/${user.user_id}`, {
      token: t.adminToken,
      body: { fname: 'A', lname: 'B', email: user.email, roles: [viewerRoleId], user_id: adminId },
    });
    expect(other.status).toBe(400);
    expect(other.body.field).toBe('user_id');
    const ghost = await t.api('PUT', '/api/v2/user/no-such-user', {
      token: t.adminToken,
      body: { fname: 'A', lname: 'B', email: 'g@example.com', roles: [viewerRoleId] },
    });
    expect(ghost.status).toBe(404);
  });

  it('PATCH changes only the given fields', async () => {
    const user = await createUser();
    const r = await t.api('PATCH', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { lname: 'Byron' } });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ...user, lname: 'Byron' });
  });

  it('PATCH refuses an empty change, unknown fields, unknown roles and a taken email', async () => {
    const user = await createUser();
    const other = await createUser();
    const empty = await t.api('PATCH', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: {} });
    expect(empty.status).toBe(400);
    const unknown = await t.api('PATCH', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { fname: 'Ok', nickname: 'x' } });
    expect(unknown.status).toBe(400);
    expect(unknown.body.message).toContain('nickname');
    const roles = await t.api('PATCH', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { roles: ['nope'] } });
    expect(roles.status).toBe(400);
    expect(roles.body.field).toBe('roles');
    const noRoles = await t.api('PATCH', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { roles: [] } });
    expect(noRoles.status).toBe(400);
    const taken = await t.api('PATCH', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { email: other.email } });
    expect(taken.status).toBe(409);
    expect(taken.body.error).toBe('duplicate_email');
    const same = await t.api('PATCH', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { email: user.email } });
    expect(same.status).toBe(200);
    const ghost = await t.api('PATCH', '/api/v2/user/no-such-user', { token: t.adminToken, body: { fname: 'X' } });
    expect(ghost.status).toBe(404);
  });

  it('PATCH never sets a password, not even an Administrator for another user: 400 naming the field', async () => {
    const user = await createUser({ password: 'first-password-1' });
    const token = await t.login(user.email, 'first-password-1');
    const r = await t.api('PATCH', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { password: 'second-password-2' } });
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ error: 'password_not_settable', field: 'password' });
    expect((await t.api('GET', '/api/v2/userlist', { token })).status).toBe(200);
    const bad = await t.api('POST', '/api/v2/login', { body: { email: user.email, password: 'second-password-2' } });
    expect(bad.status).toBe(401);
    await t.login(user.email, 'first-password-1');
  });
});

describe('disable and re-enable', () => {
  it('disabling revokes the token at once and refuses sign-in; re-enabling lets the user sign in again', async () => {
    const user = await createUser({ password: 'disable-me-please' });
    const token = await t.login(user.email, 'disable-me-please');
    expect((await t.api('GET', '/api/v2/userlist', { token })).status).toBe(200);

    const off = await t.api('PATCH', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { disabled: true } });
    expect(off.status).toBe(200);
    expect(off.body.disabled).toBe(true);
    const denied = await t.api('GET', '/api/v2/userlist', { token });
    expect(denied.status).toBe(401);
    const login = await t.api('POST', '/api/v2/login', { body: { email: user.email, password: 'disable-me-please' } });
    expect(login.status).toBe(401);

    const on = await t.api('PATCH', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { disabled: false } });
    expect(on.status).toBe(200);
    expect(on.body.disabled).toBe(false);
    // The old token stays revoked; a new sign-in works.
    expect((await t.api('GET', '/api/v2/userlist', { token })).status).toBe(401);
    const fresh = await t.login(user.email, 'disable-me-please');
    expect((await t.api('GET', '/api/v2/userlist', { token: fresh })).status).toBe(200);
  });

  it('PUT can disable too; leaving `disabled` out keeps the state', async () => {
    const user = await createUser();
    const body = { fname: 'P', lname: 'Q', email: user.email, roles: [viewerRoleId] };
    const off = await t.api('PUT', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body: { ...body, disabled: true } });
    expect(off.body.disabled).toBe(true);
    const kept = await t.api('PUT', `/api/v2/user/${user.user_id}`, { token: t.adminToken, body });
    expect(kept.body.disabled).toBe(true);
  });
});

describe('the account never locks itself out', () => {
  it('a user cannot disable or delete themself', async () => {
    const off = await t.api('PATCH', `/api/v2/user/${adminId}`, { token: t.adminToken, body: { disabled: true } });
    expect(off.status).toBe(409);
    expect(off.body).toMatchObject({ code: 409, error: 'self_lockout' });
    expect(off.body.message).toMatch(/own user/);
    const del = await t.api('DELETE', `/api/v2/user/${adminId}`, { token: t.adminToken });
    expect(del.status).toBe(409);
    expect(del.body.error).toBe('self_lockout');
    expect((await t.api('GET', `/api/v2/user/${adminId}`, { token: t.adminToken })).body.disabled).toBe(false);
  });

  it('the last active Administrator cannot be disabled, deleted or stripped of the role', async () => {
    // The manager holds every permission on every device through a custom role (not the built-in
    // Administrator role), so the escalation rule lets them act on the Administrator; the lockout
    // rule is what refuses. (A manager holding less is refused earlier: account-takeover.test.ts.)
    const manager = await t.userWith(PERMISSION_NAMES.map((permission) => ({ permission })));
    const disable = await t.api('PATCH', `/api/v2/user/${adminId}`, { token: manager.token, body: { disabled: true } });
    expect(disable.status).toBe(409);
    expect(disable.body.error).toBe('last_administrator');
    const del = await t.api('DELETE', `/api/v2/user/${adminId}`, { token: manager.token });
    expect(del.status).toBe(409);
    expect(del.body.error).toBe('last_administrator');
    const strip = await t.api('PATCH', `/api/v2/user/${adminId}`, { token: t.adminToken, body: { roles: [viewerRoleId] } });
    expect(strip.status).toBe(409);
    expect(strip.body.error).toBe('last_administrator');
    const put = await t.api('PUT', `/api/v2/user/${adminId}`, {
      token: manager.token,
      body: { fname: 'Admin', lname: '', email: ADMIN.email, roles: [viewerRoleId] },
    });
    expect(put.status).toBe(409);
    const still = await t.api('GET', `/api/v2/user/${adminId}`, { token: t.adminToken });
    expect(still.body).toMatchObject({ disabled: false, roles: [adminRoleId] });

    // With a second active Administrator, the first may lose the role; a disabled one does not count.
    const second = await createUser({ roles: [adminRoleId] });
    await t.api('PATCH', `/api/v2/user/${second.user_id}`, { token: t.adminToken, body: { disabled: true } });
    expect((await t.api('PATCH', `/api/v2/user/${adminId}`, { token: manager.token, body: { disabled: true } })).status).toBe(409);
    await t.api('PATCH', `/api/v2/user/${second.user_id}`, { token: t.adminToken, body: { disabled: false } });
    const ok = await t.api('PATCH', `/api/v2/user/${adminId}`, { token: manager.token, body: { roles: [adminRoleId, viewerRoleId] } });
    expect(ok.status).toBe(200);
    // Now the second one is removable while the first still holds the role.
    expect((await t.api('DELETE', `/api/v2/user/${second.user_id}`, { token: manager.token })).status).toBe(204);
    expect((await t.api('DELETE', `/api/v2/user/${adminId}`, { token: manager.token })).body.error).toBe('last_administrator');
  });
});

describe('DELETE /user', () => {
  it('removes the user at once: token 401, record 404, roles freed', async () => {
    const user = await createUser({ password: 'delete-me-please' });
    const token = await t.login(user.email, 'delete-me-please');
    const r = await t.api('DELETE', `/api/v2/user/${user.user_id}`, { token: t.adminToken });
    expect(r.status).toBe(204);
    expect((await t.api('GET', '/api/v2/userlist', { token })).status).toBe(401);
    expect((await t.api('GET', `/api/v2/user/${user.user_id}`, { token: t.adminToken })).status).toBe(404);
    expect((await t.api('DELETE', `/api/v2/user/${user.user_id}`, { token: t.adminToken })).status).toBe(404);
    const login = await t.api('POST', '/api/v2/login', { body: { email: user.email, password: 'delete-me-please' } });
    expect(login.status).toBe(401);
    const role = await t.api('GET', `/api/v2/role/${viewerRoleId}`, { token: t.adminToken });
    expect(role.body.used_by.map((u: { user_id: string }) => u.user_id)).not.toContain(user.user_id);
  });

  it('writes the change to the audit trail without the password', async () => {
    const user = await createUser({ password: 'audited-password-1' });
    const audit = await t.api('GET', '/api/v2/commitlist?event=user.create', { token: t.adminToken });
    const entry = audit.body.items.find((e: { options: { after: { email: string } | null } }) => e.options.after?.email === user.email);
    expect(entry).toBeDefined();
    expect(entry.options.before).toBeNull();
    expect(entry.options.after.password_hash).toBe('[redacted]');
    expect(JSON.stringify(entry)).not.toContain('audited-password-1');
  });
});

describe('permissions', () => {
  it('needs a token', async () => {
    expect((await t.api('GET', '/api/v2/userlist')).status).toBe(401);
    expect((await t.api('POST', '/api/v2/user', { body: newUser() })).status).toBe(401);
  });

  it('users:read reads but cannot change', async () => {
    const reader = await t.userWith([{ permission: 'users:read' }]);
    expect((await t.api('GET', '/api/v2/userlist', { token: reader.token })).status).toBe(200);
    expect((await t.api('GET', `/api/v2/user/${adminId}`, { token: reader.token })).status).toBe(200);
    for (const [method, path, body] of [
      ['POST', '/api/v2/user', newUser()],
      ['PUT', `/api/v2/user/${reader.id}`, { fname: 'A', lname: 'B', email: reader.email, roles: [viewerRoleId] }],
      ['PATCH', `/api/v2/user/${reader.id}`, { fname: 'A' }],
      ['DELETE', `/api/v2/user/${adminId}`, undefined],
    ] as const) {
      const r = await t.api(method, path, { token: reader.token, body });
      expect(r.status, `${method} ${path}`).toBe(403);
      expect(r.body).toMatchObject({ code: 403, error: 'forbidden', permission: 'users:manage' });
    }
  });

  it('without users:read nothing is readable', async () => {
    const other = await t.userWith([{ permission: 'roles:read' }]);
    const r = await t.api('GET', '/api/v2/userlist', { token: other.token });
    expect(r.status).toBe(403);
    expect(r.body.permission).toBe('users:read');
    expect((await t.api('GET', `/api/v2/user/${adminId}`, { token: other.token })).status).toBe(403);
  });

  it('a user with two roles holds the union of both', async () => {
    const rolesRole = await t.api('POST', '/api/v2/role', { token: t.adminToken, body: { name: 'Role reader', policies: [{ permission: 'roles:read' }] } });
    const user = await createUser({ roles: [viewerRoleId, rolesRole.body.id], password: 'two-roles-password' });
    const token = await t.login(user.email, 'two-roles-password');
    expect((await t.api('GET', '/api/v2/userlist', { token })).status).toBe(200);
    expect((await t.api('GET', '/api/v2/roleslist', { token })).status).toBe(200);
    expect((await t.api('POST', '/api/v2/role', { token, body: { name: 'x', policies: [] } })).status).toBe(403);
  });
});

describe('seats', () => {
  let s: TestBroker;
  beforeAll(async () => {
    s = await startTestBroker({ env: { SEATS: '3' } });
  });
  afterAll(async () => {
    await s?.close();
  });

  it('counts active users only; creating or re-enabling past the seats answers 409 seats_exhausted', async () => {
    const roleId = (await s.api('GET', '/api/v2/roleslist', { token: s.adminToken })).body.items[0].id;
    const make = (i: number) =>
      s.api('POST', '/api/v2/user', { token: s.adminToken, body: { fname: 'S', lname: `${i}`, email: `seat${i}@example.com`, roles: [roleId] } });
    const one = await make(1);
    const two = await make(2);
    expect([one.status, two.status]).toEqual([201, 201]);
    const full = await make(3);
    expect(full.status).toBe(409);
    expect(full.body).toMatchObject({ code: 409, error: 'seats_exhausted', seats: { used: 3, max: 3 } });
    expect((await s.api('GET', '/api/v2/userlist', { token: s.adminToken })).body.seats).toEqual({ used: 3, max: 3 });

    await s.api('PATCH', `/api/v2/user/${one.body.user_id}`, { token: s.adminToken, body: { disabled: true } });
    expect((await s.api('GET', '/api/v2/userlist', { token: s.adminToken })).body.seats).toEqual({ used: 2, max: 3 });
    const three = await make(3);
    expect(three.status).toBe(201);

    const back = await s.api('PATCH', `/api/v2/user/${one.body.user_id}`, { token: s.adminToken, body: { disabled: false } });
    expect(back.status).toBe(409);
    expect(back.body.error).toBe('seats_exhausted');
    // Changing other fields of a disabled user, or of an active one, needs no seat.
    expect((await s.api('PATCH', `/api/v2/user/${one.body.user_id}`, { token: s.adminToken, body: { fname: 'Still off' } })).status).toBe(200);
    expect((await s.api('PATCH', `/api/v2/user/${two.body.user_id}`, { token: s.adminToken, body: { disabled: false } })).status).toBe(200);

    expect((await s.api('DELETE', `/api/v2/user/${three.body.user_id}`, { token: s.adminToken })).status).toBe(204);
    const again = await s.api('PATCH', `/api/v2/user/${one.body.user_id}`, { token: s.adminToken, body: { disabled: false } });
    expect(again.status).toBe(200);
    expect(again.body.disabled).toBe(false);
  });
});

describe('concurrent changes', () => {
  let c: TestBroker;
  beforeAll(async () => {
    c = await startTestBroker({ env: { SEATS: '4' } });
  });
  afterAll(async () => {
    await c?.close();
  });

  it('concurrent creations never exceed the seats', async () => {
    const roleId = (await c.api('GET', '/api/v2/roleslist', { token: c.adminToken })).body.items[0].id;
    const answers = await Promise.all(
      Array.from({ length: 6 }, (_, i) =>
        c.api('POST', '/api/v2/user', { token: c.adminToken, body: { fname: 'C', lname: `${i}`, email: `race${i}@example.com`, roles: [roleId] } }),
      ),
    );
    expect(answers.map((a) => a.status).sort()).toEqual([201, 201, 201, 409, 409, 409]);
    expect((await c.api('GET', '/api/v2/userlist', { token: c.adminToken })).body.seats).toEqual({ used: 4, max: 4 });
  });

  it('two administrators disabling each other at once leave one of them active', async () => {
    const list = await c.api('GET', '/api/v2/userlist?items_per_page=1000', { token: c.adminToken });
    const adminRole = list.body.items.find((u: { email: string }) => u.email === ADMIN.email).roles[0];
    // Free seats: only the first user stays.
    for (const u of list.body.items) if (u.email !== ADMIN.email) await c.api('DELETE', `/api/v2/user/${u.user_id}`, { token: c.adminToken });
    const second = await c.api('POST', '/api/v2/user', {
      token: c.adminToken,
      body: { fname: 'Second', lname: 'Admin', email: 'second-admin@example.com', roles: [adminRole], password: 'second-admin-pw' },
    });
    expect(second.status).toBe(201);
    const secondToken = await c.login('second-admin@example.com', 'second-admin-pw');
    const firstId = list.body.items.find((u: { email: string }) => u.email === ADMIN.email).user_id;
    const [a, b] = await Promise.all([
      c.api('PATCH', `/api/v2/user/${second.body.user_id}`, { token: c.adminToken, body: { disabled: true } }),
      c.api('PATCH', `/api/v2/user/${firstId}`, { token: secondToken, body: { disabled: true } }),
    ]);
    const statuses = [a.status, b.status].sort();
    // Either one wins (200) and the other is refused: 409 as the last administrator, or 401 when
    // its own user was disabled first. Never both disabled.
    expect(statuses[0]).toBe(200);
    expect([401, 409]).toContain(statuses[1]);
    const after = await c.api('GET', '/api/v2/userlist?items_per_page=1000', { token: a.status === 200 ? c.adminToken : secondToken });
    const activeAdmins = after.body.items.filter((u: { disabled: boolean; roles: string[] }) => !u.disabled && u.roles.includes(adminRole));
    expect(activeAdmins).toHaveLength(1);
  });
});
