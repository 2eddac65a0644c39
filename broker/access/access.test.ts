import { describe, expect, it } from 'vitest';
import { compilePolicies, type DeviceScope, type Policy } from '../../shared/resources.js';
import { DomainError } from '../errors.js';
import { AccessService, refusalOf } from './access.js';
import { Principal } from './principal.js';

const lab: DeviceScope = { deviceId: 'd1', nodeIds: ['d1', 'lab', 'root'], tags: ['lab-tag'] };
/** A fake scope source: the one device `d1`, everything else unknown. */
const access = new AccessService({
  scopeOf: async (id) => (id === lab.deviceId ? lab : undefined),
  scopeOfNode: async (id) => (id === 'lab' ? { deviceId: '', nodeIds: ['lab', 'root'], tags: [] } : undefined),
});

function principal(policies: Policy[]): Principal {
  return new Principal({ id: 'u1', email: 'u@example.com', fname: 'U', lname: 'One' }, 's1', compilePolicies(policies));
}

const CONNECT = 'remote-access:connect';

describe('AccessService.decide codes', () => {
  it('says why, as a code', async () => {
    expect((await access.decide(principal([]), 'device:read', 'd1')).code).toBe('no_permission');
    expect((await access.decide(principal([{ permission: 'device:read' }]), 'device:read', 'unknown')).code).toBe('no_such_device');
    expect((await access.decide(principal([{ permission: 'device:read', resources: ['tag:other'] }]), 'device:read', 'd1')).code).toBe('outside_resources');
    const consoleOnly = principal([{ permission: CONNECT, resources: ['*/console'] }]);
    expect((await access.decide(consoleOnly, CONNECT, 'd1', { action: 'reload' })).code).toBe('action_not_granted');
    const port22 = principal([{ permission: CONNECT, resources: ['*/tunnel(port=22)'] }]);
    expect((await access.decide(port22, CONNECT, 'd1', { action: 'tunnel', proto: 'tcp', port: 80, dst: 'localhost' })).code).toBe('option_not_granted');
    expect(await access.decide(port22, CONNECT, 'd1', { action: 'tunnel', proto: 'tcp', port: 22, dst: 'localhost' })).toMatchObject({
      allowed: true,
      code: 'allowed',
    });
  });

  it('require answers 404 for an unknown device once the permission is held, 403 otherwise', async () => {
    await expect(access.require(principal([{ permission: 'device:read' }]), 'device:read', 'unknown')).rejects.toMatchObject({ kind: 'not_found' });
    await expect(access.require(principal([]), 'device:read', 'unknown')).rejects.toMatchObject({ kind: 'forbidden' });
    await expect(access.require(principal([{ permission: 'device:read', resources: ['tag:other'] }]), 'device:read', 'd1')).rejects.toMatchObject({
      kind: 'forbidden',
      code: 'forbidden',
    });
  });
});

describe('refusalOf compares codes, not sentences', () => {
  it('a decision with another sentence but code no_such_device is still a 404', () => {
    const err = refusalOf({ allowed: false, code: 'no_such_device', reason: 'this device has left the building' }, 'device:read', 'd9');
    expect(err).toBeInstanceOf(DomainError);
    expect(err.kind).toBe('not_found');
  });

  it('the old sentence without the code is not taken for an unknown device', () => {
    const err = refusalOf({ allowed: false, code: 'outside_resources', reason: 'no such device' }, 'device:read', 'd9');
    expect(err.kind).toBe('forbidden');
    expect(err.message).toBe('Not allowed: no such device.');
  });
});

describe('device tree management decisions', () => {
  const group: DeviceScope = { deviceId: 'lab', nodeIds: ['lab', 'root'], tags: ['lab-tag'] };

  it('a group is managed through * or a node: resource at or above it, never through its tags', () => {
    expect(access.mayManageGroup(principal([{ permission: 'device:manage' }]), group)).toBe(true);
    expect(access.mayManageGroup(principal([{ permission: 'device:manage', resources: ['node:root'] }]), group)).toBe(true);
    expect(access.mayManageGroup(principal([{ permission: 'device:manage', resources: ['node:lab'] }]), group)).toBe(true);
    expect(access.mayManageGroup(principal([{ permission: 'device:manage', resources: ['tag:lab-tag'] }]), group)).toBe(false);
    expect(access.mayManageGroup(principal([{ permission: 'device:manage', resources: ['node:elsewhere'] }]), group)).toBe(false);
    expect(access.mayManageGroup(principal([{ permission: 'device:read' }]), group)).toBe(false);
  });

  it('a tag is added or removed only by who manages devices carrying it', () => {
    expect(access.mayManageTag(principal([{ permission: 'device:manage' }]), 'any')).toBe(true);
    expect(access.mayManageTag(principal([{ permission: 'device:manage', resources: ['tag:lab-tag'] }]), 'lab-tag')).toBe(true);
    expect(access.mayManageTag(principal([{ permission: 'device:manage', resources: ['tag:lab-tag'] }]), 'prod')).toBe(false);
    // A node: resource reaches devices by place, not by tag: it does not cover a tag anywhere.
    expect(access.mayManageTag(principal([{ permission: 'device:manage', resources: ['node:root'] }]), 'prod')).toBe(false);
  });

  it('the tree hints answer as the decisions above: groups by place only, devices by any resource, tags by tag: resources', () => {
    const device: DeviceScope = { deviceId: 'd1', nodeIds: ['d1', 'lab', 'root'], tags: ['lab-tag'] };
    const byTag = principal([{ permission: 'device:manage', resources: ['tag:lab-tag', 'tag:other'] }]);
    const manage = access.treeManager(byTag);
    expect(manage?.(group, 'group')).toBe(false);
    expect(manage?.(device, 'device')).toBe(true);
    expect(access.manageableTags(byTag)).toEqual(['lab-tag', 'other']);
    const byPlace = principal([{ permission: 'device:manage', resources: ['node:lab'] }]);
    expect(access.treeManager(byPlace)?.(group, 'group')).toBe(true);
    expect(access.treeManager(byPlace)?.({ deviceId: 'root', nodeIds: ['root'], tags: [] }, 'group')).toBe(false);
    expect(access.manageableTags(byPlace)).toEqual([]);
    expect(access.manageableTags(principal([{ permission: 'device:manage' }]))).toBe('*');
    expect(access.treeManager(principal([{ permission: 'device:read' }]))).toBeUndefined();
  });
});

describe('remote actions offered on a device', () => {
  it('lists the actions some matching resource grants, whatever their options', async () => {
    const p = principal([{ permission: CONNECT, resources: ['tag:lab-tag/console', '*/tunnel(port=22)', 'tag:other/copy'] }]);
    expect([...(await access.remoteActions(p, 'd1'))].sort()).toEqual(['console', 'tunnel']);
  });

  it('a resource without an action offers every action; an unknown device offers none', async () => {
    const p = principal([{ permission: CONNECT, resources: ['node:lab'] }]);
    expect([...(await access.remoteActions(p, 'd1'))].sort()).toEqual(['console', 'copy', 'reload', 'tunnel']);
    expect((await access.remoteActions(p, 'unknown')).size).toBe(0);
    expect((await access.remoteActions(principal([{ permission: 'device:read' }]), 'd1')).size).toBe(0);
  });
  it('offers the console users a grant names, or none to choose from when some grant names none', async () => {
    const named = principal([
      { permission: CONNECT, resources: ['*/console(user=operator)', 'tag:lab-tag/console(user=deploy,operator)', 'tag:other/console(user=x)'] },
    ]);
    expect(await access.consoleUsers(named, 'd1')).toEqual(['operator', 'deploy']);
    const open = principal([{ permission: CONNECT, resources: ['*/console(user=operator)', 'tag:lab-tag/console'] }]);
    expect(await access.consoleUsers(open, 'd1')).toBeUndefined();
    expect(await access.consoleUsers(principal([{ permission: CONNECT, resources: ['node:lab', '*/console(user=operator)'] }]), 'd1')).toBeUndefined();
    // Other actions' grants say nothing about console users.
    expect(await access.consoleUsers(principal([{ permission: CONNECT, resources: ['*/tunnel', '*/console(user=op)'] }]), 'd1')).toEqual(['op']);
  });
});

describe('port presets and inventory reach', () => {
  it('presets of a device: to who may connect to it or read it; 404 for an unknown device, 403 otherwise', async () => {
    expect(await access.requirePresetReader(principal([{ permission: CONNECT, resources: ['tag:lab-tag/console'] }]), 'd1')).toEqual(lab);
    expect(await access.requirePresetReader(principal([{ permission: 'device:read', resources: ['node:lab'] }]), 'd1')).toEqual(lab);
    await expect(access.requirePresetReader(principal([{ permission: 'device:read' }]), 'unknown')).rejects.toMatchObject({ kind: 'not_found' });
    await expect(access.requirePresetReader(principal([{ permission: 'device:read', resources: ['tag:other'] }]), 'd1')).rejects.toMatchObject({
      kind: 'forbidden',
      details: { permission: 'remote-access:connect' },
    });
    await expect(access.requirePresetReader(principal([{ permission: 'remote-access:manage' }]), 'd1')).rejects.toMatchObject({ kind: 'forbidden' });
  });

  it('presets for every device: to holders of remote-access:connect, device:read or remote-access:manage', async () => {
    for (const permission of [CONNECT, 'device:read', 'remote-access:manage']) {
      expect(await access.mayReadPreset(principal([{ permission, ...(permission === 'remote-access:manage' ? {} : { resources: ['tag:x'] }) }]), '*')).toBe(
        true,
      );
    }
    expect(await access.mayReadPreset(principal([{ permission: 'users:read' }]), '*')).toBe(false);
  });

  it('presets for a group or tag: only where a reading grant covers the target', async () => {
    const tagged = principal([{ permission: 'device:read', resources: ['tag:x'] }]);
    expect(await access.mayReadPreset(tagged, 'tag:x')).toBe(true);
    expect(await access.mayReadPreset(tagged, 'tag:y')).toBe(false);
    expect(await access.mayReadPreset(tagged, 'node:lab')).toBe(false);
    expect(await access.mayReadPreset(principal([{ permission: CONNECT, resources: ['node:lab'] }]), 'node:lab')).toBe(true);
  });

  it('inventory is limited by device:read, and reaches no device without it (never every device)', () => {
    expect(access.inventoryScope(principal([{ permission: 'inventory:read' }, { permission: 'device:read', resources: ['tag:x'] }]))).toBe('device:read');
    expect(access.inventoryScope(principal([{ permission: 'inventory:read' }]))).toBe('device:read');
  });
});

const scopes: DeviceScope[] = [
  { deviceId: 'd1', nodeIds: ['d1', 'rack', 'root'], tags: ['east', 'hot'] },
  { deviceId: 'd2', nodeIds: ['d2', 'lab', 'root'], tags: [] },
  { deviceId: 'd3', nodeIds: ['d3', 'unassigned_group', 'root'], tags: ['hot'] },
];

describe('AccessService.seer (the group tree’s predicate)', () => {
  it.each<[string, Policy[]]>([
    ['nothing', []],
    ['another permission only', [{ permission: 'device:manage', resources: ['*'] }]],
    ['everything', [{ permission: 'device:read', resources: ['*'] }]],
    ['one tag', [{ permission: 'device:read', resources: ['tag:hot'] }]],
    ['a group', [{ permission: 'device:read', resources: ['node:lab'] }]],
    [
      'a device and a tag over two policies',
      [
        { permission: 'device:read', resources: ['node:d1'] },
        { permission: 'device:read', resources: ['tag:none'] },
      ],
    ],
  ])('answers as canSee does for %s', (_what, policies) => {
    const p = principal(policies);
    const see = access.seer(p, 'device:read');
    for (const scope of scopes) expect(see(scope)).toBe(access.canSee(p, 'device:read', scope));
  });
});

describe('configuration decisions (mayConfigure)', () => {
  const read = { permission: 'configuration:read' as const };
  it('the configuration permissions reach the nodes and tags their own resources cover', async () => {
    const restricted = principal([{ ...read, resources: ['node:lab'] }]);
    expect(await access.mayConfigure(restricted, 'configuration:read', { type: 'node', id: 'lab' })).toBe(true);
    expect(await access.mayConfigure(restricted, 'configuration:read', { type: 'node', id: 'root' })).toBe(false);
    expect(await access.mayConfigure(restricted, 'configuration:read', { type: 'tag', id: 'lab-tag' })).toBe(false);
    const tagged = principal([{ ...read, resources: ['tag:lab-tag'] }]);
    expect(await access.mayConfigure(tagged, 'configuration:read', { type: 'tag', id: 'lab-tag' })).toBe(true);
    expect(await access.mayConfigure(tagged, 'configuration:read', { type: 'tag', id: 'other' })).toBe(false);
    expect(await access.mayConfigure(tagged, 'configuration:read', { type: 'node', id: 'root' })).toBe(false);
  });

  it('device:read neither limits nor widens them: dropping it reaches nothing more', async () => {
    const lab = { permission: 'configuration:manage', resources: ['tag:lab-tag'] };
    const withRead = principal([lab, { permission: 'device:read', resources: ['tag:lab-tag'] }]);
    const dropped = principal([lab]);
    for (const p of [withRead, dropped]) {
      expect(await access.mayConfigure(p, 'configuration:manage', { type: 'node', id: 'root' })).toBe(false);
      expect(await access.mayConfigure(p, 'configuration:manage', { type: 'tag', id: 'lab-tag' })).toBe(true);
    }
    // no resources: `*`, every entity, whatever device:read says
    expect(
      await access.mayConfigure(principal([read, { permission: 'device:read', resources: ['node:lab'] }]), 'configuration:read', { type: 'node', id: 'root' }),
    ).toBe(true);
    expect(await access.mayConfigure(principal([read]), 'configuration:manage', { type: 'node', id: 'root' })).toBe(false);
    await expect(access.requireConfigEntity(principal([read]), 'configuration:manage', { type: 'tag', id: 'x' })).rejects.toMatchObject({ kind: 'forbidden' });
  });
});

describe('taking a permission away never widens another (property)', () => {
  // A small tree: root > lab > d1, root > rack > d2 (tag hot), root > d3 (tag lab-tag).
  const tree: Record<string, DeviceScope> = {
    root: { deviceId: '', nodeIds: ['root'], tags: [] },
    lab: { deviceId: '', nodeIds: ['lab', 'root'], tags: [] },
    rack: { deviceId: '', nodeIds: ['rack', 'root'], tags: ['hot'] },
    d1: { deviceId: 'd1', nodeIds: ['d1', 'lab', 'root'], tags: [] },
    d2: { deviceId: 'd2', nodeIds: ['d2', 'rack', 'root'], tags: ['hot'] },
    d3: { deviceId: 'd3', nodeIds: ['d3', 'root'], tags: ['lab-tag'] },
  };
  const devices = ['d1', 'd2', 'd3'].map((id) => tree[id]);
  const svc = new AccessService({ scopeOf: async (id) => (tree[id]?.deviceId ? tree[id] : undefined), scopeOfNode: async (id) => tree[id] });
  const targets = [
    ...Object.keys(tree).map((id) => ({ type: 'node' as const, id })),
    ...['hot', 'lab-tag', 'other'].map((id) => ({ type: 'tag' as const, id })),
  ];
  const pool: Policy[] = [
    { permission: 'device:read', resources: ['tag:lab-tag'] },
    { permission: 'device:read', resources: ['node:rack'] },
    { permission: 'device:read' },
    { permission: 'configuration:manage', resources: ['tag:lab-tag'] },
    { permission: 'configuration:read', resources: ['node:lab'] },
    { permission: 'configuration:read' },
    { permission: 'inventory:read' },
    { permission: 'metrics:read' },
    { permission: 'analysis:read' },
    { permission: 'cve:read' },
  ];

  /** Everything each permission reaches, as the services ask it. */
  async function reach(p: Principal): Promise<Set<string>> {
    const out = new Set<string>();
    const sees = (permission: Parameters<AccessService['seer']>[1]) => svc.seer(p, permission);
    for (const permission of ['configuration:read', 'configuration:manage'] as const)
      for (const t of targets) if (await svc.mayConfigure(p, permission, t)) out.add(`${permission} ${t.type}:${t.id}`);
    for (const d of devices) {
      if (p.has('device:read') && sees('device:read')(d)) out.add(`device:read ${d.deviceId}`);
      if (p.has('inventory:read') && sees(svc.inventoryScope(p))(d)) out.add(`inventory:read ${d.deviceId}`);
      for (const m of ['metrics:read', 'analysis:read'] as const) if (p.has(m) && sees(svc.fleetScope(p, m))(d)) out.add(`${m} ${d.deviceId}`);
      const cve = svc.cveScope(p);
      if (p.has('cve:read') && (cve === undefined || sees(cve)(d))) out.add(`cve:read ${d.deviceId}`);
    }
    return out;
  }

  it('for every combination of policies, removing any one reaches nothing new', async () => {
    let checked = 0;
    for (let mask = 0; mask < 1 << pool.length; mask++) {
      const held = pool.filter((_, i) => mask & (1 << i));
      const before = await reach(principal(held));
      for (let i = 0; i < held.length; i++) {
        const after = await reach(principal(held.filter((_, j) => j !== i)));
        const widened = [...after].filter((r) => !before.has(r));
        if (widened.length > 0) expect({ held, removed: held[i], widened }).toEqual({ held, removed: held[i], widened: [] });
        checked += 1;
      }
    }
    expect(checked).toBe(pool.length << (pool.length - 1));
  });
});

describe('AccessService.mayWatchRemoteSession', () => {
  const session = { userId: 'owner', deviceId: 'd1', request: { action: 'console' as const, user: 'root' } };
  it('needs what opening that console needs and remote-access:manage on its device', async () => {
    const supervisor = principal([{ permission: CONNECT }, { permission: 'remote-access:manage', resources: ['tag:lab-tag'] }]);
    expect((await access.mayWatchRemoteSession(supervisor, session)).allowed).toBe(true);
    // Connecting alone does not show another user's console.
    const connector = principal([{ permission: CONNECT }]);
    expect(await access.mayWatchRemoteSession(connector, session)).toMatchObject({ allowed: false, code: 'no_permission' });
    // Managing without being allowed that console (here: as root) does not either.
    const manager = principal([{ permission: CONNECT, resources: ['*/console(user=pi)'] }, { permission: 'remote-access:manage' }]);
    expect((await access.mayWatchRemoteSession(manager, session)).allowed).toBe(false);
    // Managing another part of the fleet does not either.
    const elsewhere = principal([{ permission: CONNECT }, { permission: 'remote-access:manage', resources: ['tag:other'] }]);
    expect((await access.mayWatchRemoteSession(elsewhere, session)).allowed).toBe(false);
  });

  it('lets the owner watch their own console with what opening it needs', async () => {
    const owner = principal([{ permission: CONNECT }]);
    expect((await access.mayWatchRemoteSession(owner, { ...session, userId: 'u1' })).allowed).toBe(true);
  });
});
