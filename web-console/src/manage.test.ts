/** The device list's pure rules: tree changes, the table's rows and order, live status, install command. */
import { describe, expect, it } from 'vitest';
import type { GroupTreeNode } from '../../shared/api-types.js';
import { installCommand, keysOf } from './screens/bootstrap-keys.js';
import { columnFiltersOf, columnMatches, deviceRows, rowMatches, sortRows } from './screens/devices-table.js';
import { agoText, applyLive } from './screens/devices.js';
import { findNode, groupHolds, groupOptions, manageableTagsNote, mayManage, parseTags, subtreeIds, tagsOutside } from './screens/tree-manage.js';

const device = (id: string, title: string, extra: Partial<GroupTreeNode> = {}): GroupTreeNode => ({
  id,
  node_id: id,
  title,
  type: 'device',
  tags: [],
  nodes: [],
  ...extra,
});
const group = (id: string, title: string, nodes: GroupTreeNode[], tags: string[] = []): GroupTreeNode => ({
  id,
  node_id: id,
  title,
  type: 'group',
  tags,
  nodes,
});

const tree = group('root', 'All devices', [
  group(
    'berlin',
    'Berlin',
    [device('d1', 'gw', { status: 'online', last_reported: 200, tags: ['edge'] }), group('lab', 'Lab', [device('d2', 'bench')])],
    ['prod'],
  ),
  group('unassigned_group', 'Unassigned', [device('d3', 'gw', { last_reported: 100 })]),
]);

describe('group tree changes', () => {
  it('lists groups with their paths, and the ids a group cannot move into', () => {
    expect(groupOptions(tree).map((g) => g.label)).toEqual(['All devices', 'All devices / Berlin', 'All devices / Berlin / Lab', 'All devices / Unassigned']);
    expect([...subtreeIds(tree.nodes[0])].sort()).toEqual(['berlin', 'd1', 'd2', 'lab']);
  });

  it('offers what the broker hints: nodes without can_manage false, groups to move into, tag changes within manageable_tags', () => {
    expect(mayManage({ can_manage: false })).toBe(false);
    expect(mayManage({ can_manage: true })).toBe(true);
    expect(mayManage({})).toBe(true); // no hint: offered, the broker decides
    const hinted = group('root', 'All', [group('mine', 'Mine', [], []), { ...group('theirs', 'Theirs', []), can_manage: false }]);
    expect(groupOptions({ ...hinted, can_manage: false }).map((g) => [g.node_id, g.manageable])).toEqual([
      ['root', false],
      ['mine', true],
      ['theirs', false],
    ]);
    expect(deviceRows(group('g', 'G', [device('a', 'a', { can_manage: false }), device('b', 'b')])).map((r) => r.manageable)).toEqual([false, true]);
    expect(tagsOutside(['ops', 'prod'], ['ops'], ['ops'])).toEqual(['prod']); // removing counts too
    expect(tagsOutside(['prod'], ['prod', 'ops'], ['ops'])).toEqual([]); // untouched tags need no grant
    expect(tagsOutside([], ['x'], '*')).toEqual([]);
    expect(manageableTagsNote('*')).toBeNull();
    expect(manageableTagsNote(['ops'])).toBe('You may add or remove only these tags: ops.');
  });

  it('reads tags typed with commas and spaces, without duplicates', () => {
    expect(parseTags(' a, b  c,,a ')).toEqual(['a', 'b', 'c']);
    expect(parseTags('')).toEqual([]);
  });
});

describe('devices table', () => {
  it('has a row per device with its group and inherited tags apart from its own', () => {
    const rows = deviceRows(tree);
    expect(rows.map((r) => [r.id, r.group, r.tags, r.ownTags])).toEqual([
      ['d1', 'Berlin', ['prod', 'edge'], ['edge']],
      ['d2', 'Lab', ['prod'], []],
      ['d3', 'Unassigned', [], []],
    ]);
  });

  it('searches the inventory columns as well as name, id, group, tags and attributes', () => {
    const [d1] = deviceRows(tree);
    const row = { ...d1, os: 'Debian GNU/Linux 12', ip: '10.0.0.7', agent: '1.4.2' };
    for (const text of ['debian', '10.0.0.7', '1.4.2', 'GW', 'berlin', 'prod', 'edge', 'd1', '']) expect(rowMatches(row, text), text).toBe(true);
    expect(rowMatches(row, 'ubuntu')).toBe(false);
  });

  it('filters per column: OS, IP and agent version contained, last seen by age (never seen is not seen for a day)', () => {
    const [d1] = deviceRows(tree);
    const now = 1_800_000_000;
    const row = { ...d1, os: 'Debian GNU/Linux 12', ip: '10.0.0.7', agent: '1.4.2', lastSeen: now - 2 * 86_400 };
    expect(columnMatches(row, { os: 'DEBIAN', ip: '10.0', agent: '1.4' }, now)).toBe(true);
    expect(columnMatches(row, { os: 'ubuntu' }, now)).toBe(false);
    expect(columnMatches(row, { seen: 'over1d' }, now)).toBe(true);
    expect(columnMatches(row, { seen: 'over7d' }, now)).toBe(false);
    expect(columnMatches(row, { seen: 'within1h' }, now)).toBe(false);
    expect(columnMatches({ ...row, lastSeen: now - 5 }, { seen: 'within1h' }, now)).toBe(true);
    expect(columnMatches({ ...row, lastSeen: null }, { seen: 'over1d' }, now)).toBe(true);
    expect(columnMatches({ ...row, lastSeen: null }, { seen: 'never' }, now)).toBe(true);
    expect(columnMatches(row, { seen: 'never' }, now)).toBe(false);
    // From the URL: unknown last-seen values are dropped.
    expect(columnFiltersOf(new URLSearchParams('os=deb&seen=over1d&ip='))).toEqual({ os: 'deb', seen: 'over1d' });
    expect(columnFiltersOf(new URLSearchParams('seen=yesterday'))).toEqual({});
  });

  it('says how long ago a device was heard from', () => {
    expect(agoText(4_600)).toBe('5 s ago');
    expect(agoText(-300)).toBe('0 s ago');
    expect(agoText(3 * 60_000)).toBe('3 min ago');
    expect(agoText(5 * 3_600_000)).toBe('5 h ago');
    expect(agoText(3 * 86_400_000)).toBe('3 days ago');
  });

  it('sorts by a column either way, same values in id order', () => {
    const rows = deviceRows(tree);
    expect(sortRows(rows, 'name', false).map((r) => r.id)).toEqual(['d2', 'd1', 'd3']);
    expect(sortRows(rows, 'seen', true).map((r) => r.id)).toEqual(['d1', 'd3', 'd2']);
    expect(sortRows(rows, 'status', false)[0].id).toBe('d1');
  });
});

describe('live status', () => {
  it('applies the latest event of a device to the tree: status and last contact', () => {
    const live = new Map([['d3', { event: 'device.online' as const, device_id: 'd3', at: '2026-01-01T00:00:10.000Z' }]]);
    const updated = applyLive(tree, live);
    const d3 = updated.nodes[1].nodes[0];
    expect(d3.status).toBe('online');
    expect(d3.last_reported).toBe(Date.parse('2026-01-01T00:00:10Z') / 1000);
    expect(applyLive(tree, new Map())).toBe(tree);
  });
});

describe('bootstrap keys', () => {
  it('builds the one-line install command and reads the device count', () => {
    expect(installCommand('k3y', 'https://fleet.example.com')).toBe(
      "curl -fsSL https://fleet.example.com/install.sh -o fleet-install.sh && printf '%s\\n' 'k3y' | sudo sh fleet-install.sh --bootstrap-key-stdin",
    );
    expect(keysOf({ k3y: { group_id: 'lab', auto_accept: true, devices: 2 } })).toEqual([
      { key: 'k3y', group_id: 'lab', auto_accept: true, created_at: undefined, devices: 2, label: '', expires_at: null, expired: false },
    ]);
  });
});

describe('findNode and groupHolds', () => {
  it('finds a node anywhere in the tree (the Manage panel follows it across reloads), and null once it is gone', () => {
    const t = group('root', 'All', [group('a', 'A', [group('b', 'B', [device('d1', 'one')])]), device('d2', 'two')]);
    expect(findNode(t, 'd1')?.title).toBe('one');
    expect(findNode(t, 'b')?.title).toBe('B');
    expect(findNode(t, 'gone')).toBeNull();
  });

  it('counts what a group holds directly, as the user sees it', () => {
    const g = group('g', 'G', [device('d1', 'one'), device('d2', 'two'), group('s', 'S', [device('d3', 'three')])]);
    expect(groupHolds(g)).toEqual({ devices: 2, groups: 1 });
    expect(groupHolds(group('e', 'E', []))).toEqual({ devices: 0, groups: 0 });
  });
});
