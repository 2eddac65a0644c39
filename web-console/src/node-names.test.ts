/** Filters by name: labels unique among the nodes offered, names and ids resolved, problems said. */
import { describe, expect, it } from 'vitest';
import type { GroupTree, GroupTreeNode } from '../../shared/api-types.js';
import { labelOf, nodeChoices, resolveNode } from './node-names.js';

const node = (node_id: string, title: string, type: 'device' | 'group', nodes: GroupTreeNode[] = []): GroupTreeNode => ({
  id: node_id,
  node_id,
  title,
  type,
  tags: [],
  nodes,
});
const hex = (c: string) => c.repeat(64);
const tree: GroupTree = {
  total_devices: 3,
  tree: node('root', 'All devices', 'group', [
    node('berlin', 'Berlin', 'group', [node(hex('a'), 'gateway', 'device'), node(hex('b'), 'Kiosk-1', 'device')]),
    node('hamburg', 'Hamburg', 'group', [node(hex('c'), 'gateway', 'device')]),
  ]),
};

describe('nodeChoices', () => {
  it('offers the devices, or the devices and groups, by name, telling shared names apart by the id start', () => {
    expect(nodeChoices(tree, ['device'])).toEqual([
      { id: hex('a'), label: 'gateway · aaaaaaaa', type: 'device' },
      { id: hex('c'), label: 'gateway · cccccccc', type: 'device' },
      { id: hex('b'), label: 'Kiosk-1', type: 'device' },
    ]);
    expect(nodeChoices(tree, ['device', 'group']).map((c) => c.label)).toEqual(['Berlin', 'gateway · aaaaaaaa', 'gateway · cccccccc', 'Hamburg', 'Kiosk-1']);
    expect(nodeChoices(undefined, ['device'])).toEqual([]);
  });
});

describe('resolveNode', () => {
  const devices = nodeChoices(tree, ['device']);
  const all = nodeChoices(tree, ['device', 'group']);

  it('resolves a name in any case, a labelled shared name, a known id, and a device id as typed', () => {
    expect(resolveNode(' kiosk-1 ', devices, 'device')).toEqual({ id: hex('b') });
    expect(resolveNode('gateway · cccccccc', devices, 'device')).toEqual({ id: hex('c') });
    expect(resolveNode('Hamburg', all, 'device or group')).toEqual({ id: 'hamburg' });
    expect(resolveNode('berlin', all, 'device or group')).toEqual({ id: 'berlin' });
    expect(resolveNode(hex('d'), devices, 'device')).toEqual({ id: hex('d') });
    expect(resolveNode('', devices, 'device')).toEqual({ id: undefined });
  });

  it('says what is wrong with a name it cannot resolve rather than filtering on it', () => {
    expect(resolveNode('gateway', devices, 'device')).toEqual({ problem: '2 of the devices you may see are named “gateway”: pick one from the list.' });
    expect(resolveNode('nowhere', all, 'device or group')).toEqual({ problem: 'No device or group you may see is named “nowhere”.' });
    // A group is not a device: the audit filters devices only.
    expect(resolveNode('Berlin', devices, 'device')).toEqual({ problem: 'No device you may see is named “Berlin”.' });
  });

  it('passes the text as an id when there are no names to choose from (no device:read)', () => {
    expect(resolveNode('some-id', [], 'device')).toEqual({ id: 'some-id' });
  });

  it('labels an id from the URL by its name, or shows the id when unknown', () => {
    expect(labelOf(hex('b'), devices)).toBe('Kiosk-1');
    expect(labelOf(hex('e'), devices)).toBe(hex('e'));
  });
});
