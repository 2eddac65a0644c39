/** The group tree: GET/PUT /grouptree, GET /grouptree/{node_id}, PATCH /grouptree/{node_id}, GET /node/{node_id}, GET /tagslist. */
import crypto from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { approvedDeviceRow, startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;

beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

type Node = {
  id: string;
  node_id: string;
  title: string;
  type: string;
  tags: string[];
  nodes: Node[];
  status?: string;
  last_reported?: number | null;
  attributes?: any;
};

function find(tree: Node, id: string): Node | undefined {
  if (tree.node_id === id) return tree;
  for (const child of tree.nodes) {
    const hit = find(child, id);
    if (hit) return hit;
  }
  return undefined;
}

function ids(tree: Node, type?: string): string[] {
  const out: string[] = [];
  const walk = (n: Node) => {
    if (!type || n.type === type) out.push(n.node_id);
    n.nodes.forEach(walk);
  };
  walk(tree);
  return out;
}

async function tree(token = t.adminToken) {
  const r = await t.api('GET', '/api/v2/grouptree?_format=json', { token });
  expect(r.status).toBe(200);
  return r.body as { total_devices: number; tree: Node };
}

async function changeTree(changes: unknown[], token = t.adminToken) {
  return t.api('PUT', '/api/v2/grouptree', { token, body: { changes } });
}

/** A fresh prefix so tests do not see each other's groups. */
const unique = (name: string) => `${name}-${crypto.randomBytes(3).toString('hex')}`;

describe('GET /grouptree', () => {
  it('answers {total_devices, tree} with root, the unassigned group, groups and devices', async () => {
    const g = await t.addGroup({ id: unique('shape'), tags: ['shape-tag'], title: 'Shape group' });
    const d = await t.addDevice({ parent: g, tags: ['own'], name: 'shape-device' });
    const body = await tree();
    expect(body.tree).toMatchObject({ id: 'root', node_id: 'root', type: 'group' });
    expect(find(body.tree, 'unassigned_group')?.type).toBe('group');
    const group = find(body.tree, g) as Node;
    expect(group).toMatchObject({ id: g, node_id: g, title: 'Shape group', type: 'group', tags: ['shape-tag'] });
    const device = find(group, d) as Node;
    expect(device).toMatchObject({
      id: d,
      node_id: d,
      title: 'shape-device',
      type: 'device',
      tags: ['own'],
      nodes: [],
      status: 'offline',
      last_reported: null,
    });
    expect(device.attributes).toMatchObject({ device_name: 'shape-device', description: '', custom: {} });
    expect(body.total_devices).toBe(ids(body.tree, 'device').length);
  });

  it('accepts _format=json and refuses other formats with 400', async () => {
    expect((await t.api('GET', '/api/v2/grouptree', { token: t.adminToken })).status).toBe(200);
    const r = await t.api('GET', '/api/v2/grouptree?_format=xml', { token: t.adminToken });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('_format');
  });

  it('reports a device online when heard from within two minutes, and lets live state override', async () => {
    const fresh = await t.addDevice();
    const stale = await t.addDevice();
    const db = t.broker.services.store.db;
    const now = new Date().toISOString();
    await db.updateTable('devices').set({ last_seen: now }).where('device_id', '=', fresh).execute();
    await db
      .updateTable('devices')
      .set({ last_seen: new Date(Date.now() - 10 * 60_000).toISOString() })
      .where('device_id', '=', stale)
      .execute();
    // A live source that does not know falls back to the last contact.
    const live = t.broker.services.devices.setOnlineSource(() => undefined);
    try {
      let body = await tree();
      expect(find(body.tree, fresh)).toMatchObject({ status: 'online', last_reported: Math.floor(Date.parse(now) / 1000) });
      expect(find(body.tree, stale)?.status).toBe('offline');
      t.broker.services.devices.setOnlineSource((id) => (id === stale ? true : id === fresh ? false : undefined));
      body = await tree();
      expect(find(body.tree, stale)?.status).toBe('online');
      expect(find(body.tree, fresh)?.status).toBe('offline');
    } finally {
      t.broker.services.devices.setOnlineSource(live);
    }
  });

  it('shows a tag-restricted user only tagged devices (own or inherited tags) and the groups leading to them', async () => {
    const top = await t.addGroup({ id: unique('tagtop') });
    const tagged = await t.addGroup({ id: unique('taggroup'), parent: top, tags: ['blue'] });
    const plain = await t.addGroup({ id: unique('plain'), parent: top });
    const empty = await t.addGroup({ id: unique('empty') });
    const inherits = await t.addDevice({ parent: tagged });
    const own = await t.addDevice({ parent: plain, tags: ['blue'] });
    const hidden = await t.addDevice({ parent: plain });
    const unassignedHidden = await t.addDevice();
    const user = await t.userWith([{ permission: 'device:read', resources: ['tag:blue'] }]);
    const body = await tree(user.token);
    const devices = ids(body.tree, 'device');
    expect(devices).toContain(inherits);
    expect(devices).toContain(own);
    expect(devices).not.toContain(hidden);
    expect(devices).not.toContain(unassignedHidden);
    expect(body.total_devices).toBe(devices.length);
    const groups = ids(body.tree, 'group');
    expect(groups).toEqual(expect.arrayContaining(['root', top, tagged, plain]));
    expect(groups).not.toContain(empty);
    expect(groups).not.toContain('unassigned_group');
  });

  it('shows a node: user the group subtree, empty groups in it included, and nothing beside it', async () => {
    const site = await t.addGroup({ id: unique('site') });
    const sub = await t.addGroup({ id: unique('sub'), parent: site });
    const emptySub = await t.addGroup({ id: unique('emptysub'), parent: site });
    const beside = await t.addGroup({ id: unique('beside') });
    const inside = await t.addDevice({ parent: sub });
    const outside = await t.addDevice({ parent: beside });
    const user = await t.userWith([{ permission: 'device:read', resources: [`node:${site}`] }]);
    const body = await tree(user.token);
    expect(ids(body.tree)).toEqual(expect.arrayContaining(['root', site, sub, emptySub, inside]));
    expect(ids(body.tree)).not.toContain(beside);
    expect(ids(body.tree)).not.toContain(outside);
    expect(body.total_devices).toBe(1);
  });

  it('shows every group, empty ones included, to a caller holding *', async () => {
    const empty = await t.addGroup({ id: unique('allempty') });
    const user = await t.userWith([{ permission: 'device:read' }]);
    const body = await tree(user.token);
    expect(ids(body.tree)).toContain(empty);
    expect(ids(body.tree)).toContain('unassigned_group');
  });

  it('answers an empty root to a user who may read nothing in the tree', async () => {
    const user = await t.userWith([{ permission: 'device:read', resources: ['tag:nothing-has-this'] }]);
    const body = await tree(user.token);
    expect(body).toEqual({ total_devices: 0, tree: expect.objectContaining({ node_id: 'root', nodes: [] }) });
  });

  it('needs device:read and a token', async () => {
    expect((await t.api('GET', '/api/v2/grouptree')).status).toBe(401);
    const user = await t.userWith([{ permission: 'users:read' }]);
    const r = await t.api('GET', '/api/v2/grouptree', { token: user.token });
    expect(r.status).toBe(403);
    expect(r.body).toMatchObject({ code: 403, error: 'forbidden' });
  });

  it('lists a few thousand devices with per-device visibility in one answer', async () => {
    const big = await t.addGroup({ id: unique('bulk') });
    const db = t.broker.services.store.db;
    const now = new Date().toISOString();
    const count = 3000;
    const devices = Array.from({ length: count }, (_, i) => ({ id: crypto.createHash('sha256').update(`${big}-${i}`).digest('hex'), tagged: i % 3 === 0 }));
    for (let i = 0; i < count; i += 500) {
      const chunk = devices.slice(i, i + 500);
      await db
        .insertInto('devices')
        .values(chunk.map((d) => approvedDeviceRow(d.id, 'bulk', '{}', now)))
        .execute();
      await db
        .insertInto('nodes')
        .values(
          chunk.map((d) => ({
            node_id: d.id,
            parent_id: big,
            type: 'device',
            title: `bulk-${d.id.slice(0, 8)}`,
            tags: d.tagged ? '["bulk-third"]' : '[]',
            created_at: now,
          })),
        )
        .execute();
    }
    const all = await t.api('GET', `/api/v2/grouptree/${big}`, { token: t.adminToken });
    expect(all.status).toBe(200);
    expect(all.body.total_devices).toBe(count);
    expect(all.body.nodes).toHaveLength(count);
    const user = await t.userWith([{ permission: 'device:read', resources: ['tag:bulk-third'] }]);
    const some = await t.api('GET', `/api/v2/grouptree/${big}`, { token: user.token });
    expect(some.status).toBe(200);
    expect(some.body.total_devices).toBe(devices.filter((d) => d.tagged).length);
    expect(new Set(some.body.nodes.map((n: Node) => n.node_id))).toEqual(new Set(devices.filter((d) => d.tagged).map((d) => d.id)));
  });
});

describe('GET /grouptree?manage_hints=true', () => {
  type Hinted = Node & { can_manage?: boolean };
  const hinted = async (token: string) => {
    const r = await t.api('GET', '/api/v2/grouptree?manage_hints=true', { token });
    expect(r.status).toBe(200);
    return r.body as { total_devices: number; tree: Hinted; manageable_tags?: '*' | string[] };
  };

  it('says per node what a restricted manager may change, in agreement with what the calls allow', async () => {
    const mine = await t.addGroup({ id: unique('hint-mine') });
    const theirs = await t.addGroup({ id: unique('hint-theirs'), tags: ['shared'] });
    const myDevice = await t.addDevice({ parent: mine });
    const taggedDevice = await t.addDevice({ parent: theirs, tags: ['ops'] });
    const plainDevice = await t.addDevice({ parent: theirs });
    const user = await t.userWith([
      { permission: 'device:read', resources: [`node:${mine}`, 'tag:shared'] },
      { permission: 'device:manage', resources: [`node:${mine}`, 'tag:ops'] },
    ]);
    const answer = await hinted(user.token);
    const hint = (id: string) => (find(answer.tree, id) as Hinted | undefined)?.can_manage;
    expect(hint(mine)).toBe(true);
    expect(hint(myDevice)).toBe(true);
    expect(hint(taggedDevice)).toBe(true); // a tag: resource matches the device
    expect(hint(theirs)).toBe(false); // tags never grant group management
    expect(hint(plainDevice)).toBe(false);
    expect(hint('root')).toBe(false);
    expect(answer.manageable_tags).toEqual(['ops']);

    // What the hints say matches what the broker decides on the calls themselves.
    const rename = (id: string) => changeTree([{ action: 'rename', data: { node_id: id, title: unique('renamed') } }], user.token);
    for (const id of [mine, myDevice, taggedDevice, theirs, plainDevice, 'root']) {
      expect((await rename(id)).status === 200, id).toBe(hint(id));
    }
    expect((await t.api('PATCH', `/api/v2/grouptree/${myDevice}`, { token: user.token, body: { tags: ['ops'] } })).status).toBe(200);
    expect((await t.api('PATCH', `/api/v2/grouptree/${myDevice}`, { token: user.token, body: { tags: ['ops', 'other'] } })).status).toBe(403);

    // GET /node says the same for one node (the device page), to holders of device:manage only.
    const nodeHint = async (id: string, token = user.token) => (await t.api('GET', `/api/v2/node/${id}`, { token })).body.can_manage;
    expect(await nodeHint(myDevice)).toBe(true);
    expect(await nodeHint(plainDevice)).toBe(false);
    expect(await nodeHint(theirs)).toBe(false);
    const reader = await t.userWith([{ permission: 'device:read' }]);
    expect(await nodeHint(plainDevice, reader.token)).toBeUndefined();
  });

  it('marks every node manageable and any tag for a manager on *, and adds nothing without device:manage or without asking', async () => {
    const g = await t.addGroup({ id: unique('hint-all') });
    const admin = await hinted(t.adminToken);
    expect(find(admin.tree, g)?.['can_manage' as keyof Node]).toBe(true);
    expect(admin.tree).toMatchObject({ node_id: 'root', can_manage: true });
    expect(admin.manageable_tags).toBe('*');
    const reader = await t.userWith([{ permission: 'device:read' }]);
    const plain = await hinted(reader.token);
    expect(JSON.stringify(plain)).not.toContain('can_manage');
    expect(plain.manageable_tags).toBeUndefined();
    const unasked = await tree();
    expect(JSON.stringify(unasked)).not.toContain('can_manage');
    expect((await t.api('GET', '/api/v2/grouptree?manage_hints=yes', { token: t.adminToken })).status).toBe(400);
    // With skip_unassigned too.
    const skipped = (await t.api('GET', '/api/v2/grouptree?manage_hints=1&skip_unassigned=true', { token: t.adminToken })).body;
    expect(skipped.manageable_tags).toBe('*');
    expect(skipped.tree.can_manage).toBe(true);
  });
});

describe('GET /grouptree/{node_id}', () => {
  it('answers the subtree with its ancestors from root down to the node', async () => {
    const a = await t.addGroup({ id: unique('sa'), title: 'A' });
    const b = await t.addGroup({ id: unique('sb'), parent: a, title: 'B' });
    const d = await t.addDevice({ parent: b });
    const r = await t.api('GET', `/api/v2/grouptree/${b}?_format=json`, { token: t.adminToken });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ node_id: b, title: 'B', type: 'group', ancestors: ['root', a, b], total_devices: 1 });
    expect(r.body.nodes.map((n: Node) => n.node_id)).toEqual([d]);
    const dev = await t.api('GET', `/api/v2/grouptree/${d}`, { token: t.adminToken });
    expect(dev.body).toMatchObject({ node_id: d, type: 'device', ancestors: ['root', a, b, d], total_devices: 1 });
  });

  it('answers 404 for an unknown node and for a group the caller may not see, 400 for a malformed id, 403 for a device outside their resources', async () => {
    expect((await t.api('GET', '/api/v2/grouptree/no-such-group', { token: t.adminToken })).status).toBe(404);
    const bad = await t.api('GET', '/api/v2/grouptree/bad%20id', { token: t.adminToken });
    expect(bad.status).toBe(400);
    expect(bad.body.field).toBe('node_id');
    const secret = await t.addGroup({ id: unique('secret') });
    const secretDevice = await t.addDevice({ parent: secret });
    const user = await t.userWith([{ permission: 'device:read', resources: ['tag:visible-one'] }]);
    expect((await t.api('GET', `/api/v2/grouptree/${secret}`, { token: user.token })).status).toBe(404);
    expect((await t.api('GET', `/api/v2/grouptree/${secretDevice}`, { token: user.token })).status).toBe(403);
    const root = await t.api('GET', '/api/v2/grouptree/root', { token: user.token });
    expect(root.status).toBe(200);
    expect(root.body.total_devices).toBe(0);
  });
});

describe('GET /node/{node_id}', () => {
  it('answers a group with its path, ancestors and effective tags', async () => {
    const a = await t.addGroup({ id: unique('na'), tags: ['outer'], title: 'Outer' });
    const b = await t.addGroup({ id: unique('nb'), parent: a, tags: ['inner'], title: 'Inner' });
    const r = await t.api('GET', `/api/v2/node/${b}`, { token: t.adminToken });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ id: b, node_id: b, title: 'Inner', type: 'group', parent_id: a, tags: ['inner'], ancestors: ['root', a, b] });
    expect(r.body.effective_tags.sort()).toEqual(['inner', 'outer']);
    expect(r.body.path).toEqual([
      { node_id: 'root', title: 'All devices' },
      { node_id: a, title: 'Outer' },
      { node_id: b, title: 'Inner' },
    ]);
  });

  it('answers a device with status, last_reported and attributes', async () => {
    const g = await t.addGroup({ id: unique('nd'), tags: ['grp'] });
    const d = await t.addDevice({ parent: g, tags: ['dev'], name: 'node-view' });
    const r = await t.api('GET', `/api/v2/node/${d}`, { token: t.adminToken });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ node_id: d, type: 'device', title: 'node-view', parent_id: g, tags: ['dev'], status: 'offline', last_reported: null });
    expect(r.body.effective_tags.sort()).toEqual(['dev', 'grp']);
    expect(r.body.attributes.device_name).toBe('node-view');
  });

  it('answers 404 for an unknown node and a hidden group, 403 for a device outside the caller’s resources', async () => {
    expect((await t.api('GET', '/api/v2/node/unknown-node', { token: t.adminToken })).status).toBe(404);
    const g = await t.addGroup({ id: unique('nh') });
    const d = await t.addDevice({ parent: g });
    const user = await t.userWith([{ permission: 'device:read', resources: ['tag:some-other'] }]);
    expect((await t.api('GET', `/api/v2/node/${g}`, { token: user.token })).status).toBe(404);
    expect((await t.api('GET', `/api/v2/node/${d}`, { token: user.token })).status).toBe(403);
    const seer = await t.userWith([{ permission: 'device:read', resources: [`node:${g}`] }]);
    expect((await t.api('GET', `/api/v2/node/${g}`, { token: seer.token })).status).toBe(200);
    expect((await t.api('GET', `/api/v2/node/${d}`, { token: seer.token })).status).toBe(200);
  });
});

describe('PUT /grouptree', () => {
  it('creates, renames, moves and deletes groups in one call', async () => {
    const a = unique('pa');
    const b = unique('pb');
    const r = await changeTree([
      { action: 'create', data: { node_id: a, title: 'Group A', parent_id: 'root', tags: ['ta'] } },
      { action: 'create', data: { node_id: b, title: 'Group B', parent_id: 'root' } },
      { action: 'rename', data: { node_id: a, title: 'Group A2' } },
      { action: 'move', data: { node_id: b, parent_id: a } },
      { action: 'create', data: { title: 'Generated', parent_id: b } },
    ]);
    expect(r.status).toBe(200);
    expect(r.body.applied).toBe(5);
    const generated = r.body.results[4].node_id;
    expect(generated).toMatch(/^group-[0-9a-f]{12}$/);
    const node = await t.api('GET', `/api/v2/node/${generated}`, { token: t.adminToken });
    expect(node.body).toMatchObject({ title: 'Generated', ancestors: ['root', a, b, generated], effective_tags: ['ta'] });
    expect((await t.api('GET', `/api/v2/node/${a}`, { token: t.adminToken })).body.title).toBe('Group A2');
    const del = await changeTree([
      { action: 'delete', data: { node_id: generated } },
      { action: 'delete', data: { node_id: b } },
    ]);
    expect(del.status).toBe(200);
    expect((await t.api('GET', `/api/v2/node/${b}`, { token: t.adminToken })).status).toBe(404);
  });

  it('moves devices between groups and renames a device together with its device_name', async () => {
    const g = await t.addGroup({ id: unique('mv') });
    const d = await t.addDevice({ name: 'before' });
    const r = await changeTree([
      { action: 'move', data: { node_id: d, parent_id: g } },
      { action: 'rename', data: { node_id: d, title: 'after' } },
    ]);
    expect(r.status).toBe(200);
    const node = await t.api('GET', `/api/v2/node/${d}`, { token: t.adminToken });
    expect(node.body).toMatchObject({ parent_id: g, title: 'after' });
    expect((await t.api('GET', `/api/v2/deviceattribute/${d}`, { token: t.adminToken })).body.device_name).toBe('after');
  });

  it('accepts the fields qbee clients send along (position, type, oldParentId, empty title)', async () => {
    const id = unique('qbee');
    const created = await changeTree([
      { action: 'create', data: { parent_id: 'root', oldParentId: '', title: 'From terraform', node_id: id, position: 0, type: 'group' } },
    ]);
    expect(created.status).toBe(200);
    const moved = await changeTree([
      { action: 'move', data: { parent_id: 'unassigned_group', oldParentId: 'root', title: '', node_id: id, position: 0, type: '' } },
    ]);
    expect(moved.status).toBe(200);
    const renamed = await changeTree([
      { action: 'rename', data: { parent_id: 'unassigned_group', oldParentId: '', title: 'Renamed', node_id: id, position: 0, type: '' } },
    ]);
    expect(renamed.status).toBe(200);
    const deleted = await changeTree([
      { action: 'delete', data: { parent_id: 'unassigned_group', oldParentId: '', title: '', node_id: id, position: 0, type: 'group' } },
    ]);
    expect(deleted.status).toBe(200);
  });

  it('is all or nothing and names the failing change', async () => {
    const a = unique('atom');
    const r = await changeTree([
      { action: 'create', data: { node_id: a, title: 'kept?', parent_id: 'root' } },
      { action: 'create', data: { node_id: unique('atom2'), title: 'orphan', parent_id: 'no-such-parent' } },
    ]);
    expect(r.status).toBe(400);
    expect(r.body).toMatchObject({ code: 400, change: 1, field: 'changes.1.data.parent_id' });
    expect(r.body.message).toContain('Change 1');
    expect((await t.api('GET', `/api/v2/node/${a}`, { token: t.adminToken })).status).toBe(404);
  });

  it('says what a group that cannot be deleted holds: its devices and groups, counted', async () => {
    const g = await t.addGroup({ id: unique('full'), title: 'Full lab' });
    await t.addDevice({ parent: g });
    await t.addDevice({ parent: g });
    await t.addDevice({ parent: g });
    const sub = await t.addGroup({ id: unique('sub'), parent: g });
    await t.addDevice({ parent: sub });
    const r = await changeTree([{ action: 'delete', data: { node_id: g } }]);
    expect(r.status).toBe(409);
    expect(r.body).toEqual({
      code: 409,
      error: 'group_not_empty',
      message: 'Group "Full lab" holds 3 devices and 1 group: move or remove them before deleting it.',
      holds: { devices: 3, groups: 1 },
      change: 0,
      field: 'changes.0.data.node_id',
    });
    // Among several changes, the message says which one; nothing was applied.
    const two = await changeTree([
      { action: 'rename', data: { node_id: sub, title: 'renamed' } },
      { action: 'delete', data: { node_id: g } },
    ]);
    expect(two.status).toBe(409);
    expect(two.body.message).toBe(
      'Change 1 (delete): Group "Full lab" holds 3 devices and 1 group: move or remove them before deleting it. No change was applied.',
    );
    expect((await t.api('GET', `/api/v2/node/${sub}`, { token: t.adminToken })).body.title).not.toBe('renamed');
  });

  it('refuses duplicate ids (409), deleting a non-empty group (409) and device-form group ids (400)', async () => {
    const g = await t.addGroup({ id: unique('dup') });
    await t.addDevice({ parent: g });
    let r = await changeTree([{ action: 'create', data: { node_id: g, title: 'again', parent_id: 'root' } }]);
    expect(r.status).toBe(409);
    expect(r.body).toMatchObject({ error: 'node_exists', change: 0 });
    r = await changeTree([{ action: 'delete', data: { node_id: g } }]);
    expect(r.status).toBe(409);
    expect(r.body).toMatchObject({ error: 'group_not_empty', change: 0, holds: { devices: 1, groups: 0 } });
    // One change: the message is the refusal in plain words, naming what the group holds.
    expect(r.body.message).toBe(`Group "${g}" holds 1 device: move or remove them before deleting it.`);
    r = await changeTree([{ action: 'create', data: { node_id: 'a'.repeat(64), title: 'looks like a device', parent_id: 'root' } }]);
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('changes.0.data.node_id');
  });

  it('refuses cycles, moving or deleting system groups, deleting devices and moving into a device', async () => {
    const a = await t.addGroup({ id: unique('cy') });
    const b = await t.addGroup({ id: unique('cy'), parent: a });
    const d = await t.addDevice({ parent: b });
    const cases: Array<[unknown, string]> = [
      [{ action: 'move', data: { node_id: a, parent_id: b } }, 'tree_cycle'],
      [{ action: 'move', data: { node_id: a, parent_id: a } }, 'tree_cycle'],
      [{ action: 'move', data: { node_id: 'root', parent_id: a } }, 'system_node'],
      [{ action: 'move', data: { node_id: 'unassigned_group', parent_id: a } }, 'system_node'],
      [{ action: 'delete', data: { node_id: 'root' } }, 'system_node'],
      [{ action: 'delete', data: { node_id: 'unassigned_group' } }, 'system_node'],
      [{ action: 'delete', data: { node_id: d } }, 'not_a_group'],
      [{ action: 'move', data: { node_id: a, parent_id: d } }, 'not_a_group'],
      [{ action: 'rename', data: { node_id: 'nope-nope', title: 'x' } }, 'unknown_node'],
    ];
    for (const [change, error] of cases) {
      const r = await changeTree([change]);
      expect(r.status, JSON.stringify(change)).toBe(400);
      expect(r.body).toMatchObject({ error, change: 0 });
    }
    expect((await t.api('GET', `/api/v2/node/${a}`, { token: t.adminToken })).body.parent_id).toBe('root');
  });

  it('refuses malformed changes with 400 naming the field', async () => {
    const cases: Array<[unknown, string]> = [
      [{ changes: [] }, 'changes'],
      [{ changes: [{ action: 'explode', data: {} }] }, 'changes.0.action'],
      [{ changes: [{ action: 'create', data: { title: 'x' } }] }, 'changes.0.data.parent_id'],
      [{ changes: [{ action: 'create', data: { title: '', parent_id: 'root' } }] }, 'changes.0.data.title'],
      [{ changes: [{ action: 'create', data: { title: 'x', parent_id: 'root', colour: 'red' } }] }, 'changes.0.data'],
      [{ changes: [{ action: 'create', data: { title: 'x', parent_id: 'root', tags: ['bad tag'] } }] }, 'changes.0.data.tags.0'],
      [{ changes: [{ action: 'rename', data: { node_id: '../x', title: 'x' } }] }, 'changes.0.data.node_id'],
      [{ changes: [], extra: 1 }, ''],
    ];
    for (const [body, field] of cases) {
      const r = await t.api('PUT', '/api/v2/grouptree', { token: t.adminToken, body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      if (field) expect(r.body.field, JSON.stringify(body)).toBe(field);
    }
  });

  it('limits a restricted manager to groups under their node: resources', async () => {
    const mine = await t.addGroup({ id: unique('mine') });
    const theirs = await t.addGroup({ id: unique('theirs') });
    const myDevice = await t.addDevice({ parent: mine });
    const theirDevice = await t.addDevice({ parent: theirs });
    const user = await t.userWith([
      { permission: 'device:read', resources: [`node:${mine}`] },
      { permission: 'device:manage', resources: [`node:${mine}`] },
    ]);
    const sub = unique('mysub');
    let r = await changeTree(
      [
        { action: 'create', data: { node_id: sub, title: 'Sub', parent_id: mine } },
        { action: 'move', data: { node_id: myDevice, parent_id: sub } },
      ],
      user.token,
    );
    expect(r.status).toBe(200);
    // Nodes the user cannot see (theirs, theirDevice) answer as unknown ones; visible ones they may not manage, 403.
    const hidden = { code: 400, error: 'unknown_node', change: 1 };
    const refused = { code: 403, error: 'forbidden', change: 1 };
    const cases: [unknown, object | undefined][] = [
      [{ action: 'create', data: { title: 'x', parent_id: 'root' } }, refused],
      [{ action: 'create', data: { title: 'x', parent_id: theirs } }, hidden],
      [{ action: 'rename', data: { node_id: theirs, title: 'mine now' } }, hidden],
      [{ action: 'move', data: { node_id: theirDevice, parent_id: mine } }, hidden],
      [{ action: 'move', data: { node_id: myDevice, parent_id: theirs } }, hidden],
      [{ action: 'move', data: { node_id: sub, parent_id: 'root' } }, refused],
      [{ action: 'delete', data: { node_id: theirs } }, hidden],
      [{ action: 'rename', data: { node_id: mine, title: 'ok' } }, undefined],
      [{ action: 'create', data: { title: 'x', parent_id: mine, tags: ['escalate'] } }, refused],
    ];
    for (const [i, [change, expected]] of cases.entries()) {
      r = await changeTree([{ action: 'rename', data: { node_id: sub, title: `fine ${i}` } }, change], user.token);
      if (!expected) {
        expect(r.status, JSON.stringify(change)).toBe(200);
        continue;
      }
      expect(r.body, JSON.stringify(change)).toMatchObject(expected);
    }
    // None of the refused calls applied their first change either.
    expect((await t.api('GET', `/api/v2/node/${sub}`, { token: t.adminToken })).body.title).toBe('fine 7');
    expect((await t.api('GET', `/api/v2/node/${theirDevice}`, { token: t.adminToken })).body.parent_id).toBe(theirs);
  });

  it('does not let tags grant group management, but a tag manager may rename their devices', async () => {
    const g = await t.addGroup({ id: unique('tg'), tags: ['managed'] });
    const d = await t.addDevice({ parent: g });
    const user = await t.userWith([{ permission: 'device:manage', resources: ['tag:managed'] }]);
    expect((await changeTree([{ action: 'create', data: { title: 'x', parent_id: g } }], user.token)).status).toBe(403);
    expect((await changeTree([{ action: 'rename', data: { node_id: g, title: 'x' } }], user.token)).status).toBe(403);
    expect((await changeTree([{ action: 'rename', data: { node_id: d, title: 'renamed by tag manager' } }], user.token)).status).toBe(200);
  });

  it('needs device:manage', async () => {
    const reader = await t.userWith([{ permission: 'device:read' }]);
    expect((await changeTree([{ action: 'create', data: { title: 'x', parent_id: 'root' } }], reader.token)).status).toBe(403);
    expect((await t.api('PUT', '/api/v2/grouptree', { body: { changes: [] } })).status).toBe(401);
  });

  it('writes the change to the audit trail', async () => {
    const id = unique('audited');
    await changeTree([{ action: 'create', data: { node_id: id, title: 'Audited', parent_id: 'root' } }]);
    const log = await t.api('GET', '/api/v2/commitlist?event=device.tree.change', { token: t.adminToken });
    expect(log.body.items.some((e: any) => JSON.stringify(e.options).includes(id))).toBe(true);
  });
});

describe('PATCH /grouptree/{node_id} (tags)', () => {
  it('sets a node’s tags, which the devices below inherit', async () => {
    const g = await t.addGroup({ id: unique('tagme') });
    const d = await t.addDevice({ parent: g });
    const r = await t.api('PATCH', `/api/v2/grouptree/${g}`, { token: t.adminToken, body: { tags: ['green', 'green', 'site-1'] } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ node_id: g, tags: ['green', 'site-1'] });
    const reader = await t.userWith([{ permission: 'device:read', resources: ['tag:green'] }]);
    expect((await t.api('GET', `/api/v2/deviceattribute/${d}`, { token: reader.token })).status).toBe(200);
    const cleared = await t.api('PATCH', `/api/v2/grouptree/${g}`, { token: t.adminToken, body: { tags: [] } });
    expect(cleared.body.tags).toEqual([]);
    expect((await t.api('GET', `/api/v2/deviceattribute/${d}`, { token: reader.token })).status).toBe(403);
    const onDevice = await t.api('PATCH', `/api/v2/grouptree/${d}`, { token: t.adminToken, body: { tags: ['edge'] } });
    expect(onDevice.body).toMatchObject({ type: 'device', tags: ['edge'] });
  });

  it('validates tags: pattern and at most 50', async () => {
    const g = await t.addGroup({ id: unique('tagbad') });
    let r = await t.api('PATCH', `/api/v2/grouptree/${g}`, { token: t.adminToken, body: { tags: ['ok', 'not ok'] } });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('tags.1');
    r = await t.api('PATCH', `/api/v2/grouptree/${g}`, { token: t.adminToken, body: { tags: Array.from({ length: 51 }, (_, i) => `t${i}`) } });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('tags');
    r = await t.api('PATCH', `/api/v2/grouptree/${g}`, { token: t.adminToken, body: { tags: ['x'.repeat(65)] } });
    expect(r.status).toBe(400);
    r = await t.api('PATCH', `/api/v2/grouptree/${g}`, { token: t.adminToken, body: {} });
    expect(r.status).toBe(400);
    expect(r.body.field).toBe('tags');
    expect((await t.api('PATCH', '/api/v2/grouptree/unknown-group', { token: t.adminToken, body: { tags: [] } })).status).toBe(404);
  });

  it('limits a restricted manager to their nodes and to tags within their resources', async () => {
    const mine = await t.addGroup({ id: unique('tmine') });
    const theirs = await t.addGroup({ id: unique('ttheirs') });
    const myDevice = await t.addDevice({ parent: mine });
    const tagged = await t.addDevice({ tags: ['team-x'] });
    const user = await t.userWith([{ permission: 'device:manage', resources: [`node:${mine}`, 'tag:team-x'] }]);
    const set = (node: string, tags: string[]) => t.api('PATCH', `/api/v2/grouptree/${node}`, { token: user.token, body: { tags } });
    expect((await set(mine, ['team-x'])).status).toBe(200);
    expect((await set(myDevice, ['team-x'])).status).toBe(200);
    expect((await set(tagged, [])).status).toBe(200);
    // A group they cannot see answers as an unknown one.
    expect((await set(theirs, ['team-x'])).status).toBe(404);
    // A tag outside their resources could widen other permissions keyed on it.
    const escalate = await set(mine, ['team-x', 'prod']);
    expect(escalate.status).toBe(403);
    expect(escalate.body).toMatchObject({ tag: 'prod', field: 'tags' });
    const other = await t.addDevice({ tags: ['prod'] });
    expect((await set(other, [])).status).toBe(403);
  });
});

describe('hidden groups', () => {
  it('answer exactly as unknown ones, so a restricted user learns no group ids or names', async () => {
    const hiddenGroup = await t.addGroup({ id: unique('hidden-secret'), title: 'Secret project' });
    const unknownGroup = unique('never-made');
    const own = await t.addGroup({ id: unique('own') });
    await t.addDevice({ parent: own });
    const user = await t.userWith([
      { permission: 'device:read', resources: [`node:${own}`] },
      { permission: 'device:manage', resources: [`node:${own}`] },
    ]);
    const same = (a: { status: number; body: any }, b: { status: number; body: any }, id: string, label: string) => {
      expect(a.status, label).toBe(b.status);
      expect(JSON.stringify(a.body).replaceAll(id, '<id>'), label).toBe(JSON.stringify(b.body).replaceAll(unknownGroup, '<id>'));
      expect(JSON.stringify(a.body), label).not.toContain('Secret project');
    };
    const calls: [string, (id: string) => Promise<{ status: number; body: any }>][] = [
      ['GET /grouptree/{id}', (id) => t.api('GET', `/api/v2/grouptree/${id}`, { token: user.token })],
      ['GET /node/{id}', (id) => t.api('GET', `/api/v2/node/${id}`, { token: user.token })],
      ['PATCH /grouptree/{id}', (id) => t.api('PATCH', `/api/v2/grouptree/${id}`, { token: user.token, body: { tags: [] } })],
      ['rename', (id) => changeTree([{ action: 'rename', data: { node_id: id, title: 'x' } }], user.token)],
      ['delete', (id) => changeTree([{ action: 'delete', data: { node_id: id } }], user.token)],
      ['move into', (id) => changeTree([{ action: 'move', data: { node_id: own, parent_id: id } }], user.token)],
      ['move', (id) => changeTree([{ action: 'move', data: { node_id: id, parent_id: own } }], user.token)],
      ['create in', (id) => changeTree([{ action: 'create', data: { title: 'x', parent_id: id } }], user.token)],
    ];
    for (const [label, call] of calls) {
      const hidden = await call(hiddenGroup);
      expect(hidden.status, label).toBeGreaterThanOrEqual(400);
      expect(hidden.status, label).not.toBe(403);
      same(hidden, await call(unknownGroup), hiddenGroup, label);
    }
  });
});

describe('GET /tagslist', () => {
  it('counts the nodes carrying each tag, over the nodes the caller may see', async () => {
    const g = await t.addGroup({ id: unique('tl'), tags: ['tl-group', 'tl-shared'] });
    await t.addDevice({ parent: g, tags: ['tl-shared'] });
    await t.addDevice({ parent: g, tags: ['tl-shared', 'tl-dev'] });
    await t.addDevice({ tags: ['tl-hidden', 'tl-shared'] });
    const all = await t.api('GET', '/api/v2/tagslist?search=tl-&items_per_page=1000', { token: t.adminToken });
    expect(all.status).toBe(200);
    const counts = Object.fromEntries(all.body.items.map((i: any) => [i.tag, i.count]));
    expect(counts).toEqual({ 'tl-dev': 1, 'tl-group': 1, 'tl-hidden': 1, 'tl-shared': 4 });
    expect(all.body.total).toBe(4);
    const user = await t.userWith([{ permission: 'device:read', resources: ['tag:tl-group'] }]);
    const mine = await t.api('GET', '/api/v2/tagslist?search=tl-', { token: user.token });
    expect(Object.fromEntries(mine.body.items.map((i: any) => [i.tag, i.count]))).toEqual({ 'tl-dev': 1, 'tl-group': 1, 'tl-shared': 3 });
  });

  it('pages with offset and items_per_page and refuses bad paging', async () => {
    const page = await t.api('GET', '/api/v2/tagslist?search=tl-&offset=1&items_per_page=2', { token: t.adminToken });
    expect(page.body.items.map((i: any) => i.tag)).toEqual(['tl-group', 'tl-hidden']);
    expect(page.body.total).toBe(4);
    const bad = await t.api('GET', '/api/v2/tagslist?items_per_page=5000', { token: t.adminToken });
    expect(bad.status).toBe(400);
    expect(bad.body.field).toBe('items_per_page');
  });
});

describe('the service seams other domains use', () => {
  it('places, finds, lists and removes a device', async () => {
    const devices = t.broker.services.devices;
    const db = t.broker.services.store.db;
    const g = await t.addGroup({ id: unique('svc'), tags: ['svc'] });
    const id = crypto.createHash('sha256').update(crypto.randomBytes(8)).digest('hex');
    const now = new Date().toISOString();
    await db
      .insertInto('devices')
      .values(approvedDeviceRow(id, 'svc-host', '{}', now))
      .execute();
    await db.insertInto('inventory').values({ device_id: id, data: '{}', updated_at: now }).execute();
    await db.insertInto('device_config').values({ device_id: id, commit_sha: 'c1', digest: 'd1', device_commit_sha: 'c1', applied_at: now }).execute();
    expect((await devices.getDevice(id))?.node).toBeNull();
    expect(await devices.placeDevice(id, g, 'svc-host')).toBe(g);
    expect(await devices.getDevice(id)).toMatchObject({ device_id: id, hostname: 'svc-host', node: { parent_id: g, title: 'svc-host' } });
    // A missing group places the device among the unassigned.
    expect(await devices.placeDevice(id, 'deleted-group', 'svc-host')).toBe('unassigned_group');
    await devices.placeDevice(id, g, 'svc-host');

    const principal = await t.broker.services.auth.authenticate((await t.userWith([{ permission: 'device:read', resources: ['tag:svc'] }])).token);
    const visible = await devices.listVisibleDevices(principal, 'device:read');
    expect(visible.map((v) => v.deviceId)).toEqual([id]);
    expect(visible[0]).toMatchObject({ title: 'svc-host', tags: ['svc'] });
    expect(visible[0].nodeIds).toEqual([id, g, 'root']);

    expect(await devices.removeDevice(id)).toBe(true);
    expect(await devices.getDevice(id)).toBeUndefined();
    expect(await db.selectFrom('nodes').select('node_id').where('node_id', '=', id).executeTakeFirst()).toBeUndefined();
    expect(await db.selectFrom('inventory').select('device_id').where('device_id', '=', id).executeTakeFirst()).toBeUndefined();
    // Its configuration state goes with it, in the same transaction (a device enrolled later under the id starts without one).
    expect(await db.selectFrom('device_config').select('device_id').where('device_id', '=', id).executeTakeFirst()).toBeUndefined();
    expect(await devices.removeDevice(id)).toBe(false);
  });
});

describe('the kept tree shape', () => {
  // Listings keep the tree's shape between calls: every change must still show on the very next one.
  it('shows a change made through the API, or a row written around it, on the very next listing', async () => {
    const from = await t.addGroup({ id: unique('keep-from') });
    const to = await t.addGroup({ id: unique('keep-to') });
    const d = await t.addDevice({ parent: from });
    const reader = await t.userWith([{ permission: 'device:read', resources: [`tag:${to}`] }]);
    const list = async (token: string) => (await t.api('GET', '/api/v2/grouptree', { token })).body.tree as Node;
    expect(find(await list(t.adminToken), from)?.nodes.map((n) => n.node_id)).toEqual([d]);
    expect(find(await list(reader.token), d)).toBeUndefined();

    expect((await changeTree([{ action: 'move', data: { node_id: d, parent_id: to } }])).status).toBe(200);
    expect(find(await list(t.adminToken), to)?.nodes.map((n) => n.node_id)).toEqual([d]);
    expect((await t.api('PATCH', `/api/v2/grouptree/${to}`, { token: t.adminToken, body: { tags: [to] } })).status).toBe(200);
    expect(find(await list(reader.token), d)).toBeDefined();

    const added = await t.addDevice({ parent: to }); // written to the store directly, not through the API
    expect(
      find(await list(t.adminToken), to)
        ?.nodes.map((n) => n.node_id)
        .sort(),
    ).toEqual([d, added].sort());
  });
});
