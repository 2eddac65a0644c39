import { describe, expect, it } from 'vitest';
import type { GroupTreeNode } from '../../shared/api-types.js';
import { compilePolicies, evaluate, type Policy } from '../../shared/resources.js';
import { TreeSnapshot, type NodeRow } from './tree.js';

function row(node_id: string, parent_id: string | null, type: 'group' | 'device', tags: string[] = [], title = node_id): NodeRow {
  return {
    node_id,
    parent_id,
    type,
    title,
    tags: JSON.stringify(tags),
    attributes: type === 'device' ? JSON.stringify({ device_name: title }) : null,
    last_seen: null,
  };
}

// root ─┬─ unassigned_group ── d0
//       ├─ site (tag east) ─┬─ rack ── d1 (tag hot)
//       │                   └─ spare (empty)
//       └─ lab ── d2
const rows: NodeRow[] = [
  row('root', null, 'group'),
  row('unassigned_group', 'root', 'group'),
  row('site', 'root', 'group', ['east']),
  row('rack', 'site', 'group'),
  row('spare', 'site', 'group'),
  row('lab', 'root', 'group'),
  row('d0', 'unassigned_group', 'device'),
  row('d1', 'rack', 'device', ['hot'], 'Device one'),
  row('d2', 'lab', 'device'),
  row('orphan', 'missing-parent', 'device'),
];

function snapshotFor(policies: Policy[]) {
  const compiled = compilePolicies(policies);
  return TreeSnapshot.build(rows, (scope) => evaluate(compiled, 'device:read', scope).allowed);
}

function ids(node: GroupTreeNode): string[] {
  return [node.node_id, ...node.nodes.flatMap(ids)];
}

describe('TreeSnapshot', () => {
  it('shows everything reachable from root to a holder of *, and leaves out orphans', () => {
    const snap = snapshotFor([{ permission: 'device:read' }]);
    const out = snap.render('root', () => false)!;
    expect(ids(out.tree).sort()).toEqual(['d0', 'd1', 'd2', 'lab', 'rack', 'root', 'site', 'spare', 'unassigned_group']);
    expect(out.totalDevices).toBe(3);
    expect(snap.has('orphan')).toBe(false);
  });

  it('lists groups before devices, then by title', () => {
    const snap = snapshotFor([{ permission: 'device:read' }]);
    expect(snap.render('root', () => false)!.tree.nodes.map((n) => n.node_id)).toEqual(['lab', 'site', 'unassigned_group']);
  });

  it('matches devices by inherited tags and shows the groups on the way', () => {
    const snap = snapshotFor([{ permission: 'device:read', resources: ['tag:hot'] }]);
    const out = snap.render('root', () => false)!;
    expect(ids(out.tree)).toEqual(['root', 'site', 'rack', 'd1']);
    expect(snap.isShown('spare')).toBe(false);
    expect(snap.isShown('lab')).toBe(false);
  });

  it('shows a group matched by a tag, with its empty subgroups', () => {
    const snap = snapshotFor([{ permission: 'device:read', resources: ['tag:east'] }]);
    expect(ids(snap.render('root', () => false)!.tree).sort()).toEqual(['d1', 'rack', 'root', 'site', 'spare']);
  });

  it('node: covers the group and everything below; a device by its own id', () => {
    const snap = snapshotFor([{ permission: 'device:read', resources: ['node:rack', 'node:d2'] }]);
    expect(ids(snap.render('root', () => false)!.tree).sort()).toEqual(['d1', 'd2', 'lab', 'rack', 'root', 'site']);
  });

  it('renders nothing to a caller who may see nothing', () => {
    const snap = snapshotFor([{ permission: 'device:read', resources: ['tag:none'] }]);
    expect(snap.render('root', () => false)).toBeUndefined();
    expect(snap.visibleDevices()).toEqual([]);
  });

  it('gives devices their scope, status, attributes and ancestors', () => {
    const snap = snapshotFor([{ permission: 'device:read' }]);
    expect(snap.visibleDevices().find((d) => d.deviceId === 'd1')).toEqual({
      deviceId: 'd1',
      nodeIds: ['d1', 'rack', 'site', 'root'],
      tags: ['east', 'hot'],
      title: 'Device one',
    });
    expect(snap.ancestors('d1')).toEqual(['root', 'site', 'rack', 'd1']);
    const d1 = snap.render('rack', (id) => id === 'd1')!.tree.nodes[0];
    expect(d1).toMatchObject({ node_id: 'd1', type: 'device', status: 'online', tags: ['hot'], attributes: { device_name: 'Device one', city: '' } });
  });

  it('counts tags over the nodes the caller’s resources match, not groups shown only on the way', () => {
    expect(Object.fromEntries(snapshotFor([{ permission: 'device:read', resources: ['node:rack'] }]).tagCounts())).toEqual({ hot: 1 });
    expect(Object.fromEntries(snapshotFor([{ permission: 'device:read' }]).tagCounts())).toEqual({ east: 1, hot: 1 });
  });

  it('survives a cycle in stored rows', () => {
    const cyclic = [...rows, row('a', 'b', 'group'), row('b', 'a', 'group')];
    const snap = TreeSnapshot.build(cyclic, () => true);
    expect(snap.has('a')).toBe(false);
    expect(snap.render('root', () => false)!.totalDevices).toBe(3);
  });
});

describe('TreeSnapshot with many devices in one group', () => {
  // Devices of one group are checked with one re-filled scope: nothing of one may leak to the next.
  const crowd: NodeRow[] = [
    row('root', null, 'group'),
    row('g', 'root', 'group', ['east']),
    row('a', 'g', 'device', ['hot']),
    row('b', 'g', 'device'),
    row('c', 'g', 'device', ['cold']),
    row('d', 'g', 'device'),
  ];
  const seen: { deviceId: string; nodeIds: string[]; tags: string[] }[] = [];
  const snap = TreeSnapshot.build(crowd, (scope) => {
    seen.push({ deviceId: scope.deviceId, nodeIds: [...scope.nodeIds], tags: [...scope.tags] });
    return scope.tags.includes('hot') || scope.nodeIds.includes('d');
  });

  it('asks about each device with its own id, path and tags', () => {
    const byId = Object.fromEntries(seen.map((s) => [s.deviceId, s]));
    expect(byId.a).toEqual({ deviceId: 'a', nodeIds: ['a', 'g', 'root'], tags: ['east', 'hot'] });
    expect(byId.b).toEqual({ deviceId: 'b', nodeIds: ['b', 'g', 'root'], tags: ['east'] });
    expect(byId.c).toEqual({ deviceId: 'c', nodeIds: ['c', 'g', 'root'], tags: ['east', 'cold'] });
    expect(byId.d).toEqual({ deviceId: 'd', nodeIds: ['d', 'g', 'root'], tags: ['east'] });
  });

  it('shows exactly the devices that matched', () => {
    expect(['a', 'b', 'c', 'd'].filter((id) => snap.isShown(id))).toEqual(['a', 'd']);
  });
});
