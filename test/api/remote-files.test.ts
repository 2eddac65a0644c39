/**
 * The file browser's directory listing (GET /remote/files/{device_id}): decided as a copy download
 * of the directory, audited as a copy, checked again on the device without following symlinks out
 * of the grant, and bounded. The device is this machine, behind the real session handlers.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_LIST_ENTRIES } from '../../shared/protocol.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { FakeAgents, type FakeAgent } from '../support/fake-agent.js';
import { eventually } from '../support/agent.js';

let t: TestBroker;
const fakes = new FakeAgents();
let device: string; // tagged x
let other: string; // untagged
let agents: FakeAgent[] = [];
let share: string;
let granted: string;

async function audit(query: string) {
  const r = await t.api('GET', `/api/v2/commitlist?${query}`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items as any[];
}

const list = (id: string, dir: string, token?: string) =>
  t.api('GET', `/api/v2/remote/files/${id}?path=${encodeURIComponent(dir)}&source=web`, token ? { token } : {});

beforeAll(async () => {
  t = await startTestBroker({ locator: fakes.locator });
  device = await t.addDevice({ tags: ['x'], name: 'files-one' });
  other = await t.addDevice({ name: 'files-other' });
  agents = [await fakes.attach(device, t.dataDir), await fakes.attach(other, t.dataDir)];
  share = fs.mkdtempSync(path.join(t.dataDir, 'browse-'));
  granted = path.join(share, 'granted');
  fs.mkdirSync(path.join(granted, 'sub'), { recursive: true });
  fs.writeFileSync(path.join(granted, 'b.txt'), 'hello');
  fs.writeFileSync(path.join(granted, 'a.bin'), Buffer.alloc(1234));
  fs.writeFileSync(path.join(share, 'secret.txt'), 'secret');
  fs.symlinkSync(share, path.join(granted, 'up'));
  fs.symlinkSync(path.join(granted, 'sub'), path.join(granted, 'inside'));
});

afterAll(async () => {
  for (const a of agents.reverse()) await a.close();
  await t?.close();
});

describe('directory listing', () => {
  it('lists entries with type, size and mtime, folders first, symlinks shown and not followed; audited as a copy', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`tag:x/copy(direction=download;path=${granted})`] }]);
    const r = await list(device, granted, user.token);
    expect(r.status).toBe(200);
    expect(r.body.path).toBe(fs.realpathSync(granted));
    expect(r.body.truncated).toBe(false);
    expect(r.body.entries.map((e: { name: string; type: string }) => [e.name, e.type])).toEqual([
      ['sub', 'dir'],
      ['a.bin', 'file'],
      ['b.txt', 'file'],
      ['inside', 'symlink'],
      ['up', 'symlink'],
    ]);
    const a = r.body.entries.find((e: { name: string }) => e.name === 'a.bin');
    expect(a.size).toBe(1234);
    expect(Date.parse(a.mtime)).toBe(Math.floor(fs.statSync(path.join(granted, 'a.bin')).mtimeMs));
    // A symlink within the grant opens as the directory it names.
    const inside = await list(device, path.join(granted, 'inside'), user.token);
    expect(inside.status).toBe(200);
    expect(inside.body.path).toBe(fs.realpathSync(path.join(granted, 'sub')));

    const start = await eventually(async () =>
      (await audit(`device_id=${device}&user_id=${user.id}&event=remote.copy.start`)).find((e) => e.options?.path === granted),
    );
    expect(start).toMatchObject({ action: 'copy', result: 'allowed', source: 'web', options: { direction: 'download', op: 'list' } });
    const end = await eventually(async () => (await audit(`device_id=${device}&event=remote.copy.end`)).find((e) => e.ref_id === start.id));
    expect(end.reason).toBe('listed 5 entries');
    expect(end.bytes_out).toBeGreaterThan(0);
  });

  it('lets the capabilities name the directories a restricted user may browse', async () => {
    const user = await t.userWith([
      { permission: 'remote-access:connect', resources: [`tag:x/copy(direction=download;path=${granted},/var/log)`] },
      { permission: 'device:read', resources: ['*'] },
    ]);
    const r = await t.api('GET', `/api/v2/remote/access/${device}`, { token: user.token });
    expect(r.body).toMatchObject({ copy: true, copy_paths: [granted, '/var/log'] });
    const admin = await t.api('GET', `/api/v2/remote/access/${device}`, { token: t.adminToken });
    expect(admin.body.copy_paths).toBeUndefined();
    // An upload-only grant reads nothing: no directory to browse.
    const uploader = await t.userWith([
      { permission: 'remote-access:connect', resources: [`tag:x/copy(direction=upload;path=${granted})`] },
      { permission: 'device:read', resources: ['*'] },
    ]);
    expect((await t.api('GET', `/api/v2/remote/access/${device}`, { token: uploader.token })).body).toMatchObject({ copy: true, copy_paths: [] });
  });

  it('refuses a path outside the grant, a ../ escape and a symlink out of the root, each audited as denied', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`tag:x/copy(direction=download;path=${granted})`] }]);
    const outside = await list(device, share, user.token);
    expect(outside.status).toBe(403);
    expect(outside.body.error).toBe('forbidden');
    const dotdot = await list(device, `${granted}/../`, user.token);
    expect(dotdot.status).toBe(403);
    const link = await list(device, path.join(granted, 'up'), user.token);
    expect(link.status).toBe(403);
    expect(link.body).toMatchObject({ error: 'forbidden', refusal: 'symlink_escape' });
    expect(JSON.stringify(link.body)).not.toContain('secret.txt');
    const denied = await eventually(async () => {
      const entries = await audit(`device_id=${device}&user_id=${user.id}&result=denied`);
      return entries.length >= 3 && entries;
    });
    expect(denied.map((e) => e.event).sort()).toEqual(['remote.copy.denied', 'remote.copy.denied', 'remote.copy.end']);
    expect(denied.find((e) => e.event === 'remote.copy.end').reason).toMatch(/^refused by the device: Not allowed/);
  });

  it('refuses a user without a copy grant, an upload-only grant, another device, and one without any remote access', async () => {
    const consoleOnly = await t.userWith([{ permission: 'remote-access:connect', resources: ['*/console'] }]);
    expect((await list(device, granted, consoleOnly.token)).status).toBe(403);
    const uploader = await t.userWith([{ permission: 'remote-access:connect', resources: [`tag:x/copy(direction=upload;path=${granted})`] }]);
    expect((await list(device, granted, uploader.token)).status).toBe(403);
    const tagged = await t.userWith([{ permission: 'remote-access:connect', resources: [`tag:x/copy(path=${granted})`] }]);
    expect((await list(device, granted, tagged.token)).status).toBe(200);
    expect((await list(other, granted, tagged.token)).status).toBe(403);
    const reader = await t.userWith([{ permission: 'device:read', resources: ['*'] }]);
    expect((await list(device, granted, reader.token)).status).toBe(403);
    expect((await list(device, granted)).status).toBe(401);
    for (const who of [consoleOnly, uploader, reader]) {
      const entries = await eventually(async () => {
        const found = await audit(`device_id=${device}&user_id=${who.id}&event=remote.copy.denied`);
        return found.length > 0 && found;
      });
      expect(entries[0].action).toBe('copy');
    }
  });

  it('answers clearly for a file, a missing directory, a relative or NUL path, and an offline device', async () => {
    const file = await list(device, path.join(granted, 'b.txt'), t.adminToken);
    expect(file.status).toBe(502);
    expect(file.body).toMatchObject({ error: 'device_refused', refusal: 'not_a_directory' });
    const missing = await list(device, path.join(granted, 'nope'), t.adminToken);
    expect(missing.body).toMatchObject({ error: 'device_refused', refusal: 'not_found' });
    expect((await list(device, 'relative/dir', t.adminToken)).status).toBe(400);
    expect((await list(device, '/tmp/a\\b', t.adminToken)).status).toBe(400);
    const offline = await t.addDevice({ name: 'files-offline' });
    expect((await list(offline, '/tmp', t.adminToken)).body.error).toBe('device_not_connected');
    expect((await list('0'.repeat(64), '/tmp', t.adminToken)).status).toBe(404);
  });

  it('bounds a huge directory and says it was cut', async () => {
    const huge = path.join(share, 'huge');
    fs.mkdirSync(huge);
    for (let i = 0; i < MAX_LIST_ENTRIES + 200; i++) fs.writeFileSync(path.join(huge, `f-${String(i).padStart(5, '0')}-${'n'.repeat(150)}`), '');
    const r = await list(device, huge, t.adminToken);
    expect(r.status).toBe(200);
    expect(r.body.truncated).toBe(true);
    expect(r.body.entries.length).toBeGreaterThan(0);
    expect(r.body.entries.length).toBeLessThanOrEqual(MAX_LIST_ENTRIES);
    const end = await eventually(async () => (await audit(`device_id=${device}&event=remote.copy.end`)).find((e) => /cut at/.test(e.reason ?? '')));
    expect(end.reason).toMatch(/^listed \d+ entries, cut at \d+$/);
  });
});
