/** The console's pure rules, without a browser: what is sent, shown and offered. */
import { describe, expect, it } from 'vitest';
import type { AttributesRecord, GroupTreeNode } from '../../shared/api-types.js';
import { ApiFailure, apiUrl, itemsOf, tokenExpiry } from './api.js';
import { match, withQuery } from './router.js';
import { LEGACY_FIELDS, legacyProblem, localProblems, patchBody, type LegacyField } from './screens/attributes.js';
import { expiryFrom, keysOf } from './screens/bootstrap-keys.js';
import { pruneTree } from './screens/devices.js';
import { entriesOf } from './screens/files.js';
import { connectCommand, suggestedLocalPort, installCliCommand } from './screens/portmaps.js';
import { blankResourceProblems, toPolicies } from './screens/roles.js';
import { createdMessage } from './screens/users.js';
import { permissionNames } from './session.js';

const legacyOf = (record: AttributesRecord) => Object.fromEntries(LEGACY_FIELDS.map((f) => [f.name, record[f.name]])) as Record<LegacyField, string>;

describe('attribute editor: the PATCH body', () => {
  const original: AttributesRecord = {
    device_name: 'gw',
    description: 'old',
    latitude: '',
    longitude: '',
    country: '',
    city: '',
    zip: '',
    address: '',
    custom: { owner: 'ops', site: 'x' },
    custom_max: 100,
  };
  const row = (key: string, value: string, existing: boolean, deleted = false, original?: string) => ({ uid: 0, key, value, existing, deleted, original });

  it('is empty when nothing changed', () => {
    expect(patchBody(original, legacyOf(original), [row('owner', 'ops', true, false, 'ops'), row('site', 'x', true, false, 'x')])).toEqual({});
  });

  it('sends changed legacy fields, changed and new custom keys, and "" for rows marked for deletion', () => {
    const legacy = { ...legacyOf(original), description: '' };
    const rows = [row('owner', 'dev', true, false, 'ops'), row('site', 'x', true, true, 'x'), row('  rack ', 'r1', false), row('', '', false)];
    expect(patchBody(original, legacy, rows)).toEqual({ description: '', custom: { owner: 'dev', site: '', rack: 'r1' } });
  });

  it('restoring a row marked for deletion sends nothing for it', () => {
    expect(patchBody(original, legacyOf(original), [row('site', 'x', true, false, 'x')])).toEqual({});
  });
});

describe('device tree filter', () => {
  const node = (n: Pick<GroupTreeNode, 'node_id' | 'title' | 'type'> & Partial<GroupTreeNode>): GroupTreeNode => ({ id: n.node_id, tags: [], nodes: [], ...n });
  const tree = node({
    node_id: 'root',
    title: 'All',
    type: 'group',
    nodes: [
      node({
        node_id: 'berlin',
        title: 'Berlin',
        type: 'group',
        tags: ['prod'],
        nodes: [node({ node_id: 'a'.repeat(64), title: 'gw-1', type: 'device', status: 'online' })],
      }),
      node({
        node_id: 'lab',
        title: 'Lab',
        type: 'group',
        nodes: [node({ node_id: 'b'.repeat(64), title: 'pi', type: 'device', status: 'offline', tags: ['edge'] })],
      }),
    ],
  });
  const titles = (n: GroupTreeNode | null): string[] => (n ? [n.title, ...(n.nodes ?? []).flatMap(titles)] : []);

  it('keeps the tree without a filter', () => {
    expect(pruneTree(tree, { text: '', tag: '', status: '' })).toBe(tree);
  });
  it('keeps matching devices and the groups leading to them', () => {
    expect(titles(pruneTree(tree, { text: 'pi', tag: '', status: '' }))).toEqual(['All', 'Lab', 'pi']);
    expect(titles(pruneTree(tree, { text: '', tag: '', status: 'online' }))).toEqual(['All', 'Berlin', 'gw-1']);
  });
  it('matches a tag inherited from a group', () => {
    expect(titles(pruneTree(tree, { text: '', tag: 'prod', status: '' }))).toEqual(['All', 'Berlin', 'gw-1']);
    expect(titles(pruneTree(tree, { text: '', tag: 'edge', status: 'online' }))).toEqual([]);
  });
  it('a group matching by node id keeps everything below it', () => {
    expect(titles(pruneTree(tree, { text: 'berlin', tag: '', status: '' }))).toEqual(['All', 'Berlin', 'gw-1']);
  });
});

describe('tunnel command', () => {
  it('is the exact fleet connect command, with a local port an unprivileged user can open', () => {
    expect(suggestedLocalPort(22)).toBe(10022);
    expect(suggestedLocalPort(554)).toBe(10554);
    expect(suggestedLocalPort(1880)).toBe(1880);
    // Commonly taken on a workstation (web and database servers, AirPlay): shifted too.
    expect(suggestedLocalPort(8080)).toBe(18080);
    expect(suggestedLocalPort(5432)).toBe(15432);
    expect(suggestedLocalPort(5000)).toBe(15000);
    expect(connectCommand('abc', { proto: 'tcp', port: 22, dst: 'localhost' }, 10022)).toBe('fleet connect abc -t 10022:localhost:22');
    expect(connectCommand('abc', { proto: 'udp', port: 53, dst: '10.0.0.1' }, 5353)).toBe('fleet connect abc -t 5353:10.0.0.1:53/udp');
    expect(connectCommand('abc', { proto: 'tcp', port: 80, dst: 'fd00::1' }, 8080)).toBe('fleet connect abc -t 8080:[fd00::1]:80');
  });
  it('installs the CLI from this broker in one command', () => {
    expect(installCliCommand('https://fleet.example.com')).toBe('curl -fsSL https://fleet.example.com/install-cli.sh | sh');
    expect(installCliCommand('http://127.0.0.1:8080/')).toBe('curl -fsSL http://127.0.0.1:8080/install-cli.sh | sh');
  });
});

describe('role editor', () => {
  it('sends no resources for permissions that take none, and none for "all devices"', () => {
    expect(
      toPolicies([
        { uid: 1, permission: 'audit:read', resources: ['tag:x'] },
        { uid: 2, permission: 'device:read', resources: [' ', ''] },
        { uid: 3, permission: 'remote-access:connect', resources: [' */console ', 'tag:lab'] },
      ]),
    ).toEqual([{ permission: 'audit:read' }, { permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console', 'tag:lab'] }]);
  });
});

describe('answers of the API', () => {
  it('reads lists, bootstrap keys and folder entries in the shapes the broker uses', () => {
    expect(itemsOf({ items: [1, 2], total: 2 })).toEqual([1, 2]);
    expect(itemsOf(null)).toEqual([]);
    expect(keysOf({ k1: { group_id: 'g', auto_accept: true } })).toEqual([
      { key: 'k1', group_id: 'g', auto_accept: true, created_at: undefined, label: '', expires_at: null, expired: false },
    ]);
    expect(
      keysOf({ k2: { key_id: 'id', group_id: 'g', auto_accept: false, created_at: 't', label: 'rack', expires_at: 'x', expired: true, devices: 3 } })[0],
    ).toEqual({
      key: 'k2',
      group_id: 'g',
      auto_accept: false,
      created_at: 't',
      label: 'rack',
      expires_at: 'x',
      expired: true,
      devices: 3,
    });
    expect(expiryFrom('', 0)).toBeNull();
    expect(expiryFrom('24', 0)).toBe('1970-01-02T00:00:00.000Z');
    // One shape per call: a list page is not a key map.
    expect(keysOf([{ key: 'k3' }])).toEqual([]);
    expect(
      entriesOf({
        items: [
          { name: 'b.txt', path: '/x/b.txt', type: 'file', is_dir: false, size: 3, mtime: 't' },
          { name: 'sub', path: '/x/sub', type: 'dir', is_dir: true, size: 0, mtime: 't' },
        ],
      }).map((e) => [e.path, e.dir]),
    ).toEqual([
      ['/x/sub/', true],
      ['/x/b.txt', false],
    ]);
  });

  it('maps field errors of a 400 to the fields they name', () => {
    const failure = new ApiFailure(400, 'invalid_request', 'body.latitude: out of range', {
      field: 'latitude',
      issues: [
        { field: 'body.latitude', message: 'must be between -90 and 90' },
        { field: 'body.custom.kkk', message: 'key too long' },
      ],
    });
    expect(failure.fieldErrors()).toEqual({ latitude: 'must be between -90 and 90', 'custom.kkk': 'key too long' });
  });

  it('reads the expiry of a token and the permissions of a profile', () => {
    const payload = Buffer.from(JSON.stringify({ sub: 'u', exp: 1_900_000_000 })).toString('base64url');
    expect(tokenExpiry(`x.${payload}.y`)).toBe(1_900_000_000);
    expect(tokenExpiry('garbage')).toBeNull();
    expect(permissionNames(['device:read', 'audit:read'])).toEqual(new Set(['device:read', 'audit:read']));
    expect(permissionNames([{ permission: 'files:read', resources: ['*'] }])).toEqual(new Set(['files:read']));
    expect(permissionNames(undefined)).toBeNull();
  });

  it('builds URLs and matches routes', () => {
    expect(apiUrl('/files', { path: '/a b/', empty: '', none: undefined })).toBe('/api/v2/files?path=%2Fa+b%2F');
    expect(match('/devices/:id', `/devices/${'a'.repeat(64)}`)).toEqual({ id: 'a'.repeat(64) });
    expect(match('/devices/:id', '/devices/x/attributes')).toBeNull();
    expect(withQuery('/audit', { result: 'denied', device_id: '' })).toBe('/audit?result=denied');
  });
});

describe('attribute editor: checks before sending', () => {
  it('refuses coordinates out of range, over-long text and keys, and keys named like a legacy field', () => {
    expect(legacyProblem('latitude', '90')).toBeUndefined();
    expect(legacyProblem('latitude', '90.5')).toContain('-90 to 90');
    expect(legacyProblem('longitude', '-180')).toBeUndefined();
    expect(legacyProblem('longitude', '1e2')).toContain('-180 to 180');
    expect(legacyProblem('city', 'x'.repeat(1025))).toContain('1024');
    const row = (uid: number, key: string, value = 'v') => ({ uid, key, value, existing: false, deleted: false });
    expect(Object.values(localProblems([row(1, 'latitude'), row(2, 'k'.repeat(65)), row(3, 'ok', 'v'.repeat(4097))]))).toEqual([
      '"latitude" is a device field above; set it there or choose another key.',
      'A key holds at most 64 characters.',
      'A value holds at most 4096 characters.',
    ]);
  });
});

describe('role editor: blank grants', () => {
  it('refuses a resource-taking permission with no resource or an empty row, not one that takes none', () => {
    const problems = blankResourceProblems([
      { uid: 1, permission: 'device:read', resources: [] },
      { uid: 2, permission: 'remote-access:connect', resources: ['*/console', ' '] },
      { uid: 3, permission: 'users:read', resources: [] },
      { uid: 4, permission: 'device:manage', resources: ['*'] },
    ]);
    expect(problems.map((p) => [p.policy, p.resource])).toEqual([
      [0, undefined],
      [1, ''],
    ]);
  });
});

describe('new user: where the welcome mail went', () => {
  it('says "sent" only for a mail handed to the relay', () => {
    expect(createdMessage('a@example.com', false, 'sent')).toContain('was sent');
    expect(createdMessage('a@example.com', false, 'outbox')).toContain("written to the broker's outbox folder");
    expect(createdMessage('a@example.com', false, 'outbox')).not.toContain('was sent');
    expect(createdMessage('a@example.com', true, 'failed')).toContain('could not be sent');
  });
});
