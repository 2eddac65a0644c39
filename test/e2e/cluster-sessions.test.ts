/**
 * Several brokers on one PostgreSQL schema, what an operator sees and does: the live sessions of
 * every broker listed (and ended) through any broker, the device event stream reporting agents of
 * the other brokers, a detached console's re-attach through the wrong broker refused clearly, and
 * a disabled user, a withdrawn grant and a removed device ending a live console held by another
 * broker than the one the change was made through.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processGone } from '../../agent/sessions/process.js';
import { dropSchema } from '../../broker/db/database.js';
import { connectDevice, enrolDevice, eventually, startAgent, type TestAgent } from '../support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { clusterEnv } from '../support/cluster.js';
import { connectRemote, type RecordedSession } from '../support/remote-ws.js';

const HEARTBEAT_MS = 300;
const { schema, env: common } = clusterEnv(HEARTBEAT_MS);

let a: TestBroker;
let b: TestBroker;
const agents: TestAgent[] = [];
let device: string;

async function bootstrapKey(t: TestBroker): Promise<string> {
  const created = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  expect(created.status).toBe(200);
  return Object.keys(created.body)[0];
}

async function agentOnA(): Promise<string> {
  const agent = startAgent({ broker: a.url, bootstrapKey: await bootstrapKey(a) });
  agents.push(agent);
  const id = await agent.waitConnected(a, 60_000);
  await eventually(() => b.broker.services.locator.isConnected(id), 10_000, 'broker B to see the agent on A');
  return id;
}

async function sessionsOn(t: TestBroker, token: string): Promise<any[]> {
  const r = await t.api('GET', '/api/v2/remote/sessions', { token });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.items;
}

/** A console through B, its output checked, and its session id (from the ready frame). */
async function consoleOnB(token: string, deviceId = device): Promise<{ s: RecordedSession; id: string }> {
  const s = connectRemote(b.url, 'console', { device_id: deviceId }, token);
  await s.ready;
  s.ws.send(Buffer.from('echo "live-$((20+22))"\n'));
  await s.output('live-42');
  const ready = s.frames.find((f) => f.type === 'ready');
  expect(ready.session).toMatch(/^[0-9a-f-]+$/);
  return { s, id: ready.session };
}

beforeAll(async () => {
  a = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-a' } });
  b = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-b' } });
  device = await agentOnA();
});

afterAll(async () => {
  for (const agent of agents) await agent.close();
  await b?.close();
  await a?.close();
  await dropSchema(PG_URL, schema);
});

describe('live sessions of every broker', () => {
  it('A lists a console held by B, with the same visibility rules, and its bytes as of B’s last heartbeat', async () => {
    const owner = await b.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
    const stranger = await a.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
    const { s, id } = await consoleOnB(owner.token);
    try {
      const listed = await eventually(async () => (await sessionsOn(a, a.adminToken)).find((x) => x.id === id && x.bytes_out > 0), 10_000, 'the session on A');
      expect(listed).toMatchObject({
        user: { id: owner.id, email: owner.email },
        device: { id: device },
        kind: 'console',
        broker: 'broker-b',
        can_end: true,
        can_watch: false,
        attached: true,
      });
      expect(listed.device.name).not.toBe('');
      // Its owner sees it through A too; another user without remote-access:manage does not.
      expect((await sessionsOn(a, owner.token)).map((x) => x.id)).toEqual([id]);
      expect((await sessionsOn(a, stranger.token)).map((x) => x.id)).not.toContain(id);
      // B lists it as its own.
      expect((await sessionsOn(b, b.adminToken)).find((x) => x.id === id)).toMatchObject({ broker: 'broker-b' });
    } finally {
      s.ws.close(1000);
      await s.closed;
    }
    await eventually(async () => !(await sessionsOn(a, a.adminToken)).some((x) => x.id === id), 10_000, 'the ended session to leave A’s list');
  });

  it('a row left by a broker that is not alive is neither listed nor ended', async () => {
    const id = '0badc0de-0000-4000-8000-000000000001';
    const now = Date.now();
    await a.broker.services.store.db
      .insertInto('live_sessions')
      .values({
        session_id: id,
        broker_id: 'broker-gone',
        user_id: 'u',
        user_email: 'gone@example.com',
        device_id: device,
        kind: 'console',
        source: 'api',
        ip: '127.0.0.1',
        started_at: now,
        bytes_in: 0,
        bytes_out: 0,
        attached: 1,
        watchers: '[]',
        request: '{"action":"console"}',
        updated_at: now,
      })
      .execute();
    expect((await sessionsOn(a, a.adminToken)).some((x) => x.id === id)).toBe(false);
    expect((await a.api('DELETE', `/api/v2/remote/sessions/${id}`, { token: a.adminToken })).status).toBe(404);
  });

  it('DELETE through A ends a session held by B: 404 for an unknown id, 403 without remote-access:manage, then the end audited by B', async () => {
    const owner = await b.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
    const { s, id } = await consoleOnB(owner.token);
    await eventually(async () => (await sessionsOn(a, a.adminToken)).some((x) => x.id === id), 10_000, 'the session on A');

    expect((await a.api('DELETE', `/api/v2/remote/sessions/${'0'.repeat(8)}-0000-0000-0000-${'0'.repeat(12)}`, { token: a.adminToken })).status).toBe(404);
    const connectOnly = await a.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
    expect((await a.api('DELETE', `/api/v2/remote/sessions/${id}`, { token: connectOnly.token })).status).toBe(403);
    const otherDevices = await a.userWith([{ permission: 'remote-access:manage', resources: ['tag:nothing'] }]);
    expect((await a.api('DELETE', `/api/v2/remote/sessions/${id}`, { token: otherDevices.token })).status).toBe(403);
    s.ws.send(Buffer.from('echo still-open\n'));
    await s.output('still-open');
    // The console's shell on the device (the agent runs on this machine).
    s.ws.send(Buffer.from('echo "shell-pid-$$-"\n'));
    const shellPid = Number(/shell-pid-(\d+)-/.exec(await s.output(/shell-pid-\d+-/))?.[1]);
    expect(processGone(shellPid)).toBe(false);

    const ended = await a.api('DELETE', `/api/v2/remote/sessions/${id}`, { token: a.adminToken });
    expect(ended.status).toBe(204);
    expect((await s.closed).code).toBe(4403);
    expect(s.frames.at(-1)).toMatchObject({ error: 'session_ended' });
    // The end reached the agent on A (through B, the session's broker): its shell is gone.
    await eventually(() => processGone(shellPid), 10_000, 'the console’s shell to end on the device');
    const end = await eventually(
      async () => {
        const r = await b.api('GET', `/api/v2/commitlist?device_id=${device}&event=remote.console.end`, { token: b.adminToken });
        return r.body.items.find((e: any) => e.reason?.startsWith('ended by '));
      },
      10_000,
      'the end entry',
    );
    expect(end.reason).toMatch(/^ended by admin/i);
    expect((await sessionsOn(a, a.adminToken)).some((x) => x.id === id)).toBe(false);
  });

  it('a detached console held by B cannot be re-attached through A: 409 naming B for its owner, 404 for others', async () => {
    const owner = await b.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
    const { s, id } = await consoleOnB(owner.token);
    s.ws.close(4000);
    await s.closed;
    await eventually(async () => (await sessionsOn(a, a.adminToken)).find((x) => x.id === id && x.attached === false), 10_000, 'the detached console on A');

    const viaA = connectRemote(a.url, 'console', { attach: id }, owner.token);
    expect((await viaA.closed).code).toBe(4409);
    expect(viaA.frames.at(-1)).toMatchObject({ error: 'session_on_other_broker', broker: 'broker-b' });
    const other = await a.userWith([{ permission: 'remote-access:connect', resources: ['*/console'] }]);
    const strangerViaA = connectRemote(a.url, 'console', { attach: id }, other.token);
    expect((await strangerViaA.closed).code).toBe(4404);

    // Through B it re-attaches as always.
    const viaB = connectRemote(b.url, 'console', { attach: id }, owner.token);
    await viaB.ready;
    viaB.ws.send(Buffer.from('exit 0\n'));
    expect(await viaB.frame('exit')).toMatchObject({ code: 0 });
    await viaB.closed;
  });
});

describe('the device event stream reports the agents of every broker', () => {
  interface Stream {
    text: () => string;
    until: (needle: string) => Promise<void>;
    close: () => void;
  }
  function openStream(t: TestBroker, token: string): Promise<Stream> {
    return new Promise((resolve, reject) => {
      const req = http.get(`${t.url}/api/v2/events`, { headers: { authorization: `Bearer ${token}` } }, (res) => {
        expect(res.statusCode).toBe(200);
        let text = '';
        const waiters: (() => void)[] = [];
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
          waiters.splice(0).forEach((w) => w());
        });
        res.on('error', () => {});
        resolve({
          text: () => text,
          until: (needle) =>
            new Promise<void>((done) => {
              const check = () => (text.includes(needle) ? done() : waiters.push(check));
              check();
            }),
          close: () => req.destroy(),
        });
      });
      req.on('error', reject);
    });
  }

  it('a stream on B gets online and offline of an agent on A; a user who may not read the device gets neither', async () => {
    const { device: fake } = await enrolDevice(a, await bootstrapKey(a));
    const reader = await openStream(b, b.adminToken);
    const blind = await b.userWith([{ permission: 'device:read', resources: ['tag:nothing'] }]);
    const blindStream = await openStream(b, blind.token);
    try {
      const onA = await connectDevice(a.url, fake);
      expect(onA.welcome).toBeDefined();
      await reader.until(`"event":"device.online","device_id":"${fake.id}"`);
      onA.ws.close();
      await reader.until(`"event":"device.offline","device_id":"${fake.id}"`);
      // The blind stream saw neither (events go out in order: one after the reader's offline would be there by now).
      const again = await connectDevice(a.url, fake);
      await reader.until(`"event":"device.online","device_id":"${fake.id}","at"`);
      again.ws.close();
      await eventually(() => reader.text().split(`"device.offline","device_id":"${fake.id}"`).length === 3, 10_000, 'the second offline');
      expect(blindStream.text()).not.toContain(fake.id);
    } finally {
      reader.close();
      blindStream.close();
    }
  });
});

describe('changes made through A end live sessions held by B', () => {
  async function ends(s: RecordedSession): Promise<{ code: number; error: string }> {
    const { code } = await s.closed;
    return { code, error: s.frames.at(-1)?.error };
  }

  it('a user disabled through A: their console on B ends', async () => {
    const user = await b.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
    const { s } = await consoleOnB(user.token);
    const r = await a.api('PATCH', `/api/v2/user/${user.id}`, { token: a.adminToken, body: { disabled: true } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const end = await ends(s);
    expect(end.code).toBeGreaterThanOrEqual(4000);
    expect(end.code).not.toBe(4502);
  });

  it('a grant withdrawn through A (the role’s policies replaced): the console on B ends with access_withdrawn', async () => {
    const user = await b.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
    const { s } = await consoleOnB(user.token);
    const role = await a.api('GET', `/api/v2/role/${user.roleId}`, { token: a.adminToken });
    expect(role.status).toBe(200);
    const r = await a.api('PUT', `/api/v2/role/${user.roleId}`, {
      token: a.adminToken,
      body: { name: role.body.name, policies: [{ permission: 'device:read' }] },
    });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(await ends(s)).toMatchObject({ code: 4403, error: 'access_withdrawn' });
  });

  it('a device removed through A: the console on B to its agent on A ends', async () => {
    const removable = await agentOnA();
    const user = await b.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
    const { s } = await consoleOnB(user.token, removable);
    const r = await a.api('DELETE', `/api/v2/removeapprovedhost/${removable}`, { token: a.adminToken });
    expect(r.status).toBeLessThan(300);
    const end = await ends(s);
    expect(end.code).toBeGreaterThanOrEqual(4000);
    await eventually(() => !b.broker.services.locator.isConnected(removable), 10_000, 'B to see it gone');
  });
});
