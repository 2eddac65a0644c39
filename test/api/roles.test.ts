import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PERMISSION_NAMES } from '../../shared/permissions.js';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let adminId: string;
let adminRoleId: string;

const ROLE_KEYS = ['builtin', 'created_at', 'created_by', 'description', 'id', 'name', 'policies', 'recording', 'updated_at', 'updated_by', 'used_by'];

beforeAll(async () => {
  t = await startTestBroker();
  const me = await t.api('GET', `/api/v2/userlist?search=${encodeURIComponent(ADMIN.email)}`, { token: t.adminToken });
  adminId = me.body.items[0].user_id;
  adminRoleId = me.body.items[0].roles[0];
});

afterAll(async () => {
  await t?.close();
});

let n = 0;
async function createRole(policies: unknown[], extra: Record<string, unknown> = {}) {
  n += 1;
  const r = await t.api('POST', '/api/v2/role', { token: t.adminToken, body: { name: `Role ${n}`, policies, ...extra } });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return r.body;
}

async function userHolding(roles: string[]) {
  n += 1;
  const email = `holder${n}@example.com`;
  const r = await t.api('POST', '/api/v2/user', { token: t.adminToken, body: { fname: 'Holder', lname: `${n}`, email, roles, password: 'holder-password-1' } });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return { id: r.body.user_id as string, email, token: await t.login(email, 'holder-password-1') };
}

describe('POST /role and reading roles', () => {
  it('creates a role in the record shape; omitted resources mean ["*"]', async () => {
    const before = Math.floor(Date.now() / 1000);
    const r = await t.api('POST', '/api/v2/role', {
      token: t.adminToken,
      body: {
        name: 'Field engineers',
        description: 'Console on every device, everything on production',
        policies: [{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console', 'tag:prod'] }],
      },
    });
    expect(r.status).toBe(201);
    expect(Object.keys(r.body).sort()).toEqual(ROLE_KEYS);
    expect(r.body).toMatchObject({
      name: 'Field engineers',
      description: 'Console on every device, everything on production',
      policies: [
        { permission: 'device:read', resources: ['*'] },
        { permission: 'remote-access:connect', resources: ['*/console', 'tag:prod'] },
      ],
      builtin: false,
      created_by: adminId,
      updated_by: adminId,
      used_by: [],
    });
    expect(r.body.created_at).toBeGreaterThanOrEqual(before);
    expect(r.body.updated_at).toBe(r.body.created_at);
    const read = await t.api('GET', `/api/v2/role/${r.body.id}`, { token: t.adminToken });
    expect(read.status).toBe(200);
    expect(read.body).toEqual(r.body);
  });

  it('lists roles as {items, total}, the built-in Administrator first, with the users holding each', async () => {
    const role = await createRole([{ permission: 'audit:read' }]);
    const holder = await userHolding([role.id]);
    const r = await t.api('GET', '/api/v2/roleslist?items_per_page=1000', { token: t.adminToken });
    expect(r.status).toBe(200);
    expect(r.body.total).toBe(r.body.items.length);
    expect(r.body.items[0]).toMatchObject({ id: adminRoleId, name: 'Administrator', builtin: true });
    expect(r.body.items[0].used_by).toContainEqual({ user_id: adminId, fname: 'Admin', lname: '' });
    expect(r.body.items[0].policies.map((p: { permission: string }) => p.permission).sort()).toEqual([...PERMISSION_NAMES].sort());
    const listed = r.body.items.find((i: { id: string }) => i.id === role.id);
    expect(listed.used_by).toEqual([{ user_id: holder.id, fname: 'Holder', lname: expect.any(String) }]);
    const page = await t.api('GET', '/api/v2/roleslist?items_per_page=1&offset=1', { token: t.adminToken });
    expect(page.body.items).toHaveLength(1);
    expect(page.body.items[0].id).toBe(r.body.items[1].id);
    const search = await t.api('GET', `/api/v2/roleslist?search=${encodeURIComponent(role.name.toUpperCase())}`, { token: t.adminToken });
    expect(search.body.items.map((i: { id: string }) => i.id)).toContain(role.id);
    expect((await t.api('GET', '/api/v2/roleslist?items_per_page=5000', { token: t.adminToken })).status).toBe(400);
  });

  it('answers 404 for an unknown role', async () => {
    const r = await t.api('GET', '/api/v2/role/nope', { token: t.adminToken });
    expect(r.status).toBe(404);
    expect(r.body).toMatchObject({ code: 404, error: 'not_found' });
    expect((await t.api('PUT', '/api/v2/role/nope', { token: t.adminToken, body: { name: 'x', policies: [] } })).status).toBe(404);
    expect((await t.api('DELETE', '/api/v2/role/nope', { token: t.adminToken })).status).toBe(404);
  });

  it('accepts the read-only fields a client sends back (the qbee client sends the whole record)', async () => {
    const r = await t.api('POST', '/api/v2/role', {
      token: t.adminToken,
      body: { id: '', name: 'Round trip', description: '', policies: [{ permission: 'files:read' }], created_at: 0, created_by: null, used_by: null },
    });
    expect(r.status).toBe(201);
    const back = await t.api('PUT', `/api/v2/role/${r.body.id}`, { token: t.adminToken, body: { ...r.body, description: 'changed' } });
    expect(back.status).toBe(200);
    expect(back.body.description).toBe('changed');
    const mismatch = await t.api('PUT', `/api/v2/role/${r.body.id}`, { token: t.adminToken, body: { ...r.body, id: adminRoleId } });
    expect(mismatch.status).toBe(400);
    expect(mismatch.body.field).toBe('id');
  });

  it('answers 409 for a name in use, whatever the case', async () => {
    const role = await createRole([]);
    const r = await t.api('POST', '/api/v2/role', { token: t.adminToken, body: { name: role.name.toUpperCase(), policies: [] } });
    expect(r.status).toBe(409);
    expect(r.body).toMatchObject({ code: 409, error: 'duplicate_role_name' });
    const other = await createRole([]);
    const put = await t.api('PUT', `/api/v2/role/${other.id}`, { token: t.adminToken, body: { name: role.name, policies: [] } });
    expect(put.status).toBe(409);
    expect((await t.api('POST', '/api/v2/role', { token: t.adminToken, body: { name: 'administrator', policies: [] } })).status).toBe(409);
  });

  it.each([
    ['name', { policies: [] }],
    ['name', { name: '', policies: [] }],
    ['name', { name: 'x'.repeat(101), policies: [] }],
    ['policies', { name: 'no policies' }],
    ['policies', { name: 'bad policy', policies: [{ permission: 'device:read', resources: 'tag:x' }] }],
    ['policies', { name: 'extra field', policies: [{ permission: 'device:read', resource: ['tag:x'] }] }],
    ['colour', { name: 'unknown field', policies: [], colour: 'red' }],
  ])('answers 400 naming %s for %j', async (field, body) => {
    const r = await t.api('POST', '/api/v2/role', { token: t.adminToken, body });
    expect(r.status).toBe(400);
    expect(JSON.stringify(r.body)).toContain(field);
  });
});

describe('policy validation', () => {
  async function refused(policies: unknown[]) {
    const r = await t.api('POST', '/api/v2/role', { token: t.adminToken, body: { name: `invalid ${++n}`, policies } });
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ code: 400, error: 'invalid_policy', field: 'policies' });
    expect(Array.isArray(r.body.problems)).toBe(true);
    return r.body as { message: string; problems: { policy: number; permission: string; resource?: string; message: string }[] };
  }

  it('a resource on a permission that does not accept resources', async () => {
    const body = await refused([{ permission: 'device:read' }, { permission: 'users:read', resources: ['tag:prod'] }]);
    expect(body.message).toContain('policy 2 (users:read)');
    expect(body.message).toContain('"tag:prod"');
    expect(body.problems).toEqual([
      {
        policy: 1,
        permission: 'users:read',
        resource: 'tag:prod',
        code: 'resources_not_accepted',
        message: expect.stringContaining('does not accept resources'),
      },
    ]);
  });

  it('an unknown permission', async () => {
    const body = await refused([{ permission: 'devices:read' }]);
    expect(body.message).toContain('policy 1 (devices:read)');
    expect(body.message).toMatch(/unknown permission/);
  });

  it('an action suffix on anything but remote-access:connect', async () => {
    const body = await refused([{ permission: 'device:manage', resources: ['tag:lab/console'] }]);
    expect(body.message).toContain('policy 1 (device:manage)');
    expect(body.message).toContain('"tag:lab/console"');
    expect(body.message).toMatch(/only for remote-access:connect/);
  });

  it.each([
    ['*/console(x=1)', /unknown option "x" for console \(allowed: user\)/],
    ['*/console(user=Root)', /"Root" is not a user name/],
    ['*/console(user=-oroot)', /is not a user name/],
    ['*/reload(now=1)', /takes no options/],
    ['*/tunnel(host=a)', /unknown option "host"/],
    ['*/tunnel(port=70000)', /outside 1-65535/],
    ['*/copy(direction=sideways)', /not upload or download/],
    ['*/copy(path=/tmp/../etc)', /"\.\." segments/],
    ['tag:bad tag', /white space/],
    ['host:abc', /must be "\*", "tag:<tag>" or "node:<node_id>"/],
  ])('options and values: %s', async (resource, reason) => {
    const body = await refused([{ permission: 'remote-access:connect', resources: ['*', resource] }]);
    expect(body.message).toContain('policy 1 (remote-access:connect)');
    expect(body.message).toContain(resource);
    expect(body.message).toMatch(reason);
    expect(body.problems).toHaveLength(1);
    expect(body.problems[0].resource).toBe(resource);
  });

  it('reports every problem, and escapes control characters in the message', async () => {
    const body = await refused([
      { permission: 'remote-access:connect', resources: ['tag:ok', 'tag:\u0000nul'] },
      { permission: 'files:read', resources: ['*/console'] },
    ]);
    expect(body.problems.map((p) => p.policy)).toEqual([0, 1]);
    expect(body.message).not.toContain('\u0000');
    expect(body.message).toContain('\\u0000');
  });
});

describe('PUT and DELETE /role', () => {
  it('PUT replaces name, description and policies and moves updated_at', async () => {
    const role = await createRole([{ permission: 'audit:read' }], { description: 'old' });
    const r = await t.api('PUT', `/api/v2/role/${role.id}`, {
      token: t.adminToken,
      body: { name: `${role.name} v2`, policies: [{ permission: 'files:read' }, { permission: 'reports:read', resources: ['node:g1'] }] },
    });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      id: role.id,
      name: `${role.name} v2`,
      description: '',
      policies: [
        { permission: 'files:read', resources: ['*'] },
        { permission: 'reports:read', resources: ['node:g1'] },
      ],
      created_at: role.created_at,
      created_by: adminId,
    });
    expect(r.body.updated_at).toBeGreaterThanOrEqual(role.updated_at);
  });

  it('the built-in Administrator role cannot be changed or deleted', async () => {
    const put = await t.api('PUT', `/api/v2/role/${adminRoleId}`, {
      token: t.adminToken,
      body: { name: 'Administrator', policies: [{ permission: 'users:read' }] },
    });
    expect(put.status).toBe(409);
    expect(put.body).toMatchObject({ code: 409, error: 'builtin_role' });
    const del = await t.api('DELETE', `/api/v2/role/${adminRoleId}`, { token: t.adminToken });
    expect(del.status).toBe(409);
    expect(del.body.error).toBe('builtin_role');
    const still = await t.api('GET', `/api/v2/role/${adminRoleId}`, { token: t.adminToken });
    expect(still.body.policies).toHaveLength(PERMISSION_NAMES.length);
  });

  it('a role in use cannot be deleted until its users are reassigned', async () => {
    const role = await createRole([{ permission: 'audit:read' }]);
    const spare = await createRole([{ permission: 'files:read' }]);
    const holder = await userHolding([role.id]);
    const r = await t.api('DELETE', `/api/v2/role/${role.id}`, { token: t.adminToken });
    expect(r.status).toBe(409);
    expect(r.body).toMatchObject({ code: 409, error: 'role_in_use', used_by: [{ user_id: holder.id, fname: 'Holder' }] });
    expect((await t.api('GET', `/api/v2/role/${role.id}`, { token: t.adminToken })).status).toBe(200);
    await t.api('PATCH', `/api/v2/user/${holder.id}`, { token: t.adminToken, body: { roles: [spare.id] } });
    expect((await t.api('DELETE', `/api/v2/role/${role.id}`, { token: t.adminToken })).status).toBe(204);
    expect((await t.api('GET', `/api/v2/role/${role.id}`, { token: t.adminToken })).status).toBe(404);
    // A deleted role can no longer be given to anyone.
    const give = await t.api('PATCH', `/api/v2/user/${holder.id}`, { token: t.adminToken, body: { roles: [role.id] } });
    expect(give.status).toBe(400);
    expect(give.body.field).toBe('roles');
  });
});

describe('permissions take effect', () => {
  it("a role change applies on the holder's next call, both ways", async () => {
    const role = await createRole([{ permission: 'users:read' }]);
    const holder = await userHolding([role.id]);
    expect((await t.api('GET', '/api/v2/userlist', { token: holder.token })).status).toBe(200);
    expect((await t.api('GET', '/api/v2/roleslist', { token: holder.token })).status).toBe(403);
    // Several changes in a row: each one is seen on the very next call.
    for (const [policies, users, roles] of [
      [[{ permission: 'roles:read' }], 403, 200],
      [[{ permission: 'users:read' }], 200, 403],
      [[{ permission: 'users:read' }, { permission: 'roles:read' }], 200, 200],
      [[], 403, 403],
    ] as const) {
      const put = await t.api('PUT', `/api/v2/role/${role.id}`, { token: t.adminToken, body: { name: role.name, policies } });
      expect(put.status).toBe(200);
      expect((await t.api('GET', '/api/v2/userlist', { token: holder.token })).status).toBe(users);
      expect((await t.api('GET', '/api/v2/roleslist', { token: holder.token })).status).toBe(roles);
    }
  });

  it('a user change of roles applies on the next call', async () => {
    const readers = await createRole([{ permission: 'users:read' }]);
    const auditors = await createRole([{ permission: 'audit:read' }]);
    const holder = await userHolding([readers.id]);
    expect((await t.api('GET', '/api/v2/userlist', { token: holder.token })).status).toBe(200);
    await t.api('PATCH', `/api/v2/user/${holder.id}`, { token: t.adminToken, body: { roles: [auditors.id] } });
    expect((await t.api('GET', '/api/v2/userlist', { token: holder.token })).status).toBe(403);
    expect((await t.api('GET', '/api/v2/commitlist', { token: holder.token })).status).toBe(200);
  });

  it('two roles narrowed to different devices give the union of both', async () => {
    await t.addGroup({ id: 'site-a', tags: ['site-a'] });
    const a = await t.addDevice({ parent: 'site-a' });
    const b = await t.addDevice({ tags: ['site-b'] });
    const c = await t.addDevice({ tags: ['site-c'] });
    const roleA = await createRole([{ permission: 'device:read', resources: ['node:site-a'] }]);
    const roleB = await createRole([
      { permission: 'device:read', resources: ['tag:site-b'] },
      { permission: 'remote-access:connect', resources: ['*/console', 'tag:site-b'] },
    ]);
    const holder = await userHolding([roleA.id, roleB.id]);
    const principal = await t.broker.services.auth.authenticate(holder.token);
    const access = t.broker.services.access;
    expect((await access.decide(principal, 'device:read', a)).allowed).toBe(true);
    expect((await access.decide(principal, 'device:read', b)).allowed).toBe(true);
    expect((await access.decide(principal, 'device:read', c)).allowed).toBe(false);
    // The spec's example: console on every device, every action on the tagged ones.
    expect((await access.decide(principal, 'remote-access:connect', c, { action: 'console' })).allowed).toBe(true);
    expect((await access.decide(principal, 'remote-access:connect', c, { action: 'reload' })).allowed).toBe(false);
    expect((await access.decide(principal, 'remote-access:connect', b, { action: 'reload' })).allowed).toBe(true);
  });
});

describe('GET /permissionslist', () => {
  it('lists every permission with its description and whether it accepts resources', async () => {
    const r = await t.api('GET', '/api/v2/permissionslist', { token: t.adminToken });
    expect(r.status).toBe(200);
    expect(r.body.total).toBe(PERMISSION_NAMES.length);
    expect(r.body.items.map((i: { permission: string }) => i.permission)).toEqual(PERMISSION_NAMES);
    const byName = Object.fromEntries(r.body.items.map((i: { permission: string }) => [i.permission, i]));
    expect(byName['reports:markread']).toMatchObject({ accepts_resources: true, description: expect.any(String) });
    expect(byName['metrics:read']).toMatchObject({ accepts_resources: false });
    expect(byName['remote-access:connect'].accepts_resources).toBe(true);
    expect(byName['users:manage'].accepts_resources).toBe(false);
    for (const item of r.body.items) expect(Object.keys(item).sort()).toEqual(['accepts_resources', 'description', 'permission']);
  });
});

describe('access to the role calls', () => {
  it('needs a token', async () => {
    expect((await t.api('GET', '/api/v2/roleslist')).status).toBe(401);
    expect((await t.api('GET', '/api/v2/permissionslist')).status).toBe(401);
  });

  it('roles:read reads but cannot change', async () => {
    const reader = await t.userWith([{ permission: 'roles:read' }]);
    expect((await t.api('GET', '/api/v2/roleslist', { token: reader.token })).status).toBe(200);
    expect((await t.api('GET', `/api/v2/role/${adminRoleId}`, { token: reader.token })).status).toBe(200);
    expect((await t.api('GET', '/api/v2/permissionslist', { token: reader.token })).status).toBe(200);
    for (const [method, path, body] of [
      ['POST', '/api/v2/role', { name: 'sneaky', policies: [] }],
      ['PUT', `/api/v2/role/${reader.roleId}`, { name: 'sneaky', policies: [{ permission: 'users:manage' }] }],
      ['DELETE', `/api/v2/role/${reader.roleId}`, undefined],
    ] as const) {
      const r = await t.api(method, path, { token: reader.token, body });
      expect(r.status, `${method} ${path}`).toBe(403);
      expect(r.body).toMatchObject({ code: 403, error: 'forbidden', permission: 'roles:manage' });
    }
  });

  it('without roles:read nothing is readable', async () => {
    const other = await t.userWith([{ permission: 'users:read' }]);
    for (const path of ['/api/v2/roleslist', `/api/v2/role/${adminRoleId}`, '/api/v2/permissionslist']) {
      const r = await t.api('GET', path, { token: other.token });
      expect(r.status, path).toBe(403);
      expect(r.body.permission).toBe('roles:read');
    }
  });

  it('roles:manage can create a role granting what the manager holds', async () => {
    const manager = await t.userWith([{ permission: 'roles:manage' }, { permission: 'files:read' }]);
    const r = await t.api('POST', '/api/v2/role', { token: manager.token, body: { name: 'made by manager', policies: [{ permission: 'files:read' }] } });
    expect(r.status).toBe(201);
    expect(r.body.created_by).toBe(manager.id);
  });
});

describe('GET /profile console_grants', () => {
  it('tells each user which account their console grants open: the named logins, or the agent’s own (no user=)', async () => {
    const named = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:ops/console(user=ops)'] }, { permission: 'device:read' }]);
    const r = await t.api('GET', '/api/v2/profile', { token: named.token });
    expect(r.status).toBe(200);
    expect(r.body.console_grants).toEqual([{ resource: 'tag:ops/console(user=ops)', users: ['ops'] }]);

    const unnamed = await t.userWith([{ permission: 'remote-access:connect', resources: ['*/console', 'tag:x/tunnel(port=22)'] }]);
    expect((await t.api('GET', '/api/v2/profile', { token: unnamed.token })).body.console_grants).toEqual([{ resource: '*/console', users: [] }]);

    const none = await t.userWith([{ permission: 'device:read' }]);
    expect((await t.api('GET', '/api/v2/profile', { token: none.token })).body.console_grants).toEqual([]);
    // The administrator's remote-access:connect on * opens consoles as the agent's own account.
    expect((await t.api('GET', '/api/v2/profile', { token: t.adminToken })).body.console_grants).toEqual([{ resource: '*', users: [] }]);
  });
});
