/**
 * End to end, as the attack was made: a user holding only device:read and device:manage on one
 * device sets a custom attribute to shell syntax; an administrator commits a proc_watch whose command
 * uses `$(location)` and a sudoers template using `{{svc}}`. The real agent runs the command with the
 * value as data (nothing injected runs), and an attribute holding a newline, stored before the API
 * refused such values, never reaches the template: the broker leaves it out of what it sends.
 * Everything the agent writes goes under temporary directories.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let agent: TestAgent | undefined;
let id: string;
let scratch: string;

const api = (method: string, p: string, body?: unknown, token = t.adminToken) => t.api(method, `/api/v2${p}`, { token, body });
const SUDOERS = 'deploy ALL=(root) NOPASSWD: /bin/systemctl restart {{svc}}\n';

beforeAll(async () => {
  scratch = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-substitution-')));
  t = await startTestBroker();
  await t.addGroup({ id: 'plant', tags: ['plant'] });
  const key = await api('POST', '/bootstrapkey', { group_id: 'plant', auto_accept: true });
  const bootstrapKey = Object.keys(key.body)[0];
  const upload = new FormData();
  upload.append('path', '/templates/');
  upload.append('file', new Blob([SUDOERS]), 'sudoers.tpl');
  expect((await t.api('POST', '/api/v2/file', { token: t.adminToken, body: upload })).status).toBe(200);
  agent = startAgent({ broker: t.url, bootstrapKey });
  id = await agent.waitConnected(t, 60_000);
});
afterAll(async () => {
  await agent?.close();
  await t?.close();
  if (scratch) fs.rmSync(scratch, { recursive: true, force: true });
});

describe('a metadata permission does not become root', () => {
  it('runs a committed command with a device attribute as data, and keeps a multi-line attribute out of a template', async () => {
    const manager = await t.tokenWith([
      { permission: 'device:read', resources: [`node:${id}`] },
      { permission: 'device:manage', resources: [`node:${id}`] },
    ]);
    // the API refuses the newline outright…
    expect((await api('PATCH', `/deviceattribute/${id}`, { custom: { svc: 'app\nALL ALL=(ALL) NOPASSWD: ALL' } }, manager)).status).toBe(400);
    // …and takes shell syntax on one line, which is data
    expect((await api('PATCH', `/deviceattribute/${id}`, { custom: { location: 'berlin; id > INJECTED; echo' } }, manager)).status).toBe(200);
    // a row stored before the rule (or edited by hand) still holds one
    const db = t.broker.services.store.db;
    const row = await db.selectFrom('devices').select('attributes').where('device_id', '=', id).executeTakeFirstOrThrow();
    const stored = JSON.parse(row.attributes ?? '{}') as { custom?: Record<string, string> };
    stored.custom = { ...stored.custom, svc: 'app\nALL ALL=(ALL) NOPASSWD: ALL' };
    await db
      .updateTable('devices')
      .set({ attributes: JSON.stringify(stored) })
      .where('device_id', '=', id)
      .execute();

    const out = path.join(scratch, 'location.txt');
    const committed = await api('POST', '/commit', {
      action: 'commit',
      message: 'sudoers and a watcher using the location',
      changes: [
        {
          node_id: 'plant',
          formtype: 'file_distribution',
          extend: false,
          config: { files: [{ label: 'sudo', templates: [{ source: '/templates/sudoers.tpl', destination: '/etc/sudoers.d/deploy', is_template: true }] }] },
        },
        {
          node_id: 'plant',
          formtype: 'proc_watch',
          extend: false,
          config: { processes: [{ name: 'no-such-process-e2e', policy: 'Present', command: `cd "${scratch}" && echo $(location) > "${out}"` }] },
        },
      ],
    });
    expect(committed.status, JSON.stringify(committed.body)).toBe(200);

    expect(await eventually(() => fs.existsSync(out) && fs.readFileSync(out, 'utf8'), 60_000, 'the watcher’s command')).toBe('berlin; id > INJECTED; echo\n');
    expect(fs.existsSync(path.join(scratch, 'INJECTED'))).toBe(false);
    const sudoers = path.join(agent!.configRoot, 'etc/sudoers.d/deploy');
    expect(await eventually(() => fs.existsSync(sudoers) && fs.readFileSync(sudoers, 'utf8'), 60_000, 'the sudoers file')).toBe(SUDOERS);
  });
});
