import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createLogger } from '../../broker/logger.js';
import { startBroker } from '../../broker/server.js';
import { sql } from '../../broker/db/database.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connectRemote } from '../support/remote-ws.js';

let t: TestBroker;
beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

interface Entry {
  id: number;
  event: string;
  user_id: string | null;
  user_email: string | null;
  action: string;
  result: string;
  reason: string | null;
  source_ip: string | null;
  device_id: string | null;
  options: any;
  sha: string;
  message: string;
  type: string;
  created: number;
  ref_id: number | null;
}

async function entries(query: string): Promise<Entry[]> {
  const r = await t.api('GET', `/api/v2/commitlist?${query}&items_per_page=100`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

const fakeDevice = () => crypto.randomBytes(32).toString('hex');

describe('refused remote-access attempts are entries', () => {
  it('a WebSocket attempt with a bad token: denied, no user, the source address, no token text', async () => {
    const device = fakeDevice();
    const secret = `forged-${crypto.randomBytes(8).toString('hex')}`;
    const s = connectRemote(t.url, 'console', { device_id: device }, secret);
    expect((await s.closed).code).toBe(4401);
    const [entry] = await entries(`device_id=${device}`);
    expect(entry).toMatchObject({ event: 'remote.console.denied', result: 'denied', user_id: null, source_ip: '127.0.0.1' });
    expect(entry.reason).toMatch(/^token_invalid|^unauthorized|invalid/);
    expect(JSON.stringify(entry)).not.toContain(secret);
  });

  it('a reused ticket: denied with its reason, the ticket not recorded', async () => {
    const device = await t.addDevice();
    const user = await t.userWith([{ permission: 'remote-access:connect' }]);
    const { ticket } = (await t.api('POST', '/api/v2/remote/ticket', { token: user.token, body: {} })).body;
    const first = connectRemote(t.url, 'console', { device_id: device, ticket });
    await first.closed;
    const again = connectRemote(t.url, 'console', { device_id: device, ticket });
    expect((await again.closed).code).toBe(4401);
    const denied = (await entries(`device_id=${device}&result=denied`)).filter((e) => e.reason?.startsWith('invalid_ticket'));
    expect(denied).toHaveLength(1);
    expect(denied[0]).toMatchObject({ user_id: null, action: 'console' });
    expect(JSON.stringify(denied)).not.toContain(ticket);
  });

  it('a WebSocket attempt with a bad query: denied, with the user and the field', async () => {
    const device = fakeDevice();
    const user = await t.userWith([{ permission: 'remote-access:connect' }]);
    const s = connectRemote(t.url, 'tunnel', { device_id: device, proto: 'tcp', port: 99999, dst: 'localhost' }, user.token);
    expect((await s.closed).code).toBe(4400);
    const [entry] = await entries(`device_id=${device}`);
    expect(entry).toMatchObject({ event: 'remote.tunnel.denied', result: 'denied', user_id: user.id });
    expect(entry.reason).toMatch(/^invalid_request: query\.port/);
    expect(entry.options.port).toBe('99999');
  });

  it('a long device id is cut in the entry', async () => {
    const long = 'x'.repeat(5000);
    const s = connectRemote(t.url, 'console', { device_id: long });
    expect((await s.closed).code).toBe(4401);
    const list = await entries('event=remote.console.denied');
    const entry = list.find((e) => e.device_id?.startsWith('xxxx'));
    expect(entry).toBeDefined();
    expect(JSON.stringify(entry).length).toBeLessThan(2000);
  });

  it('REST reloads answered 400 and 404 are denied entries', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect' }]);
    const bad = await t.api('POST', '/api/v2/remote/reload/not-a-device', { token: user.token, body: {} });
    expect(bad.status).toBe(400);
    const [badEntry] = await entries('device_id=not-a-device');
    expect(badEntry).toMatchObject({ event: 'remote.reload.denied', result: 'denied', user_id: user.id });
    expect(badEntry.reason).toMatch(/^invalid_request/);
    const unknown = fakeDevice();
    expect((await t.api('POST', `/api/v2/remote/reload/${unknown}`, { token: user.token, body: {} })).status).toBe(404);
    const [unknownEntry] = await entries(`device_id=${unknown}`);
    expect(unknownEntry).toMatchObject({ event: 'remote.reload.denied', result: 'denied' });
    expect(unknownEntry.reason).toMatch(/not_found|no such device/);
    const anonymous = await t.api('POST', `/api/v2/remote/reload/${unknown}`, { body: {} });
    expect(anonymous.status).toBe(401);
    expect((await entries(`device_id=${unknown}`))[0]).toMatchObject({ result: 'denied', user_id: null });
  });
});

describe('refused sign-ins and changes are entries', () => {
  it('a wrong password, an unknown user and a wrong second-factor code are denied entries, without the password', async () => {
    const user = await t.userWith([]);
    expect((await t.api('POST', '/api/v2/login', { body: { email: user.email, password: 'wrong-password-x' } })).status).toBe(401);
    expect((await t.api('POST', '/api/v2/login', { body: { email: 'nobody-here@example.com', password: 'wrong-password-y' } })).status).toBe(401);
    expect((await t.api('POST', '/api/v2/challenge-verify', { body: { challenge: 'made-up', code: '123456' } })).status).toBeGreaterThanOrEqual(400);
    const list = await entries('result=denied&action=POST /api/v2/login');
    const wrong = list.find((e) => e.options.body?.email === user.email);
    expect(wrong).toMatchObject({ result: 'denied', user_id: null });
    expect(wrong?.reason).toMatch(/^invalid_credentials/);
    expect(list.find((e) => e.options.body?.email === 'nobody-here@example.com')).toBeDefined();
    expect(JSON.stringify(list)).not.toContain('wrong-password');
    const verify = await entries('action=POST /api/v2/challenge-verify');
    expect(verify[0].result).toMatch(/denied|error/);
    expect(JSON.stringify(verify)).not.toContain('123456');
  });

  it('a refused privilege escalation is a denied entry with its reason, and changes nothing', async () => {
    const manager = await t.userWith([{ permission: 'users:manage' }, { permission: 'users:read' }, { permission: 'roles:read' }]);
    const roles = await t.api('GET', '/api/v2/roleslist', { token: t.adminToken });
    const admin = roles.body.items.find((r: { builtin: boolean }) => r.builtin).id;
    const r = await t.api('PATCH', `/api/v2/user/${manager.id}`, { token: manager.token, body: { roles: [manager.roleId, admin] } });
    expect(r.status).toBe(403);
    expect(r.body.error).toBe('privilege_escalation');
    const [entry] = await entries(`user_id=${manager.id}&event=user.update`);
    expect(entry).toMatchObject({ result: 'denied', action: 'PATCH /api/v2/user/{user_id}' });
    expect(entry.reason).toMatch(/^privilege_escalation: /);
    expect(entry.options.params.user_id).toBe(manager.id);
    // Nothing of theirs succeeded but their sign-in.
    expect((await entries(`user_id=${manager.id}&result=ok`)).map((e) => e.event)).toEqual(['session.login']);
  });
});

describe('a change and its entry commit together', () => {
  it('the entry says which fields changed, before and after, secrets redacted', async () => {
    const user = await t.userWith([]);
    expect((await t.api('PATCH', `/api/v2/user/${user.id}`, { token: t.adminToken, body: { fname: 'Renamed' } })).status).toBe(200);
    const [entry] = await entries(`event=user.update&result=ok&user_id=${await adminId()}`).then((l) => l.filter((e) => e.options.params?.user_id === user.id));
    expect(entry.options.before).toEqual({ fname: 'Test' });
    expect(entry.options.after).toEqual({ fname: 'Renamed' });
    // A password change (the user's own, through the profile) shows that the hash changed, never the hash.
    const body = { current_password: user.password, new_password: 'a-new-password-9' };
    expect((await t.api('POST', '/api/v2/profile/password', { token: user.token, body })).status).toBe(204);
    const [changed] = await entries(`event=profile.password&user_id=${user.id}`);
    expect(changed.options.before).toEqual({ password_hash: '[redacted]' });
    expect(changed.options.after).toEqual({ password_hash: '[redacted]' });
    expect(JSON.stringify(changed)).not.toContain('a-new-password-9');
    expect(entry.options.body).toBeUndefined();
    expect(JSON.stringify(entry)).not.toContain('a-new-password-9');
    expect(entry.message).toContain('user.update');
    expect(entry.type).toBe('user');
    expect(Number.isInteger(entry.created)).toBe(true);
    expect(entry.sha).toMatch(/^[0-9a-f]{64}$/);
  });

  it('records before and after for devices, tags, bootstrap keys, port presets and settings, keys redacted', async () => {
    const device = await t.addDevice({ name: 'before-name' });
    const token = t.adminToken;
    expect((await t.api('PATCH', `/api/v2/deviceattribute/${device}`, { token, body: { device_name: 'after-name' } })).status).toBe(200);
    const [attributes] = await entries(`event=device.attributes.update&device_id=${device}`);
    expect(attributes.options.before.attributes).toMatchObject({ device_name: 'before-name' });
    expect(attributes.options.after.attributes).toMatchObject({ device_name: 'after-name' });

    expect((await t.api('PATCH', `/api/v2/grouptree/${device}`, { token, body: { tags: ['audited'] } })).status).toBe(200);
    const [tags] = await entries('event=device.tags.update');
    expect(tags.options).toMatchObject({ before: { tags: [] }, after: { tags: ['audited'] } });

    const key = await t.api('POST', '/api/v2/bootstrapkey', { token, body: {} });
    const secret = Object.keys(key.body)[0];
    const [created] = await entries('event=bootstrapkey.create');
    expect(created.options.before).toBeNull();
    expect(created.options.after).toMatchObject({ key_hash: '[redacted]', key_id: expect.any(String) });
    expect(JSON.stringify(created)).not.toContain(secret);

    const preset = await t.api('POST', '/api/v2/service-connect/portmap', { token, body: { target: '*', name: 'ssh-audit', port: 22 } });
    expect((await t.api('PATCH', '/api/v2/service-connect/portmap', { token, body: { id: preset.body.id, port: 2222 } })).status).toBe(200);
    const [portmap] = await entries('event=portmap.update');
    expect(portmap.options).toMatchObject({ before: { port: 22 }, after: { port: 2222 } });
    expect(Object.keys(portmap.options.after)).toEqual(['port']);
    // A record created is audited whole, as stored: who made it and when included.
    const [presetCreated] = await entries('event=portmap.create');
    expect(presetCreated.options.before).toBeNull();
    expect(presetCreated.options.after).toMatchObject({ name: 'ssh-audit', port: 22, created_by: expect.any(String), created_at: expect.any(String) });

    expect((await t.api('PUT', '/api/v2/settings/two-factor', { token, body: { enabled: true } })).status).toBe(200);
    expect((await t.api('PUT', '/api/v2/settings/two-factor', { token, body: { enabled: false } })).status).toBe(200);
    const [setting] = await entries('event=settings.two_factor');
    expect(setting.options).toMatchObject({ before: { value: { enabled: true } }, after: { value: { enabled: false } } });
  });

  it('a change whose entry cannot be written is rolled back, with no entry of success', async () => {
    const user = await t.userWith([]);
    const spy = vi.spyOn(t.broker.services.audit, 'recordChange').mockRejectedValueOnce(new Error('audit store unavailable'));
    try {
      const r = await t.api('PATCH', `/api/v2/user/${user.id}`, { token: t.adminToken, body: { fname: 'Never' } });
      expect(r.status).toBe(500);
    } finally {
      spy.mockRestore();
    }
    const record = await t.api('GET', `/api/v2/user/${user.id}`, { token: t.adminToken });
    expect(record.body.fname).toBe('Test');
    const list = (await entries('event=user.update')).filter((e) => e.options.params?.user_id === user.id);
    expect(list.map((e) => e.result)).toEqual(['error']);
  });

  it('a failed change leaves no change and an error entry (unknown role)', async () => {
    const user = await t.userWith([]);
    const r = await t.api('PATCH', `/api/v2/user/${user.id}`, { token: t.adminToken, body: { fname: 'Half', roles: [crypto.randomUUID()] } });
    expect(r.status).toBeGreaterThanOrEqual(400);
    expect((await t.api('GET', `/api/v2/user/${user.id}`, { token: t.adminToken })).body.fname).toBe('Test');
    const list = (await entries('event=user.update')).filter((e) => e.options.params?.user_id === user.id);
    expect(list.map((e) => e.result)).toEqual(['error']);
  });
});

async function adminId(): Promise<string> {
  return (await t.api('GET', '/api/v2/profile', { token: t.adminToken })).body.user_id;
}

describe('sessions open when the broker stopped', () => {
  it('are closed with reason "broker restarted" when a broker starts on the database', async () => {
    const device = await t.addDevice();
    const start = await t.broker.services.audit.recordRemoteStart({
      event: 'remote.console',
      user: { id: 'someone', email: 'someone@example.com' },
      deviceId: device,
      action: 'console',
      options: {},
      allowed: true,
      reason: 'allowed by test',
      ip: '127.0.0.1',
      source: 'api',
    });
    const again = await startBroker(t.broker.services.config, createLogger('silent'));
    await again.close();
    const list = await entries(`device_id=${device}`);
    const end = list.find((e) => e.event === 'remote.console.end');
    expect(end).toMatchObject({ ref_id: start, result: 'ended', reason: 'broker restarted' });
    expect(list.find((e) => e.id === start)).toMatchObject({ ended_at: expect.any(String) });
  });
});

/** `npm start -- audit-verify` on the test broker's database. */
function auditVerifyCli(broker: TestBroker = t): { status: number | null; out: string } {
  const config = broker.broker.services.config;
  const run = spawnSync(process.execPath, [path.resolve('node_modules/tsx/dist/cli.mjs'), 'broker/main.ts', 'audit-verify'], {
    env: { PATH: process.env.PATH, DATA_DIR: config.dataDir, DATABASE_URL: config.databaseUrl, DATABASE_SCHEMA: config.databaseSchema, LOG_LEVEL: 'silent' },
    encoding: 'utf8',
  });
  return { status: run.status, out: `${run.stdout}${run.stderr}` };
}

describe('several brokers on one database', () => {
  it('append to one chain: concurrent writers in two processes never fork it', async () => {
    const config = t.broker.services.config;
    let exited: number | null | undefined;
    const other = new Promise<number | null>((resolve) => {
      const child = spawn(
        process.execPath,
        [path.resolve('node_modules/tsx/dist/cli.mjs'), 'test/support/audit-writer.ts', config.databaseUrl, config.databaseSchema, '100'],
        {
          stdio: 'inherit',
        },
      );
      child.on('exit', (code) => resolve((exited = code)));
    });
    // This broker keeps appending for as long as the other process runs.
    let mine = 0;
    while (exited === undefined) {
      await t.broker.services.audit.recordChange({ event: 'test.concurrent', action: `this ${mine}`, options: {}, ip: '127.0.0.1' });
      mine += 1;
      // Queries on SQLite settle without I/O: let the child's exit event in.
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(await other).toBe(0);
    const total = await t.api('GET', '/api/v2/commitlist?event=test.concurrent&items_per_page=1', { token: t.adminToken });
    expect(total.body.total).toBe(mine + 100);
    expect((await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken })).body.ok).toBe(true);
  });
});

describe('the chain finds edited and deleted entries', () => {
  // Before the test below edits and deletes entries of this broker's chain (the one before it ends on an intact chain).
  it('audit-verify exits 0 on an intact chain', async () => {
    const run = auditVerifyCli();
    expect(run.out).toMatch(/Audit chain intact: \d+ entries/);
    expect(Number(/(\d+) entries/.exec(run.out)?.[1])).toBeGreaterThan(5);
    expect(run.status).toBe(0);
  });

  it('verifies intact, then names the edited entry, then the entry after a deleted one', async () => {
    const ok = await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken });
    expect(ok.body).toMatchObject({ ok: true });
    expect(ok.body.entries).toBeGreaterThan(5);
    const db = t.broker.services.store.db;
    const rows = await db.selectFrom('audit').select(['id', 'reason']).orderBy('id').execute();
    const middle = rows[Math.floor(rows.length / 2)];
    await db.updateTable('audit').set({ reason: 'nothing to see' }).where('id', '=', middle.id).execute();
    const edited = await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken });
    expect(edited.body).toMatchObject({ ok: false, first_bad: { id: Number(middle.id) } });
    await db.updateTable('audit').set({ reason: middle.reason }).where('id', '=', middle.id).execute();
    expect((await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken })).body.ok).toBe(true);
    const next = rows[Math.floor(rows.length / 2) + 1];
    await sql`delete from audit where id = ${middle.id}`.execute(db);
    const deleted = await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken });
    expect(deleted.body).toMatchObject({ ok: false, first_bad: { id: Number(next.id) } });
    expect(deleted.body.first_bad.expected).not.toBe(deleted.body.first_bad.sha);
    const cli = auditVerifyCli();
    expect(cli.status).toBe(1);
    expect(cli.out).toContain(`broken at entry ${next.id}`);
  });
});
