/**
 * Configuration reach as an attacker tries it (docs/security.md, "Configuration reach is explicit,
 * and secrets stay masked"): dropping one's own device:read to reach more, a role manager taking
 * grants or recording away from someone stronger or lowering their own recording, distributing file-store files one may not read,
 * comparing secret references to test guesses, and credentials other than parameters' secrets.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrations } from '../../broker/db/migrations/index.js';
import { startTestBroker, testDatabase, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let lab: string; // a device tagged lab
let outside: string; // a device elsewhere

const admin = () => ({ token: t.adminToken });
const change = (token: string, body: unknown) => t.api('POST', '/api/v2/change', { token, body });
const commit = (token: string, message: string, changes?: unknown[]) =>
  t.api('POST', '/api/v2/commit', { token, body: { action: 'commit', message, ...(changes ? { changes } : {}) } });

async function role(name: string, policies: unknown[], recording?: string): Promise<string> {
  const r = await t.api('POST', '/api/v2/role', { ...admin(), body: { name, policies, ...(recording ? { recording } : {}) } });
  expect(r.status, JSON.stringify(r.body)).toBe(201);
  return r.body.id;
}

async function assign(userId: string, roles: string[]): Promise<void> {
  const r = await t.api('PATCH', `/api/v2/user/${userId}`, { ...admin(), body: { roles } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
}

beforeAll(async () => {
  t = await startTestBroker();
  await t.addGroup({ id: 'labgroup', tags: ['lab'] });
  lab = await t.addDevice({ parent: 'labgroup', name: 'lab-1' });
  outside = await t.addDevice({ name: 'prod-1' });
});
afterAll(async () => {
  await t?.close();
});

describe('removing a permission never widens another', () => {
  it('a lab configurator who drops their own device:read reaches no more: not root, not other devices', async () => {
    const u = await t.userWith([
      { permission: 'configuration:manage', resources: ['tag:lab'] },
      { permission: 'configuration:read', resources: ['tag:lab'] },
      { permission: 'users:manage' },
      { permission: 'users:read' },
    ]);
    const reader = await role('lab readers', [{ permission: 'device:read', resources: ['tag:lab'] }]);
    await assign(u.id, [u.roleId, reader]);
    const users = { formtype: 'users', config: { items: [{ username: 'mallory', action: 'add' }] } };
    const tryAll = async () => ({
      root: (await change(u.token, { node_id: 'root', ...users })).status,
      outside: (await change(u.token, { node_id: outside, ...users })).status,
      rootRead: (await t.api('GET', '/api/v2/config/node/root', { token: u.token })).status,
    });
    expect(await tryAll()).toEqual({ root: 403, outside: 403, rootRead: 403 });
    // Acting on oneself passes: the user drops their own device:read role.
    const dropped = await t.api('PATCH', `/api/v2/user/${u.id}`, { token: u.token, body: { roles: [u.roleId] } });
    expect(dropped.status, JSON.stringify(dropped.body)).toBe(200);
    expect(await tryAll()).toEqual({ root: 403, outside: 403, rootRead: 403 });
    expect((await commit(u.token, 'everywhere', [{ node_id: 'root', ...users }])).status).toBe(403);
    // What the grant names still works.
    expect((await change(u.token, { tag: 'lab', ...users })).status).toBe(200);
    await t.api('DELETE', '/api/v2/changes', { token: u.token });
  });

  it('inventory and metrics readers who drop device:read read no device they could not read before', async () => {
    const u = await t.userWith([
      { permission: 'inventory:read' },
      { permission: 'metrics:read' },
      { permission: 'users:manage' },
      { permission: 'users:read' },
    ]);
    const reader = await role('lab readers 2', [{ permission: 'device:read', resources: ['tag:lab'] }]);
    await assign(u.id, [u.roleId, reader]);
    const tryAll = async () => ({
      inventory: (await t.api('GET', `/api/v2/inventory/${outside}`, { token: u.token })).status,
      metrics: (await t.api('GET', `/api/v2/device/${outside}/metrics/latest`, { token: u.token })).status,
    });
    expect(await tryAll()).toEqual({ inventory: 403, metrics: 403 });
    expect((await t.api('PATCH', `/api/v2/user/${u.id}`, { token: u.token, body: { roles: [u.roleId] } })).status).toBe(200);
    expect(await tryAll()).toEqual({ inventory: 403, metrics: 403 });
  });
});

describe('upgrading keeps existing configurators no wider (migration 0017)', () => {
  it('narrows a role’s configuration grants to the device:read its holders had', async () => {
    const u = await t.userWith([
      { permission: 'device:read', resources: ['tag:lab'] },
      { permission: 'configuration:manage' },
      { permission: 'configuration:read' },
    ]);
    const db = t.broker.services.store.db;
    await migrations(testDatabase())['0017_configuration_reach'].up(db as never);
    const row = await db.selectFrom('roles').select('policies').where('id', '=', u.roleId).executeTakeFirstOrThrow();
    expect(JSON.parse(row.policies)).toEqual([
      { permission: 'device:read', resources: ['tag:lab'] },
      { permission: 'configuration:manage', resources: ['tag:lab'] },
      { permission: 'configuration:read', resources: ['tag:lab'] },
    ]);
    const token = await t.login(u.email, u.password);
    expect((await change(token, { node_id: 'root', formtype: 'ntp', config: { servers: ['x'] } })).status).toBe(403);
    expect((await change(token, { tag: 'lab', formtype: 'ntp', config: { servers: ['x'] } })).status).toBe(200);
    await t.api('DELETE', '/api/v2/changes', { token });
    // The Administrator role is left as it is.
    const builtin = await db.selectFrom('roles').select('policies').where('builtin', '=', 1).executeTakeFirstOrThrow();
    expect(JSON.parse(builtin.policies)).toContainEqual({ permission: 'configuration:manage', resources: ['*'] });
  });
});

describe('taking grants away from a role is checked like giving them', () => {
  it('a role manager cannot empty a role held by someone who outranks them', async () => {
    const manager = await t.userWith([{ permission: 'roles:manage' }, { permission: 'roles:read' }, { permission: 'device:read', resources: ['tag:lab'] }]);
    const victimRole = await role('stronger', [{ permission: 'device:read', resources: ['tag:lab'] }, { permission: 'users:manage' }]);
    const victim = await t.userWith([{ permission: 'users:read' }]);
    await assign(victim.id, [victim.roleId, victimRole]);
    const emptied = await t.api('PUT', `/api/v2/role/${victimRole}`, { token: manager.token, body: { name: 'stronger', policies: [] } });
    expect(emptied.status, JSON.stringify(emptied.body)).toBe(403);
    expect(emptied.body.error).toBe('privilege_escalation');
    const narrowed = await t.api('PUT', `/api/v2/role/${victimRole}`, {
      token: manager.token,
      body: { name: 'stronger', policies: [{ permission: 'users:manage' }] },
    });
    expect(narrowed.status).toBe(403);
    const after = await t.api('GET', `/api/v2/role/${victimRole}`, admin());
    expect(after.body.policies).toHaveLength(2);
    // A role whose holders the manager outranks may be narrowed.
    const weak = await role('weak', [{ permission: 'device:read', resources: ['tag:lab'] }]);
    const weakling = await t.userWith([]);
    await assign(weakling.id, [weak]);
    expect((await t.api('PUT', `/api/v2/role/${weak}`, { token: manager.token, body: { name: 'weak', policies: [] } })).status).toBe(200);
  });

  it('turning a role’s console recording off or down needs outranking every holder', async () => {
    const manager = await t.userWith([{ permission: 'roles:manage' }, { permission: 'roles:read' }, { permission: 'device:read', resources: ['tag:lab'] }]);
    const recorded = await role('recorded', [{ permission: 'device:read', resources: ['tag:lab'] }], 'required');
    const holder = await t.userWith([{ permission: 'users:manage' }]);
    await assign(holder.id, [holder.roleId, recorded]);
    for (const recording of ['off', 'default']) {
      const r = await t.api('PUT', `/api/v2/role/${recorded}`, {
        token: manager.token,
        body: { name: 'recorded', policies: [{ permission: 'device:read', resources: ['tag:lab'] }], recording },
      });
      expect(r.status, recording).toBe(403);
      expect(r.body.error).toBe('privilege_escalation');
    }
    expect((await t.api('GET', `/api/v2/role/${recorded}`, admin())).body.recording).toBe('required');
    // Keeping it, or raising it, is no removal.
    const kept = await t.api('PUT', `/api/v2/role/${recorded}`, {
      token: manager.token,
      body: { name: 'recorded again', policies: [{ permission: 'device:read', resources: ['tag:lab'] }], recording: 'required' },
    });
    expect(kept.status, JSON.stringify(kept.body)).toBe(200);
  });
});

describe('a role manager cannot lower the recording of their own consoles', () => {
  const connect = [{ permission: 'remote-access:connect', resources: ['tag:lab'] }];

  it('turning down the recording of a role one holds (even alone) is refused', async () => {
    const required = await role('my required', connect, 'required');
    const manager = await t.userWith([{ permission: 'roles:manage' }, { permission: 'roles:read' }]);
    await assign(manager.id, [manager.roleId, required]);
    for (const recording of ['off', 'default']) {
      const r = await t.api('PUT', `/api/v2/role/${required}`, { token: manager.token, body: { name: 'my required', policies: connect, recording } });
      expect(r.status, recording).toBe(403);
      expect(r.body.error).toBe('privilege_escalation');
    }
    expect((await t.api('GET', `/api/v2/role/${required}`, admin())).body.recording).toBe('required');
    // Another role manager, who does not hold it and outranks its holder, may.
    const other = await t.userWith([{ permission: 'roles:manage' }, { permission: 'roles:read' }, ...connect, { permission: 'users:read' }]);
    const r = await t.api('PUT', `/api/v2/role/${required}`, { token: other.token, body: { name: 'my required', policies: connect, recording: 'default' } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
  });

  it('taking remote-access:connect out of a required role one holds, leaving an off role of one’s own granting it, is refused', async () => {
    const required = await role('required console', connect, 'required');
    const unrecorded = await role('unrecorded console', connect, 'off');
    const manager = await t.userWith([{ permission: 'roles:manage' }, { permission: 'roles:read' }]);
    await assign(manager.id, [manager.roleId, required, unrecorded]);
    const r = await t.api('PUT', `/api/v2/role/${required}`, { token: manager.token, body: { name: 'required console', policies: [], recording: 'required' } });
    expect(r.status, JSON.stringify(r.body)).toBe(403);
    expect(r.body.error).toBe('privilege_escalation');
    expect((await t.api('GET', `/api/v2/role/${required}`, admin())).body.policies).toHaveLength(1);
  });

  it('a user manager cannot take a required role from themselves while keeping an off role granting the console', async () => {
    const required = await role('required for me', connect, 'required');
    const unrecorded = await role('off for me', connect, 'off');
    const manager = await t.userWith([{ permission: 'users:manage' }, { permission: 'users:read' }]);
    await assign(manager.id, [manager.roleId, required, unrecorded]);
    const r = await t.api('PATCH', `/api/v2/user/${manager.id}`, { token: manager.token, body: { roles: [manager.roleId, unrecorded] } });
    expect(r.status, JSON.stringify(r.body)).toBe(403);
    expect(r.body.error).toBe('privilege_escalation');
    expect((await t.api('GET', `/api/v2/user/${manager.id}`, admin())).body.roles).toContain(required);
    // Dropping both console roles leaves no unrecorded console: allowed.
    const both = await t.api('PATCH', `/api/v2/user/${manager.id}`, { token: manager.token, body: { roles: [manager.roleId] } });
    expect(both.status, JSON.stringify(both.body)).toBe(200);
    // Another user manager may take the required role away from them.
    await assign(manager.id, [manager.roleId, required, unrecorded]);
    const byAdmin = await t.api('PATCH', `/api/v2/user/${manager.id}`, { ...admin(), body: { roles: [manager.roleId, unrecorded] } });
    expect(byAdmin.status, JSON.stringify(byAdmin.body)).toBe(200);
  });
});

describe('files named by a configuration need files:read', () => {
  const secretFile = (source: string) => ({
    node_id: lab,
    formtype: 'file_distribution',
    config: { files: [{ templates: [{ source, destination: '/tmp/x', is_template: false }] }] },
  });

  it('a configurator without files:read cannot distribute /secret/x to their device, staged or inline', async () => {
    const configurator = await t.tokenWith([
      { permission: 'configuration:manage', resources: ['tag:lab'] },
      { permission: 'configuration:read', resources: ['tag:lab'] },
    ]);
    const staged = await change(configurator, secretFile('/secret/prod-db.env'));
    expect(staged.status).toBe(403);
    expect(staged.body.error).toBe('files_not_readable');
    expect((await commit(configurator, 'inline', [secretFile('/secret/prod-db.env')])).body.error).toBe('files_not_readable');
    for (const [formtype, config] of [
      ['software_management', { items: [{ package: 'nginx', config_files: [{ config_template: '/secret/nginx.conf', config_location: '/etc/nginx.conf' }] }] }],
      ['docker_containers', { items: [{ name: 'db', image: 'postgres', env_file: '/secret/prod-db.env' }] }],
      ['podman_containers', { items: [{ name: 'db', image: 'postgres', env_file: '/secret/prod-db.env' }] }],
      ['rauc', { rauc_bundle: '/secret/firmware.raucb' }],
    ] as const) {
      const r = await change(configurator, { node_id: lab, formtype, config });
      expect(r.status, formtype).toBe(403);
      expect(r.body.error, formtype).toBe('files_not_readable');
    }
    expect((await t.api('GET', '/api/v2/changelist', { token: configurator })).body).toEqual([]);
  });

  it('files:read is checked again at commit, for the committing user', async () => {
    const u = await t.userWith([
      { permission: 'configuration:manage', resources: ['tag:lab'] },
      { permission: 'configuration:read', resources: ['tag:lab'] },
      { permission: 'files:read' },
    ]);
    expect((await change(u.token, secretFile('/secret/prod-db.env'))).status).toBe(200);
    // files:read is taken away between staging and commit.
    const r = await t.api('PUT', `/api/v2/role/${u.roleId}`, {
      ...admin(),
      body: {
        name: `role-${u.roleId}`,
        policies: [
          { permission: 'configuration:manage', resources: ['tag:lab'] },
          { permission: 'configuration:read', resources: ['tag:lab'] },
        ],
      },
    });
    expect(r.status).toBe(200);
    const refused = await commit(u.token, 'late');
    expect(refused.status).toBe(403);
    expect(refused.body.error).toBe('files_not_readable');
    const own = await t.api('GET', `/api/v2/config/node/${lab}?scope=own`, { token: u.token });
    expect(own.body.config.bundles).not.toContain('file_distribution');
  });
});

describe('secrets stay masked and references tell nothing', () => {
  it('staging a guess does not give the reference of the real secret', async () => {
    expect(
      (await commit(t.adminToken, 'vault', [{ tag: 'vault', formtype: 'parameters', config: { secrets: [{ key: 'db', value: 'real-password-1' }] } }])).status,
    ).toBe(200);
    const attacker = await t.tokenWith([
      { permission: 'configuration:manage', resources: ['tag:vault'] },
      { permission: 'configuration:read', resources: ['tag:vault'] },
    ]);
    const real = (await t.api('GET', '/api/v2/config/tag/vault', { token: attacker })).body.config.bundle_data.parameters.secrets[0].value;
    expect(real).toMatch(/^secret-ref:/);
    const refs: string[] = [];
    for (const guess of ['wrong-guess', 'real-password-1']) {
      const staged = await change(attacker, { tag: 'vault', formtype: 'parameters', config: { secrets: [{ key: 'db', value: guess }] } });
      expect(staged.status).toBe(200);
      refs.push(staged.body.content.config.secrets[0].value);
      const preview = await t.api('GET', '/api/v2/configpreview/tag/vault', { token: attacker });
      refs.push(preview.body.config.bundle_data.parameters.secrets[0].value);
    }
    // The right guess's references are no more like the real one than the wrong guess's (the
    // preview shows a staged value by the staged change's own reference).
    for (const ref of refs) expect(ref).not.toBe(real);
    expect(refs[0]).toBe(refs[1]);
    expect(refs[2]).toBe(refs[3]);
    expect(refs[2]).not.toBe(refs[0]);
    await t.api('DELETE', '/api/v2/changes', { token: attacker });
    // A reference sent back unchanged keeps the stored secret.
    expect((await commit(attacker, 'keep', [{ tag: 'vault', formtype: 'parameters', config: { secrets: [{ key: 'db', value: real }] } }])).status).toBe(200);
    const stored = await t.broker.services.store.db.selectFrom('config_entities').select('data').where('entity_id', '=', 'vault').executeTakeFirstOrThrow();
    expect(JSON.parse(stored.data).secrets).toEqual([{ key: 'db', value: 'real-password-1' }]);
  });

  it('registry passwords and password hashes never show: config, changes, commits, previews, audit', async () => {
    const docker = { items: [], registry_auths: [{ server: 'registry.example.com', username: 'ci', password: 'registry-pw-7' }] };
    const password = { users: [{ username: 'root', passwordhash: '$6$saltsalt$hashedvalue8' }] };
    const changes = [
      { node_id: lab, formtype: 'docker_containers', config: docker },
      { node_id: lab, formtype: 'podman_containers', config: docker },
      { node_id: lab, formtype: 'password', config: password },
    ];
    const leaks = (body: unknown) => /registry-pw-7|hashedvalue8/.test(JSON.stringify(body));
    const staged = [];
    for (const c of changes) {
      const r = await change(t.adminToken, c);
      expect(r.status).toBe(200);
      expect(leaks(r.body)).toBe(false);
      staged.push(r.body);
    }
    expect(leaks((await t.api('GET', '/api/v2/changelist', admin())).body)).toBe(false);
    expect(leaks((await t.api('GET', `/api/v2/change/${staged[0].sha}`, admin())).body)).toBe(false);
    expect(leaks((await t.api('GET', `/api/v2/configpreview/${lab}`, admin())).body)).toBe(false);
    const done = await commit(t.adminToken, 'credentials');
    expect(done.status).toBe(200);
    const shown = await t.api('GET', `/api/v2/config/${lab}`, admin());
    expect(leaks(shown.body)).toBe(false);
    expect(shown.body.config.bundle_data.docker_containers.registry_auths[0].password).toMatch(/^secret-ref:/);
    expect(shown.body.config.bundle_data.password.users[0].passwordhash).toMatch(/^secret-ref:/);
    expect(leaks((await t.api('GET', `/api/v2/config/node/${lab}?scope=own`, admin())).body)).toBe(false);
    expect(leaks((await t.api('GET', `/api/v2/commit/${done.body.sha}`, admin())).body)).toBe(false);
    expect(leaks((await t.api('GET', '/api/v2/changelist?search={"status":"committed"}', admin())).body)).toBe(false);
    // A refused change is audited with its body: credentials masked there too.
    const refused = await change(t.adminToken, { node_id: lab, formtype: 'docker_containers', config: { ...docker, typo: 1 } });
    expect(refused.status).toBe(400);
    expect(leaks((await t.api('GET', '/api/v2/commitlist?items_per_page=1000', admin())).body)).toBe(false);
    // Sending the references back keeps the stored credentials.
    const own = (await t.api('GET', `/api/v2/config/node/${lab}?scope=own`, admin())).body.config.bundle_data;
    const back = await commit(t.adminToken, 'same again', [
      { node_id: lab, formtype: 'docker_containers', config: { items: [], registry_auths: own.docker_containers.registry_auths } },
      { node_id: lab, formtype: 'password', config: { users: own.password.users } },
    ]);
    expect(back.status, JSON.stringify(back.body)).toBe(200);
    const rows = await t.broker.services.store.db.selectFrom('config_entities').select(['bundle', 'data']).where('entity_id', '=', lab).execute();
    const data = Object.fromEntries(rows.map((r) => [r.bundle, JSON.parse(r.data)]));
    expect(data.docker_containers.registry_auths[0].password).toBe('registry-pw-7');
    expect(data.password.users[0].passwordhash).toBe('$6$saltsalt$hashedvalue8');
  });
});
