/**
 * The production layout with real parts: three broker processes on one PostgreSQL schema with
 * CLUSTER_SECRET, HAProxy in front (deploy/haproxy.cfg, rendered with this test's ports), real
 * agents connecting through HAProxy. Users on other brokers than the agents' reach them (console,
 * tunnel, copy); then the broker holding an agent is killed (SIGKILL): the agent comes back through
 * HAProxy on a survivor and is reachable again, the sessions of the dead broker end with a reason
 * and their audit is closed by a survivor, and nothing saved is lost. Last, a broker stopped with
 * SIGTERM drains (SHUTDOWN_DRAIN_MS): its health check fails, HAProxy marks it down, its agent moves.
 * The agents retry within 50–400 ms (startAgent's backoff bounds), jittered as in production.
 *
 * WebSockets carry the bearer token (Authorization header), valid on every broker (shared
 * JWT_SECRET); a remote-access ticket is only redeemable on the broker that issued it until the
 * tickets move into the database.
 */
import type { ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { dropSchema } from '../../broker/db/database.js';
import { echoServer, eventually, startAgent, type TestAgent } from '../support/agent.js';
import { ADMIN, PG_URL } from '../support/broker.js';
import { clusterEnv, spawnBroker, type BrokerProcess } from '../support/cluster.js';
import { startHaproxy } from '../support/haproxy.js';
import { connectRemote, remoteUrl } from '../support/remote-ws.js';

const HEARTBEAT_MS = 300;
const { schema, env: common } = clusterEnv(HEARTBEAT_MS);
// A stopped broker keeps serving 4 s with its health check failing (far more than HAProxy needs to see it).
const env = { ...common, ADMIN_EMAIL: ADMIN.email, ADMIN_PASSWORD: ADMIN.password, TRUST_PROXY: 'true', SHUTDOWN_DRAIN_MS: '4000', FILE_STORE: 'db' };
const IDS = ['ha-1', 'ha-2', 'ha-3'];

const brokers = new Map<string, BrokerProcess>();
let haproxy: ChildProcess | undefined;
let haproxyLog: string[] = [];
let lb: string;
let token: string;
let db: pg.Client;
let work: string;
let echo: net.Server;
let echoPort: number;
const agents: TestAgent[] = [];
/** the agents' device ids, in the order of `agents` */
const devices: string[] = [];

const sha = (buf: Buffer | string) => crypto.createHash('sha256').update(buf).digest('hex');

/** Attempts of a call that is safe to repeat, when the connection fails under it (a broker dying at failover). */
const SAFE_ATTEMPTS = 5;

/**
 * fetch, sent again when the connection fails before an answer (`fetch failed`: HAProxy closing a
 * kept-alive connection to a broker that just died): what a client of a cluster does with calls that
 * are safe to repeat (reads, a sign-in). Bounded; an answer, whatever its status, is returned as is.
 */
async function fetchSafe(url: string, init: RequestInit = {}): Promise<Response> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fetch(url, init);
    } catch (err) {
      if (attempt >= SAFE_ATTEMPTS) throw err;
      await new Promise((r) => setTimeout(r, 100 * attempt));
    }
  }
}

async function api(base: string, method: string, p: string, o: { body?: unknown; token?: string; headers?: Record<string, string>; safe?: boolean } = {}) {
  const headers: Record<string, string> = { ...o.headers };
  if (o.token ?? token) headers.authorization = `Bearer ${o.token ?? token}`;
  let body: BodyInit | undefined;
  if (o.body instanceof FormData) body = o.body;
  else if (o.body !== undefined) {
    headers['content-type'] = 'application/json';
    body = JSON.stringify(o.body);
  }
  const safe = o.safe ?? (method === 'GET' || method === 'HEAD');
  const res =
    safe && !(body instanceof FormData) ? await fetchSafe(`${base}${p}`, { method, headers, body }) : await fetch(`${base}${p}`, { method, headers, body });
  const text = await res.text();
  return { status: res.status, body: (res.headers.get('content-type') ?? '').includes('json') && text ? JSON.parse(text) : text };
}

/** Which broker holds each device's agent, as the cluster records it. */
async function presence(): Promise<Map<string, string>> {
  const r = await db.query<{ device_id: string; broker_id: string }>(`select device_id, broker_id from "${schema}".agent_presence`);
  return new Map(r.rows.map((row) => [row.device_id, row.broker_id]));
}

async function audit(base: string, query: string): Promise<any[]> {
  const r = await api(base, 'GET', `/api/v2/commitlist?${query}`);
  expect(r.status).toBe(200);
  return r.body.items;
}

/** A console through `base` to the device, proving it answers. */
async function consoleRoundTrip(base: string, device: string, word: string): Promise<void> {
  // Opening is safe to try again: a console that never became ready holds nothing (bounded).
  let s = connectRemote(base, 'console', { device_id: device, cols: 100, rows: 30 }, token);
  for (let attempt = 1; ; attempt++) {
    try {
      await s.ready;
      break;
    } catch (err) {
      if (attempt >= SAFE_ATTEMPTS) throw err;
      s.ws.terminate();
      await new Promise((r) => setTimeout(r, 100 * attempt));
      s = connectRemote(base, 'console', { device_id: device, cols: 100, rows: 30 }, token);
    }
  }
  s.ws.send(Buffer.from(`echo "${word}-$((40+2))"\n`));
  await s.output(`${word}-42`);
  s.ws.send(Buffer.from('exit 0\n'));
  expect(await s.frame('exit')).toEqual({ type: 'exit', code: 0, signal: null });
  expect((await s.closed).code).toBe(1000);
}

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-ha-'));
  // The first one creates the schema and the first user; the others join it.
  brokers.set(IDS[0], await spawnBroker(env, IDS[0]));
  const rest = await Promise.all(IDS.slice(1).map((id) => spawnBroker(env, id)));
  rest.forEach((b, i) => brokers.set(IDS[i + 1], b));

  const hostPort = (id: string) => new URL((brokers.get(id) as BrokerProcess).url).host;
  const balancer = await startHaproxy(work, IDS.map(hostPort));
  ({ url: lb, process: haproxy, log: haproxyLog } = balancer);

  // Through HAProxy the health route answers from every broker in turn (leastconn, all idle).
  const seen = new Set<string>();
  await eventually(
    async () => {
      if (haproxy?.exitCode !== null) throw new Error(`haproxy exited: ${haproxyLog.join('')}`);
      const r = await fetch(`${lb}/api/v2/health`).catch(() => undefined);
      if (r?.status === 200) seen.add(((await r.json()) as { broker_id: string }).broker_id);
      return seen.size === 3;
    },
    30_000,
    'HAProxy to send to all three brokers',
  );

  db = new pg.Client({ connectionString: PG_URL });
  await db.connect();
  const login = await api(lb, 'POST', '/api/v2/login', { body: { email: ADMIN.email, password: ADMIN.password }, token: '' });
  expect(login.status).toBe(200);
  token = login.body.token;

  const key = await api(lb, 'POST', '/api/v2/bootstrapkey', { body: { auto_accept: true } });
  expect(key.status).toBe(200);
  const bootstrapKey = Object.keys(key.body)[0];
  // One after the other: leastconn sends the second to a broker without an agent.
  for (let i = 0; i < 2; i++) {
    const agent = startAgent({ broker: lb, bootstrapKey });
    agents.push(agent);
    const id = await agent.deviceId(60_000);
    devices.push(id);
    await eventually(async () => (await presence()).has(id), 60_000, `agent ${i} to be present`);
  }
  ({ server: echo, port: echoPort } = await echoServer());
}, 110_000);

afterAll(async () => {
  for (const a of agents) await a.close();
  echo?.close();
  if (haproxy && haproxy.exitCode === null) {
    haproxy.kill('SIGTERM');
    await new Promise((resolve) => haproxy?.once('exit', resolve));
  }
  for (const b of brokers.values()) b.kill();
  await db?.end();
  await dropSchema(PG_URL, schema);
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('three brokers behind HAProxy', () => {
  it('agents that connected through HAProxy landed on different brokers', async () => {
    const owners = await presence();
    const where = devices.map((d) => owners.get(d));
    expect(where.every((b) => b && IDS.includes(b))).toBe(true);
    expect(new Set(where).size).toBe(2);
  });

  it('HAProxy writes X-Forwarded-For itself: a client cannot choose its address in the audit', async () => {
    const role = (name: string, base: string, forwardedFor: string) =>
      api(base, 'POST', '/api/v2/role', {
        headers: { 'x-forwarded-for': forwardedFor },
        body: { name, policies: [{ permission: 'device:read', resources: ['*'] }] },
      });
    expect((await role('ha-direct', (brokers.get(IDS[0]) as BrokerProcess).url, '203.0.113.7')).status).toBe(201);
    expect((await role('ha-proxied', lb, '203.0.113.8')).status).toBe(201);
    const entries = await audit(lb, 'event=role.create&items_per_page=20');
    const viaDirect = entries.find((e) => JSON.stringify(e).includes('ha-direct'));
    const viaLb = entries.find((e) => JSON.stringify(e).includes('ha-proxied'));
    // TRUST_PROXY is on: straight to a broker the header is believed; through HAProxy it is replaced.
    expect(viaDirect.source_ip).toBe('203.0.113.7');
    expect(viaLb.source_ip).not.toBe('203.0.113.8');
    expect(viaLb.source_ip).toMatch(/127\.0\.0\.1$/);
  });

  it('users on the other brokers reach each agent: console, tunnel and copy', async () => {
    const owners = await presence();
    for (const device of devices) {
      const others = IDS.filter((id) => id !== owners.get(device));
      // Straight to a broker that does not hold the agent (the peer link), and through HAProxy.
      await consoleRoundTrip((brokers.get(others[0]) as BrokerProcess).url, device, 'across');
      await consoleRoundTrip(lb, device, 'via-lb');

      const tunnelBase = (brokers.get(others[1]) as BrokerProcess).url;
      const t = connectRemote(tunnelBase, 'tunnel', { device_id: device, port: echoPort, dst: '127.0.0.1' }, token);
      await t.ready;
      const payload = crypto.randomBytes(3 * 1024 * 1024 + 11);
      for (let i = 0; i < payload.length; i += 64 * 1024) t.ws.send(payload.subarray(i, i + 64 * 1024));
      t.ws.send(JSON.stringify({ type: 'eof' }));
      await t.frame('eof');
      expect((await t.closed).code).toBe(1000);
      expect(sha(t.bytes())).toBe(sha(payload));

      const content = crypto.randomBytes(1024 * 1024 + 3);
      const target = path.join(work, `copy-${device.slice(0, 8)}.bin`);
      const up = connectRemote(lb, 'copy', { device_id: device, direction: 'upload', path: target, size: content.length, sha256: sha(content) }, token);
      await up.ready;
      for (let i = 0; i < content.length; i += 64 * 1024) up.ws.send(content.subarray(i, i + 64 * 1024));
      up.ws.send(JSON.stringify({ type: 'eof' }));
      expect(await up.frame('result')).toMatchObject({ ok: true, bytes: content.length, sha256: sha(content) });
      const down = connectRemote((brokers.get(others[0]) as BrokerProcess).url, 'copy', { device_id: device, direction: 'download', path: target }, token);
      expect(await down.frame('result')).toMatchObject({ ok: true, bytes: content.length });
      expect(sha(down.bytes())).toBe(sha(content));
    }
  });

  it('a browser kept on one broker by HAProxy’s cookie redeems its remote-access tickets there', async () => {
    let cookie: string | undefined;
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${lb}/api/v2/remote/ticket`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...(cookie ? { cookie } : {}) },
        body: '{}',
      });
      expect(res.status).toBe(200);
      const set = res.headers.get('set-cookie');
      if (!cookie) {
        expect(set).toMatch(/^FLEETSRV=b[123]; path=\/; HttpOnly/i);
        cookie = (set as string).split(';')[0];
      }
      const { ticket } = (await res.json()) as { ticket: string };
      const ws = new WebSocket(remoteUrl(lb, 'console', { device_id: devices[i % 2], ticket }), { headers: { cookie } });
      const first = await new Promise<any>((resolve, reject) => {
        ws.once('message', (d) => resolve(JSON.parse(String(d))));
        ws.once('close', (code) => reject(new Error(`closed ${code} before ready`)));
        ws.once('error', reject);
      });
      expect(first).toMatchObject({ type: 'ready' });
      ws.close();
      await new Promise((resolve) => ws.once('close', resolve));
    }
  });

  it('a ticket issued by one broker is redeemed by another (tickets are in the database)', async () => {
    const [first, second] = [...brokers.values()];
    const res = await api(first.url, 'POST', '/api/v2/remote/ticket', { body: {} });
    expect(res.status).toBe(200);
    const ws = new WebSocket(remoteUrl(second.url, 'console', { device_id: devices[0], ticket: res.body.ticket }));
    const frame = await new Promise<any>((resolve, reject) => {
      ws.once('message', (d) => resolve(JSON.parse(String(d))));
      ws.once('close', (code) => reject(new Error(`closed ${code} before ready`)));
      ws.once('error', reject);
    });
    expect(frame).toMatchObject({ type: 'ready' });
    ws.close();
    await new Promise((resolve) => ws.once('close', resolve));
  });

  it('a broker killed with SIGKILL: its agent comes back through HAProxy on a survivor, its sessions end, nothing saved is lost', async () => {
    const owners = await presence();
    const device = devices[0];
    const victimId = owners.get(device) as string;
    const victim = brokers.get(victimId) as BrokerProcess;
    const survivors = IDS.filter((id) => id !== victimId);
    const survivor = brokers.get(survivors[0]) as BrokerProcess;
    const otherDevice = devices[1];

    // Saved before the kill: a role, a user holding it, a group in the tree, a file (on a survivor).
    const role = await api(lb, 'POST', '/api/v2/role', { body: { name: 'ha-operators', policies: [{ permission: 'device:read', resources: ['*'] }] } });
    expect(role.status).toBe(201);
    const user = await api(lb, 'POST', '/api/v2/user', {
      body: { fname: 'Ha', lname: 'Operator', email: 'ha-operator@example.com', roles: [role.body.id], password: 'ha-operator-pass-1' },
    });
    expect(user.status).toBe(201);
    const fileContent = crypto.randomBytes(4096);
    const form = new FormData();
    form.set('path', '/ha/');
    form.set('file', new Blob([fileContent]), 'before-kill.bin');
    // Uploaded through the broker about to die: the file store is in the database (FILE_STORE=db).
    expect((await api(victim.url, 'POST', '/api/v2/file', { body: form })).status).toBe(200);

    // A user on a survivor in a console on the victim's agent (relayed by the victim)…
    const relayed = connectRemote(survivor.url, 'console', { device_id: device }, token);
    await relayed.ready;
    const [relayedStart] = await audit(survivor.url, `device_id=${device}&event=remote.console.start`);
    // …and a user on the victim in a console on an agent elsewhere (the victim holds it).
    const held = connectRemote(victim.url, 'console', { device_id: otherDevice }, token);
    await held.ready;
    const [heldStart] = await audit(survivor.url, `device_id=${otherDevice}&event=remote.console.start`);

    const killedAt = Date.now();
    victim.kill();

    const closed = await relayed.closed;
    expect(closed.code).toBe(4502);
    expect(relayed.frames.at(-1)).toMatchObject({ error: 'session_failed' });
    expect(relayed.frames.at(-1).message).toMatch(new RegExp(`link to broker ${victimId} was lost`));

    // The agent reconnects through HAProxy (jittered backoff) and lands on a survivor.
    const newOwner = await eventually(
      async () => {
        const b = (await presence()).get(device);
        return b && b !== victimId && b;
      },
      30_000,
      'the agent to be present on a survivor',
    );
    expect(survivors).toContain(newOwner);
    await consoleRoundTrip(lb, device, 'back');
    const reachableMs = Date.now() - killedAt;
    console.log(`HA: agent reachable again through HAProxy ${reachableMs} ms after broker ${victimId} was killed (target 10 s)`);

    // The relayed session's audit end says why; the session the victim held is closed by a survivor.
    const relayedEnd = await eventually(
      async () => (await audit(survivor.url, `device_id=${device}&event=remote.console.end`)).find((e) => e.ref_id === relayedStart.id),
      10_000,
      'the relayed session’s end entry',
    );
    expect(relayedEnd.reason).toMatch(new RegExp(`link to broker ${victimId} was lost`));
    const heldEnd = await eventually(
      async () => (await audit(survivor.url, `device_id=${otherDevice}&event=remote.console.end`)).find((e) => e.ref_id === heldStart.id),
      15_000,
      'a survivor to close the killed broker’s session in the audit',
    );
    expect(heldEnd.reason).toBe(`broker ${victimId} stopped (no heartbeat)`);
    await eventually(
      async () => (await db.query(`select 1 from "${schema}".cluster_brokers where broker_id = $1`, [victimId])).rowCount === 0,
      15_000,
      'the killed broker’s registration to go',
    );

    // Nothing saved is lost; HAProxy no longer sends to the dead broker.
    for (let i = 0; i < 6; i++) {
      const health = await api(lb, 'GET', '/api/v2/health');
      expect(health.status).toBe(200);
      expect(health.body.broker_id).not.toBe(victimId);
      expect(health.body.checks).toEqual({ database: 'ok', cluster: 'ok' });
    }
    // A sign-in is safe to send again (at worst a second session).
    const signIn = await api(lb, 'POST', '/api/v2/login', {
      body: { email: 'ha-operator@example.com', password: 'ha-operator-pass-1' },
      token: '',
      safe: true,
    });
    expect(signIn.status).toBe(200);
    const roles = await api(lb, 'GET', '/api/v2/roleslist');
    expect(roles.body.items.map((r: { id: string }) => r.id)).toContain(role.body.id);
    for (const d of devices) expect((await api(lb, 'GET', `/api/v2/device/${d}/status`)).body).toMatchObject({ uuid: d, connected: true });
    // The file uploaded through the dead broker is served by the others (FILE_STORE=db).
    const file = await fetchSafe(`${lb}/api/v2/file?path=/ha/before-kill.bin`, { headers: { authorization: `Bearer ${token}` } });
    expect(file.status).toBe(200);
    expect(sha(Buffer.from(await file.arrayBuffer()))).toBe(sha(fileContent));
    held.ws.terminate();
  });

  it('a broker stopped with SIGTERM drains: 503 at once, HAProxy marks it down on that answer, its agent moves, it exits cleanly', async () => {
    const owners = await presence();
    const device = devices[1];
    const stoppingId = owners.get(device) as string;
    const stopping = brokers.get(stoppingId) as BrokerProcess;
    const server = `broker${IDS.indexOf(stoppingId) + 1}`;
    const exited = new Promise<number | null>((resolve) => stopping.child.once('exit', (code) => resolve(code)));
    stopping.child.kill('SIGTERM');
    const health = await eventually(
      async () => {
        const r = await fetch(`${stopping.url}/api/v2/health`).catch(() => undefined);
        return r?.status === 503 && r.json();
      },
      10_000,
      'the stopping broker to answer 503',
    );
    expect(health).toMatchObject({ error: 'not_ready', reasons: ['draining'] });
    // HAProxy's check got that 503 (not a refused connection): it stopped sending there while the broker still served.
    await eventually(
      () => haproxyLog.join('').match(new RegExp(`brokers/${server} is DOWN.*Layer7 wrong status, code: 503`)),
      10_000,
      'HAProxy to mark it down',
    );
    const moved = await eventually(
      async () => {
        const b = (await presence()).get(device);
        return b && b !== stoppingId && b;
      },
      30_000,
      'the agent to move',
    );
    expect(IDS).toContain(moved);
    await consoleRoundTrip(lb, device, 'moved');
    expect(await exited).toBe(0);
  });
});
