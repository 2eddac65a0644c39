/**
 * Several brokers on one PostgreSQL schema: a real agent on broker A, users on broker B. Console,
 * tunnel, copy and reload across the peer link; peer authentication refused without the secret;
 * a removed device's agent cut off through NOTIFY; a killed broker (a child process, SIGKILL)
 * whose presence expires, whose relayed sessions end with a reason and whose audit is closed by
 * the survivors; a broker's restart leaving the sessions of the others open.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { PEER_PRE_AUTH_MAX_BYTES, PEER_WS_PATH, peerMac } from '../../broker/cluster/peer.js';
import { dropSchema } from '../../broker/db/database.js';
import { connectDevice, echoServer, enrolDevice, eventually, startAgent, type TestAgent } from '../support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { clusterEnv, spawnBroker } from '../support/cluster.js';
import { connectRemote, sendThroughTunnel } from '../support/remote-ws.js';

// A broker is gone after three beats unheard. At 300 ms a loaded CI machine had B take A for gone for
// a moment, and a session opened through B right then was refused as device_not_connected. B's own late
// reads no longer count against A (membership judges from reads), but A's beats can still be late by a
// second there. Nothing here waits for an expiry but the killed broker's, which allows ten beats.
const HEARTBEAT_MS = 1000;
const { schema, secret: SECRET, env: common } = clusterEnv(HEARTBEAT_MS);

let a: TestBroker;
let b: TestBroker;
let agent: TestAgent;
let device: string;
let echo: net.Server;
let echoPort: number;
let work: string;
const cleanup: Array<() => Promise<void> | void> = [];

const sha = (buf: Buffer | string) => crypto.createHash('sha256').update(buf).digest('hex');

async function audit(t: TestBroker, query: string): Promise<any[]> {
  const r = await t.api('GET', `/api/v2/commitlist?${query}`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

async function bootstrapKey(t: TestBroker): Promise<string> {
  const created = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  expect(created.status).toBe(200);
  return Object.keys(created.body)[0];
}

beforeAll(async () => {
  // One after the other: the first one creates the schema.
  a = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-a' } });
  b = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-b' } });
  agent = startAgent({ broker: a.url, bootstrapKey: await bootstrapKey(a) });
  device = await agent.waitConnected(a, 60_000);
  await eventually(() => b.broker.services.locator.isConnected(device), 10_000, 'broker B to see the agent on A');
  ({ server: echo, port: echoPort } = await echoServer());
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cluster-work-'));
});

afterAll(async () => {
  await agent?.close();
  echo?.close();
  for (const step of cleanup.reverse()) await step();
  await b?.close();
  await a?.close();
  await dropSchema(PG_URL, schema);
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('a user on broker B, the agent on broker A', () => {
  it('B reports the device connected, and only B’s hub does not hold it', async () => {
    expect(a.broker.services.agents.isConnected(device)).toBe(true);
    expect(b.broker.services.agents.isConnected(device)).toBe(false);
    const status = await b.api('GET', `/api/v2/device/${device}/status`, { token: b.adminToken });
    expect(status.status).toBe(200);
    expect(status.body).toMatchObject({ uuid: device, connected: true, remote_access: true });
  });

  it('opens a console through B, over one peer link', async () => {
    const s = connectRemote(b.url, 'console', { device_id: device, cols: 100, rows: 30 }, b.adminToken);
    await s.ready;
    s.ws.send(Buffer.from('echo "across-$((40+2))"\n'));
    await s.output('across-42');
    s.ws.send(Buffer.from('exit 0\n'));
    expect(await s.frame('exit')).toEqual({ type: 'exit', code: 0, signal: null });
    expect((await s.closed).code).toBe(1000);
    expect(b.broker.services.cluster?.links.size).toBe(1);
    expect(a.broker.services.cluster?.links.size).toBe(1);
    const [end, start] = await eventually(
      async () => {
        const entries = await audit(b, `device_id=${device}&action=console`);
        return entries[0]?.event === 'remote.console.end' && entries;
      },
      5000,
      'the end entry',
    );
    expect(start).toMatchObject({ event: 'remote.console.start', result: 'allowed' });
    expect(end).toMatchObject({ event: 'remote.console.end', ref_id: start.id, reason: 'exit 0' });
  });

  it('tunnels 20 MB through B with a matching sha256, and copies both ways', async () => {
    const s = connectRemote(b.url, 'tunnel', { device_id: device, port: echoPort, dst: '127.0.0.1' }, b.adminToken);
    await s.ready;
    const total = 20 * 1024 * 1024;
    const sent = await sendThroughTunnel(s, total);
    await s.frame('eof');
    expect((await s.closed).code).toBe(1000);
    expect(s.bytes().length).toBe(total);
    expect(sha(s.bytes())).toBe(sent);

    const content = crypto.randomBytes(2 * 1024 * 1024 + 7);
    const target = path.join(work, 'across.bin');
    const up = connectRemote(b.url, 'copy', { device_id: device, direction: 'upload', path: target, size: content.length, sha256: sha(content) }, b.adminToken);
    await up.ready;
    for (let i = 0; i < content.length; i += 64 * 1024) up.ws.send(content.subarray(i, i + 64 * 1024));
    up.ws.send(JSON.stringify({ type: 'eof' }));
    expect(await up.frame('result')).toMatchObject({ ok: true, bytes: content.length, sha256: sha(content) });
    expect(sha(fs.readFileSync(target))).toBe(sha(content));
    const down = connectRemote(b.url, 'copy', { device_id: device, direction: 'download', path: target }, b.adminToken);
    expect(await down.frame('result')).toMatchObject({ ok: true, bytes: content.length });
    expect(sha(down.bytes())).toBe(sha(content));
  });

  it("runs the agent's configuration through B (qbee's run-agent): acknowledged, the agent stays connected", async () => {
    const from = agent.logs.length;
    const r = await b.api('GET', `/api/v2/device/${device}/run-agent`, { token: b.adminToken });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    await agent.waitForLog((l) => l.msg === 'configuration run requested by the broker', 10_000, from);
    expect(agent.logs.slice(from).some((l) => l.msg.includes('reload'))).toBe(false);
  });

  it('reloads the agent through B', async () => {
    const from = agent.logs.length;
    const r = await b.api('POST', `/api/v2/remote/reload/${device}`, { token: b.adminToken, body: {} });
    expect(r.status).toBe(200);
    await agent.waitForLog((l) => l.msg.includes('reload'), 10_000, from);
  });

  it('authorization stays on B: a role without the grant is refused there and audited as denied', async () => {
    const user = await b.userWith([{ permission: 'remote-access:connect', resources: ['tag:nothing/console'] }]);
    const s = connectRemote(b.url, 'console', { device_id: device }, user.token);
    expect((await s.closed).code).toBe(4403);
    const [denied] = await audit(b, `user_id=${user.id}&result=denied`);
    expect(denied).toMatchObject({ event: 'remote.console.denied', device_id: device });
  });

  it('a device connected nowhere answers device_not_connected through the cluster as locally', async () => {
    const other = await b.addDevice();
    const s = connectRemote(b.url, 'console', { device_id: other }, b.adminToken);
    expect((await s.closed).code).toBe(4404);
    expect(s.frames.at(-1)).toMatchObject({ error: 'device_not_connected' });
  });
});

describe('peer links are for brokers holding the cluster secret', () => {
  function peerSocket(t: TestBroker): Promise<{ ws: WebSocket; challenge: any; closed: Promise<{ code: number; reason: string }> }> {
    const ws = new WebSocket(`${t.url.replace(/^http/, 'ws')}${PEER_WS_PATH}`);
    ws.on('error', () => {});
    const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
    return new Promise((resolve, reject) => {
      ws.once('message', (data) => resolve({ ws, challenge: JSON.parse(String(data)), closed }));
      ws.once('close', () => reject(new Error('closed before the challenge')));
    });
  }

  it('refuses a proof made with another secret, and a proof for another nonce (replay)', async () => {
    const wrong = await peerSocket(a);
    expect(wrong.challenge).toMatchObject({ t: 'peer_challenge', broker_id: 'broker-a' });
    const mac = peerMac('not-the-cluster-secret-but-long-enough', 'client', wrong.challenge.nonce, 'intruder', 'broker-a');
    wrong.ws.send(JSON.stringify({ t: 'peer_auth', broker_id: 'intruder', nonce: 'n', mac }));
    expect((await wrong.closed).code).toBe(4401);

    const replay = await peerSocket(a);
    const stale = peerMac(SECRET, 'client', 'an-older-nonce', 'broker-b', 'broker-a');
    replay.ws.send(JSON.stringify({ t: 'peer_auth', broker_id: 'broker-b', nonce: 'n', mac: stale }));
    expect((await replay.closed).code).toBe(4401);

    const garbage = await peerSocket(a);
    garbage.ws.send(JSON.stringify({ t: 'open', ch: 1, kind: 'console', params: { peer_device: device, cols: 80, rows: 24 } }));
    expect((await garbage.closed).code).toBe(4401);
    expect(a.broker.services.cluster?.links.size).toBe(1);
  });

  it('cuts a peer that sends too much before authenticating', async () => {
    const flood = await peerSocket(a);
    flood.ws.send(Buffer.alloc(PEER_PRE_AUTH_MAX_BYTES + 1024));
    expect([1009, 4401]).toContain((await flood.closed).code);
  });

  it('a proven peer’s channel to a device not connected there is refused, not relayed', async () => {
    const ok = await peerSocket(a);
    const nonce = 'client-nonce';
    const welcome = new Promise<any>((resolve) => ok.ws.once('message', (d) => resolve(JSON.parse(String(d)))));
    ok.ws.send(JSON.stringify({ t: 'peer_auth', broker_id: 'broker-x', nonce, mac: peerMac(SECRET, 'client', ok.challenge.nonce, 'broker-x', 'broker-a') }));
    expect(await welcome).toEqual({ t: 'peer_welcome', mac: peerMac(SECRET, 'server', nonce, 'broker-a', 'broker-x') });
    const refusals: any[] = [];
    ok.ws.on('message', (d, isBinary) => {
      if (!isBinary) refusals.push(JSON.parse(String(d)));
    });
    ok.ws.send(JSON.stringify({ t: 'open', ch: 1, kind: 'console', params: { peer_device: 'f'.repeat(64), cols: 80, rows: 24 } }));
    ok.ws.send(JSON.stringify({ t: 'open', ch: 3, kind: 'file', params: { peer_device: device, id: 'x', path: 'x', size: 1, sha256: 'x' } }));
    await eventually(() => refusals.length >= 2, 5000, 'both refusals');
    expect(refusals[0]).toMatchObject({ t: 'close', ch: 1 });
    expect(refusals[0].error).toMatch(/^agent_not_connected:/);
    expect(refusals[1]).toMatchObject({ t: 'close', ch: 3, error: 'channels of kind file are not relayed' });
    ok.ws.close();
    await ok.closed;
  });

  it('a broker outside the cluster has no peer path', async () => {
    const single = await startTestBroker({ database: 'sqlite' });
    try {
      const ws = new WebSocket(`${single.url.replace(/^http/, 'ws')}${PEER_WS_PATH}`);
      const status = await new Promise<number>((resolve) => ws.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)));
      expect(status).toBe(404);
    } finally {
      await single.close();
    }
  });
});

describe('presence moves with the device, changes reach every broker', () => {
  it('a device reconnecting to B takes over: B holds it, A’s stale connection is closed (replaced)', async () => {
    const key = await bootstrapKey(a);
    const { device: fake } = await enrolDevice(a, key);
    const onA = await connectDevice(a.url, fake);
    expect(onA.welcome).toBeDefined();
    await eventually(() => b.broker.services.locator.isConnected(fake.id), 5000, 'B to see it on A');
    // Older than the grace a brand-new connection gets (a device flapping between brokers).
    await new Promise((r) => setTimeout(r, 2500));
    const onB = await connectDevice(b.url, fake);
    expect(onB.welcome).toBeDefined();
    expect(await onA.closed).toBe(4000);
    expect(b.broker.services.agents.isConnected(fake.id)).toBe(true);
    await eventually(() => a.broker.services.cluster?.ownerOf(fake.id)?.id === 'broker-b', 5000, 'A to see it on B');
    // Read until it is B's: under load A may take B for gone for a moment (a heartbeat of 300 ms
    // late three times), remove its rows, and B writes them again at its next beat.
    const presenceOf = async () =>
      (await a.broker.services.store.db.selectFrom('agent_presence').select('broker_id').where('device_id', '=', fake.id).executeTakeFirst())?.broker_id;
    await eventually(async () => (await presenceOf()) === 'broker-b', 5000, 'A to read B’s presence row');
    onB.ws.close();
    await eventually(() => !a.broker.services.locator.isConnected(fake.id), 5000, 'A to see it gone');
  });

  it('a change made through B empties A’s caches (NOTIFY), not at expiry', async () => {
    const epoch = a.broker.services.epoch;
    const before = epoch.value;
    const r = await b.api('PUT', '/api/v2/grouptree', {
      token: b.adminToken,
      body: { changes: [{ action: 'create', data: { node_id: 'notified', parent_id: 'root', title: 'Notified' } }] },
    });
    expect(r.status).toBe(200);
    await eventually(() => epoch.value > before, 5000, 'A to invalidate');
  });
});

describe('restarts, removals and a killed broker', () => {
  it('a broker starting on the schema leaves the live sessions of the others open', async () => {
    const s = connectRemote(b.url, 'console', { device_id: device }, b.adminToken);
    await s.ready;
    const [start] = await audit(b, `device_id=${device}&event=remote.console.start`);
    const c = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-c' } });
    try {
      const ends = (await audit(b, `device_id=${device}&action=console`)).filter((e) => e.ref_id === start.id);
      expect(ends).toEqual([]);
      s.ws.send(Buffer.from('echo still-here\n'));
      await s.output('still-here');
    } finally {
      await c.close();
    }
    s.ws.close();
    await s.closed;
    await eventually(async () => (await audit(b, `device_id=${device}&action=console`)).some((e) => e.ref_id === start.id), 5000, 'the end entry');
  });

  it('a killed broker: its relayed sessions end with a reason, its presence expires, its open sessions are closed in the audit', async () => {
    const killed = await spawnBroker(common, 'broker-k');
    cleanup.push(() => killed.kill());
    const key = await bootstrapKey(b);
    const second = startAgent({ broker: killed.url, bootstrapKey: key });
    cleanup.push(() => second.close());
    const secondDevice = await second.deviceId();
    await eventually(() => b.broker.services.locator.isConnected(secondDevice), 60_000, 'broker B to see the agent on the killed broker');
    // A user on B reaches the agent on K; a user on K reaches the agent on A.
    const viaLink = connectRemote(b.url, 'console', { device_id: secondDevice }, b.adminToken);
    await viaLink.ready;
    const onKilled = connectRemote(killed.url, 'console', { device_id: device }, b.adminToken);
    await onKilled.ready;
    const [startOnKilled] = await audit(b, `device_id=${device}&event=remote.console.start`);

    killed.kill();
    const closed = await viaLink.closed;
    expect(closed.code).toBe(4502);
    expect(viaLink.frames.at(-1)).toMatchObject({ error: 'session_failed' });
    expect(viaLink.frames.at(-1).message).toMatch(/link to broker broker-k was lost/);
    const end = await eventually(async () => (await audit(b, `device_id=${secondDevice}&event=remote.console.end`))[0], 5000, 'the end entry');
    expect(end.reason).toMatch(/link to broker broker-k was lost/);

    // Presence expires: B no longer counts the agent as connected, the rows are swept.
    await eventually(() => !b.broker.services.locator.isConnected(secondDevice), 10 * HEARTBEAT_MS, 'the presence to expire');
    const status = await b.api('GET', `/api/v2/device/${secondDevice}/status`, { token: b.adminToken });
    expect(status.body).toMatchObject({ connected: false });
    const db = b.broker.services.store.db;
    await eventually(
      async () => (await db.selectFrom('cluster_brokers').select('broker_id').where('broker_id', '=', 'broker-k').execute()).length === 0,
      10_000,
      'the registration to go',
    );
    expect(await db.selectFrom('agent_presence').selectAll().where('broker_id', '=', 'broker-k').execute()).toEqual([]);
    // The session K held (user on K, agent on A) is closed in the audit by a survivor.
    const ends = (await audit(b, `device_id=${device}&event=remote.console.end`)).filter((e) => e.ref_id === startOnKilled.id);
    expect(ends).toHaveLength(1);
    expect(ends[0].reason).toBe('broker broker-k stopped (no heartbeat)');
    // …and A's agent channel of that session was cut with the link.
    await eventually(() => (a.broker.services.cluster?.links.size ?? 0) === 1, 10_000, 'A to drop its link to K');
  });

  it('a device removed through B: its agent on A is cut off (NOTIFY), and stays off', async () => {
    const key = await bootstrapKey(a);
    const third = startAgent({ broker: a.url, bootstrapKey: key });
    cleanup.push(() => third.close());
    const thirdDevice = await third.waitConnected(a, 60_000);
    await eventually(() => b.broker.services.locator.isConnected(thirdDevice), 10_000, 'B to see it');
    const removed = await b.api('DELETE', `/api/v2/removeapprovedhost/${thirdDevice}`, { token: b.adminToken });
    expect(removed.status).toBeLessThan(300);
    await eventually(() => !a.broker.services.agents.isConnected(thirdDevice), 5000, 'A to cut the agent off');
    await eventually(() => !b.broker.services.locator.isConnected(thirdDevice), 5000, 'B to see it gone');
    expect(await third.exited(20_000)).not.toBe(0);
  });
});
