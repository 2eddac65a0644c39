import { describe, expect, it } from 'vitest';
import { compilePolicies, type DeviceScope, type Policy } from '../../shared/resources.js';
import { consoleRecordingMode, type RecordingMode } from './recording.js';
import { allowedCopyRoots, copyBrowseRoots, grantedRemoteActions, maySeeRemoteSession, presetApplies } from './remote.js';

const CONNECT = 'remote-access:connect';
const device: DeviceScope = { deviceId: 'd1', nodeIds: ['d1', 'lab', 'root'], tags: ['lab-tag'] };
const upload = (path: string) => ({ action: 'copy' as const, direction: 'upload' as const, path });
const roots = (policies: Policy[], path: string) => allowedCopyRoots(compilePolicies(policies), device, upload(path));

describe('allowedCopyRoots', () => {
  it('collects the path roots of every grant that allows the copy', () => {
    const policies = [{ permission: CONNECT, resources: ['*/copy(path=/srv)', 'tag:lab-tag/copy(path=/srv/data,/var/log)', 'tag:other/copy(path=/tmp)'] }];
    expect(roots(policies, '/srv/data/x')?.sort()).toEqual(['/srv', '/srv/data', '/var/log']);
    expect(roots(policies, '/srv/x')?.sort()).toEqual(['/srv']);
  });

  it('is undefined (no limit) when one allowing grant has no path option', () => {
    expect(roots([{ permission: CONNECT, resources: ['*/copy(path=/srv)', 'node:lab/copy(direction=upload)'] }], '/srv/x')).toBeUndefined();
    expect(roots([{ permission: CONNECT, resources: ['node:lab'] }], '/etc/x')).toBeUndefined();
  });

  it('leaves out grants that do not allow this request (another direction, another device, another permission)', () => {
    const policies = [
      { permission: CONNECT, resources: ['*/copy(direction=download;path=/)', 'tag:other/copy', '*/copy(path=/srv)'] },
      { permission: 'device:read', resources: ['*'] },
    ];
    expect(roots(policies, '/srv/x')).toEqual(['/srv']);
  });
});

describe('copyBrowseRoots', () => {
  const browse = (resources: string[]) => copyBrowseRoots(compilePolicies([{ permission: CONNECT, resources }]), device);

  it('names the directories of the grants that read files on the device, in order, once each', () => {
    expect(browse(['*/copy(direction=download;path=/var/log)', 'tag:lab-tag/copy(path=/srv,/var/log)', 'tag:other/copy(path=/tmp)'])).toEqual([
      '/var/log',
      '/srv',
    ]);
  });

  it('is undefined when a grant reads anywhere, empty when none reads at all', () => {
    expect(browse(['*/copy(path=/srv)', 'node:lab/copy(direction=download)'])).toBeUndefined();
    expect(browse(['node:lab'])).toBeUndefined();
    expect(browse(['*/copy(direction=upload;path=/srv)', '*/console'])).toEqual([]);
  });
});

describe('grantedRemoteActions', () => {
  it('reads actions of resources matching the device only', () => {
    const policies = compilePolicies([
      { permission: CONNECT, resources: ['node:lab/reload', 'tag:other/console'] },
      { permission: 'device:read', resources: ['*'] },
    ]);
    expect([...grantedRemoteActions(policies, device)]).toEqual(['reload']);
  });
});

describe('presetApplies', () => {
  it('matches a preset target like a resource entity: *, a tag inherited or own, a node at or above', () => {
    for (const target of ['*', 'tag:lab-tag', 'node:lab', 'node:d1', 'node:root']) expect(presetApplies(target, device)).toBe(true);
    for (const target of ['tag:other', 'node:elsewhere']) expect(presetApplies(target, device)).toBe(false);
  });
});

describe('maySeeRemoteSession', () => {
  const manage = (resources: string[]) => compilePolicies([{ permission: 'remote-access:manage', resources }]);
  it("shows one's own sessions whatever one holds", () => {
    expect(maySeeRemoteSession([], 'me', { userId: 'me', device })).toBe(true);
  });
  it("shows others' sessions only on devices remote-access:manage covers", () => {
    expect(maySeeRemoteSession(manage(['tag:lab-tag']), 'me', { userId: 'them', device })).toBe(true);
    expect(maySeeRemoteSession(manage(['tag:other']), 'me', { userId: 'them', device })).toBe(false);
    expect(maySeeRemoteSession(compilePolicies([{ permission: CONNECT, resources: ['*'] }]), 'me', { userId: 'them', device })).toBe(false);
  });
  it('shows a session on a device gone from the tree only to a `*` grant', () => {
    expect(maySeeRemoteSession(manage(['*']), 'me', { userId: 'them', device: undefined })).toBe(true);
    expect(maySeeRemoteSession(manage(['tag:lab-tag']), 'me', { userId: 'them', device: undefined })).toBe(false);
  });
});

describe('consoleRecordingMode', () => {
  const role = (recording: RecordingMode, resources: string[]) => ({ recording, policies: compilePolicies([{ permission: CONNECT, resources }]) });
  const anyUser = { action: 'console' as const };
  it('lets required win over default and off', () => {
    expect(consoleRecordingMode([role('off', ['*']), role('required', ['tag:lab-tag/console'])], device, anyUser)).toBe('required');
    expect(consoleRecordingMode([role('default', ['*']), role('off', ['*'])], device, anyUser)).toBe('default');
  });
  it('is off only when every role granting the console says off', () => {
    expect(consoleRecordingMode([role('off', ['*']), role('off', ['node:lab'])], device, anyUser)).toBe('off');
    // A role that does not grant the console here has no say.
    expect(consoleRecordingMode([role('off', ['*']), role('required', ['tag:other']), role('default', ['*/tunnel(port=22)'])], device, anyUser)).toBe('off');
  });
  it('decides on the grants that cover the local user asked for: a required root grant beside a wildcard off grant records a root console', () => {
    const roles = [role('required', ['*/console(user=root)']), role('off', ['*/console'])];
    expect(consoleRecordingMode(roles, device, { action: 'console', user: 'root' })).toBe('required');
    // Another user is covered by the off grant only.
    expect(consoleRecordingMode(roles, device, { action: 'console', user: 'pi' })).toBe('off');
    // One role holding both grants is one mode: its own.
    expect(
      consoleRecordingMode([role('default', ['*/console(user=root)']), role('off', ['*/console(user=pi)'])], device, { action: 'console', user: 'root' }),
    ).toBe('default');
  });
});
