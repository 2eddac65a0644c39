import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentClose } from '../../shared/protocol.js';
import { connectDevice, enrolDevice, eventually, type FakeConnection } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let tagged: string; // tag x
let untagged: string;
let online: { id: string; conn: FakeConnection }; // tag x, agent connected
let tagReader: { token: string };
let inventoryOnly: { token: string };
let noInventory: { token: string };
let tagManager: { token: string };

const report = (hostname: string) => ({
  hostname,
  os: { name: 'Debian GNU/Linux', version: '12' },
  kernel: '6.1.0-test',
  arch: 'x86_64',
  cpu: { model: 'Test CPU', cores: 4 },
  memory: { total: 8e9, free: 4e9 },
  disks: [{ mount: '/', size: 1e11, free: 5e10 }],
  network: [{ name: 'eth0', mac: '02:00:00:00:00:01', addresses: [{ address: '10.0.0.2', family: 'IPv4', cidr: '10.0.0.2/24' }] }],
  agent_version: '0.1.0',
  uptime: 1234,
});

beforeAll(async () => {
  t = await startTestBroker();
  await t.addGroup({ id: 'x-group', tags: ['x'] });
  tagged = await t.addDevice({ tags: ['x'], name: 'alpha' });
  untagged = await t.addDevice({ name: 'bravo' });
  await t.broker.services.inventory.record(tagged, report('alpha-host'));
  await t.broker.services.inventory.record(untagged, report('bravo-host'));
  // A real connection for the online counts: enrolled with an auto-accept key into a tag:x group.
  const created = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { group_id: 'x-group', auto_accept: true } });
  const { device } = await enrolDevice(t, Object.keys(created.body)[0], undefined, 'charlie');
  const conn = await connectDevice(t.url, device);
  online = { id: device.id, conn };
  await eventually(() => t.broker.services.agents.isConnected(device.id));
  tagReader = await t.userWith([{ permission: 'inventory:read' }, { permission: 'device:read', resources: ['tag:x'] }]);
  inventoryOnly = await t.userWith([{ permission: 'inventory:read' }]);
  noInventory = await t.userWith([{ permission: 'device:read' }]);
  tagManager = await t.userWith([{ permission: 'device:manage', resources: ['tag:x'] }]);
});
afterAll(async () => {
  online?.conn.ws.close();
  await t?.close();
});

describe('inventory', () => {
  it('serves a device report with received_at', async () => {
    const r = await t.api('GET', `/api/v2/inventory/${tagged}`, { token: t.adminToken });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ device_id: tagged, hostname: 'alpha-host', kernel: '6.1.0-test', cpu: { cores: 4 } });
    expect(Date.parse(r.body.received_at)).toBeGreaterThan(0);
  });

  it('answers 404 before the first report and for unknown devices, 400 for a malformed id', async () => {
    const silent = await t.addDevice();
    const none = await t.api('GET', `/api/v2/inventory/${silent}`, { token: t.adminToken });
    expect(none.status).toBe(404);
    expect(none.body.error).toBe('no_inventory');
    expect((await t.api('GET', `/api/v2/inventory/${'a'.repeat(64)}`, { token: t.adminToken })).status).toBe(404);
    const bad = await t.api('GET', '/api/v2/inventory/not-a-device', { token: t.adminToken });
    expect(bad.status).toBe(400);
    expect(bad.body.field).toBe('device_id');
  });

  it('lists reports of the devices the caller may read, with paging and search', async () => {
    let all = await t.api('GET', '/api/v2/inventorylist', { token: t.adminToken });
    for (const p of ['/api/v2/inventorylist', '/api/v2/inventory']) {
      all = await t.api('GET', p, { token: t.adminToken });
      expect(all.status).toBe(200);
      const ids = all.body.items.map((i: { device_id: string }) => i.device_id);
      expect(ids).toEqual(expect.arrayContaining([tagged, untagged, online.id]));
      expect(all.body.total).toBe(all.body.items.length);

      const mine = await t.api('GET', p, { token: tagReader.token });
      expect(mine.status).toBe(200);
      expect(mine.body.items.map((i: { device_id: string }) => i.device_id).sort()).toEqual([tagged, online.id].sort());
      expect(mine.body.total).toBe(2);
    }
    const alpha = await t.api('GET', '/api/v2/inventorylist?search=alp', { token: t.adminToken });
    expect(alpha.body.items).toHaveLength(1);
    expect(alpha.body.items[0]).toMatchObject({ device_id: tagged, title: 'alpha', hostname: 'alpha-host', connected: false });
    const page = await t.api('GET', '/api/v2/inventorylist?items_per_page=1&offset=1', { token: t.adminToken });
    expect(page.body.items).toHaveLength(1);
    expect(page.body.total).toBeGreaterThanOrEqual(3);
    const live = (await t.api('GET', '/api/v2/inventorylist?search=charlie', { token: t.adminToken })).body.items[0];
    expect(live).toMatchObject({ device_id: online.id, connected: true });
    // inventory:read alone reaches no device: device:read says which (taking it away never widens inventory:read).
    const nothing = await t.api('GET', '/api/v2/inventorylist', { token: inventoryOnly.token });
    expect(nothing.status).toBe(200);
    expect(nothing.body.total).toBe(0);
    const bad = await t.api('GET', '/api/v2/inventorylist?items_per_page=5000', { token: t.adminToken });
    expect(bad.status).toBe(400);
    expect(bad.body.field).toBe('items_per_page');
  });

  it('counts online and offline devices among those the caller reaches', async () => {
    const all = await t.api('GET', '/api/v2/inventoryonlinestats', { token: t.adminToken });
    expect(all.status).toBe(200);
    expect(all.body.online).toBe(1);
    expect(all.body.total).toBe(all.body.online + all.body.offline);
    expect(all.body.total).toBeGreaterThanOrEqual(3);
    const mine = await t.api('GET', '/api/v2/inventoryonlinestats', { token: tagReader.token });
    expect(mine.body).toEqual({ online: 1, offline: 1, total: 2 });
  });

  it('needs inventory:read, narrowed by the caller’s device:read resources', async () => {
    expect((await t.api('GET', `/api/v2/inventory/${tagged}`)).status).toBe(401);
    expect((await t.api('GET', '/api/v2/inventorylist')).status).toBe(401);
    for (const p of [`/api/v2/inventory/${tagged}`, '/api/v2/inventorylist', '/api/v2/inventory', '/api/v2/inventoryonlinestats']) {
      const r = await t.api('GET', p, { token: noInventory.token });
      expect(r.status, p).toBe(403);
    }
    expect((await t.api('GET', `/api/v2/inventory/${tagged}`, { token: tagReader.token })).status).toBe(200);
    const outside = await t.api('GET', `/api/v2/inventory/${untagged}`, { token: tagReader.token });
    expect(outside.status).toBe(403);
    // Without device:read, inventory:read (which takes no resources) reaches no device.
    expect((await t.api('GET', `/api/v2/inventory/${untagged}`, { token: inventoryOnly.token })).status).toBe(403);
    expect((await t.api('GET', `/api/v2/inventory/${'c'.repeat(64)}`, { token: tagReader.token })).status).toBe(404);
  });
});

describe('device status', () => {
  it('answers {uuid, remote_access, connected, last_seen}, and while remote access is up the edge qbee-cli dials', async () => {
    const live = await t.api('GET', `/api/v2/device/${online.id}/status`, { token: tagReader.token });
    expect(live.status).toBe(200);
    // No PUBLIC_URL: the host this request came to (127.0.0.1, written localhost), edge_version 1.
    expect(live.body).toEqual({
      uuid: online.id,
      remote_access: true,
      connected: true,
      last_seen: expect.any(String),
      edge: `localhost:${t.broker.port}`,
      edge_version: 1,
    });
    const idle = await t.api('GET', `/api/v2/device/${tagged}/status`, { token: t.adminToken });
    expect(idle.body).toEqual({ uuid: tagged, remote_access: false, connected: false, last_seen: null });
  });

  it('needs device:read on the device; 404 unknown, 400 malformed', async () => {
    expect((await t.api('GET', `/api/v2/device/${tagged}/status`)).status).toBe(401);
    expect((await t.api('GET', `/api/v2/device/${untagged}/status`, { token: tagReader.token })).status).toBe(403);
    expect((await t.api('GET', `/api/v2/device/${tagged}/status`, { token: inventoryOnly.token })).status).toBe(403);
    expect((await t.api('GET', `/api/v2/device/${'b'.repeat(64)}/status`, { token: t.adminToken })).status).toBe(404);
    expect((await t.api('GET', '/api/v2/device/zzz/status', { token: t.adminToken })).status).toBe(400);
  });
});

describe('DELETE /inventory/{device_id}', () => {
  it('needs device:manage on the device', async () => {
    const r = await t.api('DELETE', `/api/v2/inventory/${untagged}`, { token: tagManager.token });
    expect(r.status).toBe(403);
    expect((await t.api('DELETE', `/api/v2/inventory/${untagged}`, { token: tagReader.token })).status).toBe(403);
    expect((await t.api('DELETE', `/api/v2/inventory/${untagged}`)).status).toBe(401);
    expect((await t.api('GET', `/api/v2/inventory/${untagged}`, { token: t.adminToken })).status).toBe(200);
  });

  it('removes the device like removeapprovedhost, cutting its connection', async () => {
    const r = await t.api('DELETE', `/api/v2/inventory/${online.id}`, { token: tagManager.token });
    expect(r.status).toBe(204);
    expect(await online.conn.closed).toBe(AgentClose.removed);
    expect((await t.api('GET', `/api/v2/inventory/${online.id}`, { token: t.adminToken })).status).toBe(404);
    expect((await t.api('GET', `/api/v2/device/${online.id}/status`, { token: t.adminToken })).status).toBe(404);
    const stats = await t.api('GET', '/api/v2/inventoryonlinestats', { token: t.adminToken });
    expect(stats.body.online).toBe(0);
    expect((await t.api('DELETE', `/api/v2/inventory/${online.id}`, { token: t.adminToken })).status).toBe(404);
  });
});
