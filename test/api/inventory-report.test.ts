import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectDevice, enrolDevice, eventually, type FakeConnection, type FakeDevice } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let lab1: string; // in lab (tag x): openssl 3.0.11, nginx container
let lab2: string; // in lab (tag x): openssl 3.0.13
let other: string; // in other: openssl 1.1.1
let silent: string; // in lab, never reported
let tagReader: string; // inventory:read + device:read tag:x
let inventoryOnly: string; // inventory:read alone: no device (device:read says which)
let deviceOnly: string; // device:read, no inventory:read

const digest = (data: unknown) => crypto.createHash('sha256').update(JSON.stringify(data)).digest('hex');
const item = (type: string, data: unknown) => ({ type, digest: digest(data), data });
const software = (packages: Array<[string, string]>) => ({ pkg_manager: 'dpkg', items: packages.map(([name, version]) => ({ name, version, arch: 'amd64' })) });
const container = (image: string) => ({
  id: crypto.randomBytes(8).toString('hex'),
  names: 'web',
  image,
  command: 'nginx',
  created_at: '2024-01-01',
  status: 'Up',
  ports: '80/tcp',
  size: '1kB',
  mounts: '',
  networks: 'bridge',
});
const systemReport = (hostname: string) => ({
  hostname,
  os: { name: 'Debian GNU/Linux', version: '12', id: 'debian' },
  kernel: '6.1.0',
  kernel_version: '#1 SMP',
  arch: 'x86_64',
});

async function record(deviceId: string, type: string, data: unknown) {
  await t.broker.services.inventory.recordItem(deviceId, item(type, data));
}

const get = (path: string, token = t.adminToken) => t.api('GET', `/api/v2${path}`, { token });
const search = (s: object, token = t.adminToken) => get(`/inventory?search=${encodeURIComponent(JSON.stringify(s))}`, token);

beforeAll(async () => {
  t = await startTestBroker();
  await t.addGroup({ id: 'lab', tags: ['x'] });
  await t.addGroup({ id: 'other' });
  lab1 = await t.addDevice({ parent: 'lab', name: 'lab-one' });
  lab2 = await t.addDevice({ parent: 'lab', name: 'lab-two' });
  other = await t.addDevice({ parent: 'other', name: 'other-one' });
  silent = await t.addDevice({ parent: 'lab', name: 'lab-silent' });
  await t.broker.services.inventory.record(lab1, systemReport('lab-one'));
  await record(
    lab1,
    'software',
    software([
      ['openssl', '3.0.11-1~deb12u2'],
      ['bash', '5.2.15-2+b2'],
      ['libssl3', '3.0.11-1~deb12u2'],
    ]),
  );
  await record(
    lab2,
    'software',
    software([
      ['openssl', '3.0.13-1~deb12u1'],
      ['bash', '5.2.15-2+b2'],
    ]),
  );
  await record(
    other,
    'software',
    software([
      ['openssl', '1.1.1w-0+deb11u1'],
      ['bash', '5.1-2'],
    ]),
  );
  await record(lab1, 'docker_containers', { items: [container('nginx:1.25')] });
  await record(lab1, 'docker_images', { items: [{ id: 'sha256:1', repository: 'nginx', tag: '1.25', created_at: 'x', size: '1MB' }] });
  await record(other, 'podman_containers', { items: [container('docker.io/library/postgres:16')] });
  await record(lab1, 'users', {
    items: [{ user: 'root', uid: 0, gid: 0, gecos: 'root', home: '/root', shell: '/bin/bash', has_pwd: 'yes', pwd_alg: 6, pwd_age: 19000 }],
  });
  await record(lab2, 'users', { items: [{ user: 'root', uid: 0, gid: 0, gecos: '', home: '/root', shell: '/bin/sh', has_pwd: 'no', pwd_alg: 0, pwd_age: 0 }] });
  await record(lab1, 'ports', { items: [{ proto: 'tcp', socket: '0.0.0.0:22', proc_info: '/usr/sbin/sshd' }] });
  tagReader = (await t.userWith([{ permission: 'inventory:read' }, { permission: 'device:read', resources: ['tag:x'] }])).token;
  inventoryOnly = (await t.userWith([{ permission: 'inventory:read' }])).token;
  deviceOnly = (await t.userWith([{ permission: 'device:read' }])).token;
});
afterAll(async () => {
  await t?.close();
});

describe('GET /inventoryreport/{device_id}', () => {
  it('serves one item type with its items, paged and searchable', async () => {
    const r = await get(`/inventoryreport/${lab1}?item_type=software`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ node_id: lab1, item_type: 'software', pkg_manager: 'dpkg', total: 3 });
    expect(r.body.items).toContainEqual({ name: 'openssl', version: '3.0.11-1~deb12u2', arch: 'amd64' });
    expect(Date.parse(r.body.received_at)).toBeGreaterThan(0);
    const page = await get(`/inventoryreport/${lab1}?item_type=software&items_per_page=1&offset=1`);
    expect(page.body.items).toHaveLength(1);
    expect(page.body.total).toBe(3);
    const found = await get(`/inventoryreport/${lab1}?item_type=software&search=SSL`);
    expect(found.body.items.map((i: { name: string }) => i.name).sort()).toEqual(['libssl3', 'openssl']);
    const ports = await get(`/inventoryreport/${lab1}?item_type=ports`);
    expect(ports.body.items).toEqual([{ proto: 'tcp', socket: '0.0.0.0:22', proc_info: '/usr/sbin/sshd' }]);
  });

  it('serves system as qbee’s SystemInfo, the default type', async () => {
    const r = await get(`/inventoryreport/${lab1}`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ node_id: lab1, item_type: 'system', system: { host: 'lab-one', arch: 'x86_64', flavor: 'debian_12', class: 'linux' } });
  });

  it('answers 404 no_inventory for a type never reported, 404 unknown device, 400 unknown type', async () => {
    const none = await get(`/inventoryreport/${lab2}?item_type=processes`);
    expect(none.status).toBe(404);
    expect(none.body.error).toBe('no_inventory');
    expect((await get(`/inventoryreport/${silent}?item_type=system`)).body.error).toBe('no_inventory');
    expect((await get(`/inventoryreport/${'b'.repeat(64)}?item_type=software`)).status).toBe(404);
    const bad = await get(`/inventoryreport/${lab1}?item_type=secrets`);
    expect(bad.status).toBe(400);
    expect(bad.body.field).toBe('item_type');
  });

  it('limits a restricted reader to their devices; needs inventory:read', async () => {
    expect((await get(`/inventoryreport/${lab1}?item_type=software`, tagReader)).status).toBe(200);
    const outside = await get(`/inventoryreport/${other}?item_type=software`, tagReader);
    expect(outside.status).toBe(403);
    expect(outside.body.items).toBeUndefined();
    // inventory:read without device:read reaches no device (taking device:read away never widens it).
    expect((await get(`/inventoryreport/${other}?item_type=software`, inventoryOnly)).status).toBe(403);
    expect((await get(`/inventoryreport/${lab1}?item_type=software`, deviceOnly)).status).toBe(403);
    expect((await t.api('GET', `/api/v2/inventoryreport/${lab1}`)).status).toBe(401);
  });
});

describe('GET /inventoryreport/docker/{device_id}', () => {
  it('serves docker and podman containers and images, null for what was never reported', async () => {
    const r = await get(`/inventoryreport/docker/${lab1}`);
    expect(r.status).toBe(200);
    expect(r.body.docker_containers.items[0]).toMatchObject({ image: 'nginx:1.25', names: 'web' });
    expect(r.body.docker_images.items[0]).toMatchObject({ repository: 'nginx', tag: '1.25' });
    expect(r.body.podman_containers).toBeNull();
    const o = await get(`/inventoryreport/docker/${other}`);
    expect(o.body.podman_containers.items[0].image).toBe('docker.io/library/postgres:16');
    expect(o.body.docker_containers).toBeNull();
    expect((await get(`/inventoryreport/docker/${other}`, tagReader)).status).toBe(403);
  });
});

describe('GET /inventorysummarybytype/{node_id}', () => {
  it('counts package versions below a group', async () => {
    const r = await get('/inventorysummarybytype/lab?item_type=software');
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ node_id: 'lab', item_type: 'software', devices_total: 3, devices_reported: 2 });
    expect(r.body.items[0]).toEqual({ name: 'bash', version: '5.2.15-2+b2', arch: 'amd64', devices: 2 });
    expect(r.body.items).toContainEqual({ name: 'openssl', version: '3.0.11-1~deb12u2', arch: 'amd64', devices: 1 });
    expect(r.body.items.some((i: { version: string }) => i.version === '1.1.1w-0+deb11u1')).toBe(false);
    const root = await get('/inventorysummarybytype/root?item_type=software&search=openssl');
    expect(root.body.items.map((i: { version: string; devices: number }) => `${i.version}:${i.devices}`).sort()).toEqual([
      '1.1.1w-0+deb11u1:1',
      '3.0.11-1~deb12u2:1',
      '3.0.13-1~deb12u1:1',
    ]);
    expect(root.body.total).toBe(3);
  });

  it('groups other types: users, containers, ports, system', async () => {
    const users = await get('/inventorysummarybytype/root?item_type=users');
    expect(users.body.items).toEqual([{ user: 'root', devices: 2 }]);
    const containers = await get('/inventorysummarybytype/root?item_type=docker_containers');
    expect(containers.body.items).toEqual([{ image: 'nginx:1.25', devices: 1 }]);
    const ports = await get('/inventorysummarybytype/root?item_type=ports');
    expect(ports.body.items).toEqual([{ port: 22, proto: 'tcp', devices: 1 }]);
    const system = await get('/inventorysummarybytype/lab?item_type=system');
    expect(system.body).toMatchObject({ devices_total: 3, devices_reported: 1, items: [{ flavor: 'debian_12', arch: 'x86_64', devices: 1 }] });
  });

  it('counts only the devices a restricted reader reaches; hides groups outside', async () => {
    const root = await get('/inventorysummarybytype/root?item_type=software&search=openssl', tagReader);
    expect(root.status).toBe(200);
    expect(root.body.devices_total).toBe(3);
    expect(root.body.items.map((i: { version: string }) => i.version).sort()).toEqual(['3.0.11-1~deb12u2', '3.0.13-1~deb12u1']);
    const hidden = await get('/inventorysummarybytype/other?item_type=software', tagReader);
    expect(hidden.status).toBe(404);
    expect((await get(`/inventorysummarybytype/${other}?item_type=software`, tagReader)).status).toBe(404);
    expect((await get('/inventorysummarybytype/no-such-group?item_type=software')).status).toBe(404);
    expect((await get('/inventorysummarybytype/lab', deviceOnly)).status).toBe(403);
    expect((await get('/inventorysummarybytype/bad%20id')).status).toBe(400);
  });
});

describe('GET /inventory: fleet search', () => {
  it('finds the devices running openssl < 3.0.13 in dpkg ordering, with their versions', async () => {
    const r = await search({ package: 'openssl', package_version: '<3.0.13' });
    expect(r.status).toBe(200);
    const byId = Object.fromEntries(r.body.items.map((i: { device_id: string; packages: unknown[] }) => [i.device_id, i.packages]));
    expect(Object.keys(byId).sort()).toEqual([lab1, other].sort());
    expect(byId[lab1]).toEqual([{ name: 'openssl', version: '3.0.11-1~deb12u2', arch: 'amd64', pkg_manager: 'dpkg' }]);
    expect(r.body.total).toBe(2);
    const atLeast = await search({ package: 'openssl', package_version: '>=3.0.13' });
    expect(atLeast.body.items.map((i: { device_id: string }) => i.device_id)).toEqual([lab2]);
    const any = await search({ package: 'openssl' });
    expect(any.body.total).toBe(3);
    expect((await search({ package: 'no-such-package' })).body.total).toBe(0);
    // Combined with qbee's filters: every filter holds.
    expect((await search({ package: 'openssl', ancestor_ids: ['lab'] })).body.total).toBe(2);
  });

  it('finds devices by container image', async () => {
    const r = await search({ container_image: 'POSTGRES' });
    expect(r.body.items.map((i: { device_id: string }) => i.device_id)).toEqual([other]);
    expect((await search({ container_image: 'nginx:1.25' })).body.items.map((i: { device_id: string }) => i.device_id)).toEqual([lab1]);
  });

  it('searches only the devices a restricted reader reaches', async () => {
    const r = await search({ package: 'openssl', package_version: '<3.0.13' }, tagReader);
    expect(r.body.items.map((i: { device_id: string }) => i.device_id)).toEqual([lab1]);
  });

  it('refuses malformed constraints and a version without a package', async () => {
    for (const bad of [
      { package: 'openssl', package_version: '< 3.0 x' },
      { package: 'openssl', package_version: '<1.0-' },
      { package_version: '<1' },
      { package: '' },
      { pkg: 'x' },
    ]) {
      const r = await search(bad);
      expect({ bad, status: r.status }).toEqual({ bad, status: 400 });
      expect(r.body.error).toBeTruthy();
    }
  });
});

describe('types the agent no longer finds', () => {
  it('are forgotten when the system report lists the types found (docker uninstalled)', async () => {
    const d = await t.addDevice({ parent: 'lab' });
    await record(d, 'software', software([['curl', '7.88.1-10']]));
    await record(d, 'docker_images', { items: [{ id: 'sha256:2', repository: 'redis', tag: '7', created_at: 'x', size: '1MB' }] });
    await t.broker.services.inventory.record(d, { ...systemReport('d'), inventory_types: ['software', 'docker_images'] });
    expect((await get(`/inventoryreport/docker/${d}`)).body.docker_images.items).toHaveLength(1);
    await t.broker.services.inventory.record(d, { ...systemReport('d'), inventory_types: ['software', 'no-such-type'] });
    expect((await get(`/inventoryreport/docker/${d}`)).body.docker_images).toBeNull();
    expect((await get(`/inventoryreport/${d}?item_type=software`)).body.total).toBe(1);
    // A report without the list (an older agent) forgets nothing.
    await t.broker.services.inventory.record(d, systemReport('d'));
    expect((await get(`/inventoryreport/${d}?item_type=software`)).body.total).toBe(1);
    await t.broker.services.inventory.record(d, { ...systemReport('d'), inventory_types: [] });
    expect((await get(`/inventoryreport/${d}?item_type=software`)).status).toBe(404);
    expect((await search({ package: 'curl' })).body.total).toBe(0);
  });
});

describe('hostile agent input', () => {
  let device: FakeDevice;
  let conn: FakeConnection;

  beforeAll(async () => {
    await t.addGroup({ id: 'hostile', tags: ['x'] });
    const created = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { group_id: 'hostile', auto_accept: true } });
    device = (await enrolDevice(t, Object.keys(created.body)[0], undefined, 'hostile')).device;
    conn = await connectDevice(t.url, device);
    await eventually(() => t.broker.services.agents.isConnected(device.id));
  });
  afterAll(() => conn?.ws.close());

  const stored = () =>
    t.broker.services.store.db.selectFrom('inventory_items').select(['item_type', 'data']).where('device_id', '=', device.id).orderBy('item_type').execute();
  const packages = () => t.broker.services.store.db.selectFrom('inventory_packages').select(['name', 'version']).where('device_id', '=', device.id).execute();

  it('stores a valid payload sent over the agent connection, stripping unknown fields', async () => {
    const data = { pkg_manager: 'dpkg', items: [{ name: 'openssl', version: '3.0.11', arch: 'amd64', evil: 'x' }], extra: 1 };
    conn.send({ t: 'inventory_item', ...item('software', data) });
    const rows = await eventually(async () => ((await packages()).length === 1 ? packages() : undefined));
    expect(rows).toEqual([{ name: 'openssl', version: '3.0.11' }]);
    const [row] = await stored();
    expect(JSON.parse(row.data)).toEqual({ pkg_manager: 'dpkg', items: [{ name: 'openssl', version: '3.0.11', arch: 'amd64' }] });
  });

  it('drops unknown types, bad digests, malformed and oversized payloads, changing nothing', async () => {
    const before = await stored();
    const tooMany = { pkg_manager: 'dpkg', items: Array.from({ length: 20_001 }, (_, i) => ({ name: `p${i}`, version: '1' })) };
    const hostile = [
      item('secrets', { items: [] }),
      { type: 'software', digest: 'not-hex', data: software([['x', '1']]) },
      item('software', { pkg_manager: 'dpkg', items: [{ name: 'x', version: 1 }] }),
      item('software', { pkg_manager: 'dpkg', items: [{ name: 'x'.repeat(257), version: '1' }] }),
      item('software', { pkg_manager: 'evil', items: [] }),
      item('software', tooMany),
      item('users', { items: [{ user: 'root', uid: -1, gid: 0, gecos: '', home: '/', shell: '/', has_pwd: 'yes', pwd_alg: 0, pwd_age: 0 }] }),
      item('processes', { items: Array.from({ length: 101 }, (_, i) => ({ pid: i, user: 'u', mem: 0, cpu: 0, cmdline: 'x' })) }),
      item('ports', { items: [{ proto: 'sctp', socket: '0.0.0.0:1', proc_info: '' }] }),
      item('software', null),
      { type: 'software', digest: digest(1), data: 'x'.repeat(1024) },
      { type: ['software'], digest: digest(1), data: {} },
    ];
    for (const msg of hostile) conn.send({ t: 'inventory_item', ...msg });
    // A valid message sent after them is processed: the hostile ones before it have been too.
    const users = { items: [{ user: 'root', uid: 0, gid: 0, gecos: '', home: '/root', shell: '/bin/sh', has_pwd: 'no', pwd_alg: 0, pwd_age: 0 }] };
    conn.send({ t: 'inventory_item', ...item('users', users) });
    await eventually(async () => (await stored()).some((r) => r.item_type === 'users'));
    const after = await stored();
    expect(after.filter((r) => r.item_type !== 'users')).toEqual(before);
    expect(after.map((r) => r.item_type)).toEqual(['software', 'users']);
    expect(await packages()).toEqual([{ name: 'openssl', version: '3.0.11' }]);
    // The connection stays up: a bad payload is the agent's problem, not a protocol error.
    expect(t.broker.services.agents.isConnected(device.id)).toBe(true);
  });

  it('drops the items of a device that is not approved, and forgets them when the device is removed', async () => {
    const pending = await t.addDevice({ parent: 'lab' });
    await t.broker.services.store.db.updateTable('devices').set({ state: 'pending' }).where('device_id', '=', pending).execute();
    await record(pending, 'software', software([['x', '1']]));
    expect(await t.broker.services.store.db.selectFrom('inventory_packages').select('name').where('device_id', '=', pending).execute()).toEqual([]);
    const removed = await t.api('DELETE', `/api/v2/inventory/${device.id}`, { token: t.adminToken });
    expect(removed.status).toBe(204);
    expect(await stored()).toEqual([]);
    expect(await packages()).toEqual([]);
  });
});
