/** The Dashboard's rules: counts with live events, and which devices are failing their configuration. */
import { describe, expect, it } from 'vitest';
import type { GroupTreeNode } from '../../../shared/api-types.js';
import { ApiFailure } from '../api.js';
import { devicesOf, failingDevices, notBuilt, statusCounts } from './dashboard.js';

const device = (id: string, extra: Partial<GroupTreeNode> = {}): GroupTreeNode =>
  ({ id, node_id: id, title: `dev-${id}`, type: 'device', tags: [], nodes: [], status: 'offline', ...extra }) as GroupTreeNode;

describe('dashboard', () => {
  it('counts each device once, and a live event overrides the status the tree gave', () => {
    const tree = {
      id: 'root',
      node_id: 'root',
      title: 'Root',
      type: 'group',
      tags: [],
      nodes: [
        device('a', { status: 'online' }),
        device('b'),
        { id: 'g', node_id: 'g', title: 'G', type: 'group', tags: [], nodes: [device('c'), device('b')] },
      ],
    } as unknown as GroupTreeNode;
    const devices = devicesOf(tree);
    expect(devices.map((d) => d.node_id)).toEqual(['a', 'b', 'c']);
    expect(statusCounts(devices, new Map())).toEqual({ online: 1, offline: 2 });
    const live = new Map([
      ['a', { event: 'device.offline' as const, device_id: 'a', at: '' }],
      ['c', { event: 'device.online' as const, device_id: 'c', at: '' }],
      ['zz', { event: 'device.online' as const, device_id: 'zz', at: '' }],
    ]);
    expect(statusCounts(devices, live)).toEqual({ online: 1, offline: 2 });
  });

  it('lists devices behind their configuration and those with configuration errors, not the agent’s own events nor never-configured devices', () => {
    const devices = [
      device('behind', { config_propagated: false, device_commit_sha: 'a'.repeat(40) }),
      device('never', { config_propagated: false, device_commit_sha: '' }),
      device('fine', { config_propagated: true, device_commit_sha: 'b'.repeat(40) }),
      device('erring', { config_propagated: true, device_commit_sha: 'b'.repeat(40) }),
    ];
    const report = (node_id: string, bundle: string) => ({ id: 1, node_id, title: '', bundle, sev: 'ERR' as const, text: '', ts: 0 });
    const failing = failingDevices(devices, [report('erring', 'package_management'), report('erring', 'file_distribution'), report('fine', 'agent_internal')]);
    expect(failing).toEqual([
      { node_id: 'erring', title: 'dev-erring', behind: false, errors: 2 },
      { node_id: 'behind', title: 'dev-behind', behind: true, errors: 0 },
    ]);
  });

  it('tells a call the broker does not have (501, unknown call) from other failures', () => {
    expect(notBuilt(new ApiFailure(501, 'not_implemented', 'no'))).toBe(true);
    expect(notBuilt(new ApiFailure(404, 'unknown_call', 'no'))).toBe(true);
    expect(notBuilt(new ApiFailure(404, 'not_found', 'no'))).toBe(false);
    expect(notBuilt(new ApiFailure(403, 'forbidden', 'no'))).toBe(false);
    expect(notBuilt(new Error('network'))).toBe(false);
  });
});
