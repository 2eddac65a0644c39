import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

async function administratorRoleId(): Promise<string> {
  const r = await t.api('GET', '/api/v2/roleslist', { token: t.adminToken });
  return r.body.items.find((role: { builtin: boolean }) => role.builtin).id;
}

describe('no privilege escalation through users:manage or roles:manage', () => {
  it('refuses a role manager a role with permissions they do not hold, and allows one they do', async () => {
    const manager = await t.userWith([{ permission: 'roles:manage' }, { permission: 'roles:read' }, { permission: 'device:read', resources: ['tag:lab'] }]);
    const denied = await t.api('POST', '/api/v2/role', {
      token: manager.token,
      body: { name: 'wider', policies: [{ permission: 'device:read', resources: ['*'] }, { permission: 'users:manage' }] },
    });
    expect(denied.status).toBe(403);
    expect(denied.body.error).toBe('privilege_escalation');
    expect(denied.body.missing).toEqual([
      { permission: 'device:read', resource: '*' },
      { permission: 'users:manage', resource: '*' },
    ]);
    const allowed = await t.api('POST', '/api/v2/role', {
      token: manager.token,
      body: { name: 'lab readers', policies: [{ permission: 'device:read', resources: ['tag:lab'] }] },
    });
    expect(allowed.status).toBe(201);
    const list = await t.api('GET', '/api/v2/roleslist', { token: t.adminToken });
    expect(list.body.items.map((r: { name: string }) => r.name)).not.toContain('wider');
  });

  it('refuses a user manager assigning the Administrator role, to others or to themself', async () => {
    const manager = await t.userWith([{ permission: 'users:manage' }, { permission: 'users:read' }]);
    const admin = await administratorRoleId();
    const create = await t.api('POST', '/api/v2/user', {
      token: manager.token,
      body: { fname: 'Eve', lname: 'Lated', email: 'eve@example.com', roles: [admin], password: 'password-eve-1' },
    });
    expect(create.status).toBe(403);
    expect(create.body.error).toBe('privilege_escalation');
    const self = await t.api('PATCH', `/api/v2/user/${manager.id}`, { token: manager.token, body: { roles: [admin, manager.roleId] } });
    expect(self.status).toBe(403);
    const after = await t.api('GET', `/api/v2/user/${manager.id}`, { token: t.adminToken });
    expect(after.body.roles).toEqual([manager.roleId]);
    // Renaming a user who holds roles the manager lacks is fine: no new grant.
    const rename = await t.api('PATCH', `/api/v2/user/${manager.id}`, { token: manager.token, body: { fname: 'Renamed' } });
    expect(rename.status).toBe(200);
  });
});
