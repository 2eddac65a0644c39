import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { FakeAgents, type FakeAgent } from '../support/fake-agent.js';
import { connectRemote } from '../support/remote-ws.js';

let t: TestBroker;
const fakes = new FakeAgents();
let device: string;
let agent: FakeAgent;

beforeAll(async () => {
  t = await startTestBroker({ locator: fakes.locator });
  device = await t.addDevice({ tags: ['rec'], name: 'recorded-one' });
  agent = await fakes.attach(device, t.dataDir);
});

afterAll(async () => {
  await agent?.close();
  await t?.close();
});

const recordings = () => path.join(t.dataDir, 'recordings');

async function startEntries() {
  const r = await t.api('GET', `/api/v2/commitlist?device_id=${device}&action=console`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return (r.body.items as any[]).filter((e) => e.event !== 'remote.console.end');
}

/** A user whose one role grants the console, with that role's recording setting set through the API. */
async function consoleUser(recording?: 'default' | 'off' | 'required') {
  const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:rec/console'] }]);
  if (recording) {
    const role = await t.api('GET', `/api/v2/role/${user.roleId}`, { token: t.adminToken });
    expect(role.body.recording).toBe('default');
    const put = await t.api('PUT', `/api/v2/role/${user.roleId}`, { token: t.adminToken, body: { ...role.body, recording } });
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body.recording).toBe(recording);
    // The change's audit entry says what changed.
    const audit = await t.api('GET', '/api/v2/commitlist?event=role.replace&result=ok', { token: t.adminToken });
    const entry = (audit.body.items as any[]).find((e) => JSON.stringify(e.options).includes(user.roleId));
    expect(entry?.options.after).toMatchObject({ recording });
    // Sent without the field (an older client), the setting stays.
    const again = await t.api('PUT', `/api/v2/role/${user.roleId}`, { token: t.adminToken, body: { name: role.body.name, policies: role.body.policies } });
    expect(again.body.recording).toBe(recording);
  }
  return user.token;
}

function parseCast(text: string) {
  const [header, ...lines] = text.trim().split('\n');
  return { header: JSON.parse(header), events: lines.map((l) => JSON.parse(l) as [number, string, string]) };
}

describe('console recordings', () => {
  it('records output and resizes as asciicast v2, not keystrokes, and links the recording from the audit start entry', async () => {
    const token = await consoleUser();
    const s = connectRemote(t.url, 'console', { device_id: device, cols: 90, rows: 20 }, token);
    await s.ready;
    const [live] = (await t.api('GET', '/api/v2/remote/sessions', { token: t.adminToken })).body.items;
    s.ws.send(Buffer.from('stty -echo; echo "echo-off-$((1+1))"\n'));
    await s.output('echo-off-2');
    s.ws.send(JSON.stringify({ type: 'resize', cols: 120, rows: 40 }));
    // With echo off, what is typed never comes back as output: only the command's result does.
    s.ws.send(Buffer.from('echo "hidden-$((40+2))"; echo "later-$((50+1))"\n'));
    await s.output('later-51');
    s.ws.send(Buffer.from('exit\n'));
    await s.closed;

    const file = path.join(recordings(), `${live.id}.cast`);
    await expect.poll(() => fs.existsSync(file) && fs.readFileSync(file, 'utf8').includes('later-51')).toBe(true);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    expect(fs.statSync(recordings()).mode & 0o777).toBe(0o700);
    const { header, events } = parseCast(fs.readFileSync(file, 'utf8'));
    expect(header).toMatchObject({ version: 2, width: 90, height: 20, timestamp: expect.any(Number) });
    const output = events.filter((e) => e[1] === 'o');
    expect(output.length).toBeGreaterThan(0);
    for (let i = 1; i < events.length; i += 1) expect(events[i][0]).toBeGreaterThanOrEqual(events[i - 1][0]);
    expect(events.some((e) => e[1] === 'r' && e[2] === '120x40')).toBe(true);
    const printed = output.map((e) => e[2]).join('');
    expect(printed).toContain('hidden-42');
    expect(printed).not.toContain('hidden-$((40+2))');

    const [entry] = await startEntries();
    expect(entry.options).toMatchObject({ recording: live.id });

    // audit:read alone does not read a root console's output: 403, and the attempt is an entry.
    const reader = await t.userWith([{ permission: 'audit:read' }]);
    const refused = await t.api('GET', `/api/v2/remote/recordings/${live.id}`, { token: reader.token });
    expect(refused.status).toBe(403);
    expect(refused.body).toMatchObject({ code: 403, error: 'forbidden' });
    expect(JSON.stringify(refused.body)).not.toContain('hidden-42');
    const reads = async () =>
      ((await t.api('GET', `/api/v2/commitlist?event=recording.read&items_per_page=100`, { token: t.adminToken })).body.items as any[]).filter(
        (e) => e.options.session_id === live.id,
      );
    expect((await reads()).find((e) => e.user_id === reader.id)).toMatchObject({ result: 'denied', device_id: device });
    // Nor does remote-access:manage on other devices.
    const elsewhere = await t.tokenWith([{ permission: 'remote-access:manage', resources: ['tag:other'] }]);
    expect((await t.api('GET', `/api/v2/remote/recordings/${live.id}`, { token: elsewhere })).status).toBe(403);

    // The console's owner reads it, and the read is an entry.
    const served = await t.api('GET', `/api/v2/remote/recordings/${live.id}`, { token });
    expect(served.status).toBe(200);
    expect(served.headers.get('content-type')).toContain('application/x-asciicast');
    expect(JSON.stringify(served.body)).toContain('hidden-42');
    // So does a manager of remote access on the device.
    const manager = await t.userWith([{ permission: 'remote-access:manage', resources: ['tag:rec'] }]);
    expect((await t.api('GET', `/api/v2/remote/recordings/${live.id}`, { token: manager.token })).status).toBe(200);
    const ok = (await reads()).filter((e) => e.result === 'ok');
    expect(ok.map((e) => e.user_id)).toContain(manager.id);
    expect(ok.find((e) => e.user_id === manager.id)).toMatchObject({ device_id: device, action: 'GET /api/v2/remote/recordings/{session_id}' });
    expect(ok).toHaveLength(2);
    expect((await t.api('GET', `/api/v2/remote/recordings/00000000-0000-4000-8000-000000000000`, { token: manager.token })).status).toBe(404);
    expect((await t.api('GET', `/api/v2/remote/recordings/..%2Ffleet.sqlite`, { token: manager.token })).status).toBe(404);
  });

  it('lists a recording to its owner and to remote-access:manage on its device only, newest first, with its duration', async () => {
    const owner = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:rec/console'] }]);
    const s = connectRemote(t.url, 'console', { device_id: device }, owner.token);
    await s.ready;
    const [live] = (await t.api('GET', '/api/v2/remote/sessions', { token: t.adminToken })).body.items;
    s.ws.send(Buffer.from('exit\n'));
    await s.closed;
    const listed = async (token: string, query = '') => {
      const r = await t.api('GET', `/api/v2/remote/recordings${query}`, { token });
      expect(r.status).toBe(200);
      return r.body as { items: any[]; total: number };
    };
    const own = await listed(owner.token);
    expect(own.items.map((i) => i.id)).toEqual([live.id]);
    await expect.poll(async () => (await listed(owner.token)).items[0].duration_ms).toEqual(expect.any(Number));
    expect((await listed(owner.token)).items[0]).toMatchObject({ user: { id: owner.id, email: owner.email }, device: { id: device, name: 'recorded-one' } });
    const manager = await t.tokenWith([{ permission: 'remote-access:manage', resources: ['tag:rec'] }]);
    expect((await listed(manager, `?device_id=${device}`)).items.map((i) => i.id)).toContain(live.id);
    // Not to another console user, nor to a manager of other devices, nor to audit:read.
    for (const token of [
      await t.tokenWith([{ permission: 'remote-access:connect', resources: ['tag:rec/console'] }]),
      await t.tokenWith([{ permission: 'remote-access:manage', resources: ['tag:other'] }]),
      await t.tokenWith([{ permission: 'audit:read' }]),
    ]) {
      expect((await listed(token)).items.map((i) => i.id)).not.toContain(live.id);
    }
    expect((await t.api('GET', '/api/v2/remote/recordings?device_id=nope', { token: manager })).status).toBe(400);
  });

  it('records a root console when a role requiring recording grants it as root, whatever a wider role with recording off says', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:rec/console'] }]);
    const db = t.broker.services.store.db;
    await db.updateTable('roles').set({ recording: 'off' }).where('id', '=', user.roleId).execute();
    const rootRole = crypto.randomUUID();
    const now = new Date().toISOString();
    await db
      .insertInto('roles')
      .values({
        id: rootRole,
        name: `root-${rootRole}`,
        description: '',
        policies: JSON.stringify([{ permission: 'remote-access:connect', resources: ['tag:rec/console(user=root)'] }]),
        recording: 'required',
        builtin: 0,
        created_at: now,
        created_by: null,
        updated_at: now,
        updated_by: null,
      })
      .execute();
    await db.insertInto('user_roles').values({ user_id: user.id, role_id: rootRole }).execute();
    const s = connectRemote(t.url, 'console', { device_id: device, user: 'root' }, user.token);
    await s.ready;
    s.ws.send(Buffer.from('exit\n'));
    await s.closed;
    const [entry] = await startEntries();
    expect(entry).toMatchObject({ user_id: user.id, result: 'allowed' });
    expect(entry.options).toMatchObject({ user: 'root', recording: expect.any(String) });
    expect(fs.existsSync(path.join(recordings(), `${entry.options.recording}.cast`))).toBe(true);
  });

  it('does not record when every role granting the console turns recording off', async () => {
    const token = await consoleUser('off');
    const before = fs.existsSync(recordings()) ? fs.readdirSync(recordings()).length : 0;
    const s = connectRemote(t.url, 'console', { device_id: device }, token);
    await s.ready;
    s.ws.send(Buffer.from('exit\n'));
    await s.closed;
    expect(fs.existsSync(recordings()) ? fs.readdirSync(recordings()).length : 0).toBe(before);
    const [entry] = await startEntries();
    expect(entry.options.recording).toBeUndefined();
  });

  it('refuses a console whose recording is required when it cannot be written, and audits the refusal', async () => {
    const token = await consoleUser('required');
    // The recordings folder replaced by a file: nothing can be created there, whoever the broker runs as.
    fs.rmSync(recordings(), { recursive: true, force: true });
    fs.writeFileSync(recordings(), 'not a folder');
    try {
      const s = connectRemote(t.url, 'console', { device_id: device }, token);
      const closed = await s.closed;
      expect(closed.code).toBe(4503);
      expect(s.frames[0]).toMatchObject({ type: 'error', code: 503, error: 'recording_unavailable' });
      const [entry] = await startEntries();
      expect(entry).toMatchObject({ result: 'denied' });
      expect(entry.reason).toContain('recording is required');
      // A role leaving recording at its default still gets the console, unrecorded.
      const relaxed = connectRemote(t.url, 'console', { device_id: device }, await consoleUser());
      await relaxed.ready;
      relaxed.ws.close();
      await relaxed.closed;
    } finally {
      fs.rmSync(recordings(), { force: true });
    }
  });

  it('rejects an unknown recording setting on a role', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect' }]);
    const role = await t.api('GET', `/api/v2/role/${user.roleId}`, { token: t.adminToken });
    const put = await t.api('PUT', `/api/v2/role/${user.roleId}`, { token: t.adminToken, body: { ...role.body, recording: 'sometimes' } });
    expect(put.status).toBe(400);
  });

  it('removes recordings older than RECORDING_RETENTION_DAYS and keeps newer ones', async () => {
    fs.mkdirSync(recordings(), { recursive: true, mode: 0o700 });
    const old = path.join(recordings(), '11111111-1111-4111-8111-111111111111.cast');
    const fresh = path.join(recordings(), '22222222-2222-4222-8222-222222222222.cast');
    fs.writeFileSync(old, '{}\n');
    fs.writeFileSync(fresh, '{}\n');
    const days = t.broker.services.config.recordingRetentionDays;
    expect(days).toBe(90);
    const longAgo = new Date(Date.now() - (days + 1) * 86_400_000);
    fs.utimesSync(old, longAgo, longAgo);
    expect(t.broker.services.remote.removeOldRecordings()).toBeGreaterThanOrEqual(1);
    expect(fs.existsSync(old)).toBe(false);
    expect(fs.existsSync(fresh)).toBe(true);
  });
});
