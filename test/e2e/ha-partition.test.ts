/**
 * Several brokers behind HAProxy (deploy/haproxy.cfg) when one of them is cut off from PostgreSQL:
 * two broker processes, each reaching the database through a TCP proxy the test controls, a real
 * agent connecting through HAProxy. The broker holding the agent loses its database (connections
 * hang): its health check answers 503, HAProxy marks it down and cuts its connections, the agent
 * comes back through HAProxy on the other broker and answers a console there, and calls through
 * HAProxy (reads and writes) are answered by the other broker. Healed, the broker is marked up
 * again by HAProxy by itself. Afterwards the audit chain verifies and no session has two ends.
 * (The third server line of the config points at an address where nothing listens: down throughout.)
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../broker/db/database.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { ADMIN, PG_URL } from '../support/broker.js';
import { auditProblems, clusterEnv, spawnBroker, type BrokerProcess } from '../support/cluster.js';
import { startHaproxy } from '../support/haproxy.js';
import { connectRemote } from '../support/remote-ws.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

const HEARTBEAT_MS = 300;
const { schema, env: common } = clusterEnv(HEARTBEAT_MS);
const env = { ...common, ADMIN_EMAIL: ADMIN.email, ADMIN_PASSWORD: ADMIN.password, TRUST_PROXY: 'true', SHUTDOWN_DRAIN_MS: '200', FILE_STORE: 'db' };
const IDS = ['hp-1', 'hp-2'];
const pgUrl = new URL(PG_URL);

const brokers = new Map<string, { process: BrokerProcess; proxy: TcpProxy; server: string }>();
let haproxy: ChildProcess | undefined;
let haproxyLog: string[] = [];
let lb: string;
let token: string;
let db: pg.Client;
let work: string;
let agent: TestAgent;
let device: string;

/** A call through `base`; a connection that fails before an answer gives `undefined` (the caller polls). */
async function call(base: string, method: string, p: string, body?: unknown): Promise<{ status: number; body: any } | undefined> {
  try {
    const res = await fetch(`${base}${p}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, body: (res.headers.get('content-type') ?? '').includes('json') && text ? JSON.parse(text) : text };
  } catch {
    return undefined;
  }
}

async function ownerOf(deviceId: string): Promise<string | undefined> {
  const r = await db.query<{ broker_id: string }>(`select broker_id from "${schema}".agent_presence where device_id = $1`, [deviceId]);
  return r.rows[0]?.broker_id;
}

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-ha-partition-'));
  // One after the other: the first one creates the schema and the first user.
  for (const [i, id] of IDS.entries()) {
    const proxy = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
    const proc = await spawnBroker({ ...env, DATABASE_URL: proxy.url(PG_URL) }, id, { listenTimeoutMs: 180_000 });
    brokers.set(id, { process: proc, proxy, server: `broker${i + 1}` });
  }
  const hostPort = (id: string) => new URL((brokers.get(id) as { process: BrokerProcess }).process.url).host;
  const balancer = await startHaproxy(work, [hostPort(IDS[0]), hostPort(IDS[1])]);
  ({ url: lb, process: haproxy, log: haproxyLog } = balancer);
  const seen = new Set<string>();
  await eventually(
    async () => {
      if (haproxy?.exitCode !== null) throw new Error(`haproxy exited: ${haproxyLog.join('')}`);
      const r = await fetch(`${lb}/api/v2/health`).catch(() => undefined);
      if (r?.status === 200) seen.add(((await r.json()) as { broker_id: string }).broker_id);
      return seen.size === 2;
    },
    60_000,
    'HAProxy to send to both brokers',
  );
  db = new pg.Client({ connectionString: PG_URL });
  await db.connect();
  const login = await fetch(`${lb}/api/v2/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: ADMIN.email, password: ADMIN.password }),
  });
  expect(login.status).toBe(200);
  token = ((await login.json()) as { token: string }).token;
  const key = await call(lb, 'POST', '/api/v2/bootstrapkey', { auto_accept: true });
  expect(key?.status).toBe(200);
  agent = startAgent({ broker: lb, bootstrapKey: Object.keys(key?.body)[0] });
  device = await agent.deviceId(60_000);
  await eventually(() => ownerOf(device), 60_000, 'the agent present on a broker');
}, 300_000);

afterAll(async () => {
  await agent?.close();
  if (haproxy && haproxy.exitCode === null) {
    haproxy.kill('SIGTERM');
    await new Promise((resolve) => haproxy?.once('exit', resolve));
  }
  for (const b of brokers.values()) {
    b.proxy.heal();
    b.process.kill();
    await b.proxy.close();
  }
  await db?.end();
  await dropSchema(PG_URL, schema);
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('a broker behind HAProxy cut off from the database', () => {
  it('HAProxy marks it down, its agent and the calls go to the other broker; healed, it is marked up again', async () => {
    const cutId = (await ownerOf(device)) as string;
    const cut = brokers.get(cutId) as { process: BrokerProcess; proxy: TcpProxy; server: string };
    const otherId = IDS.find((id) => id !== cutId) as string;
    const from = haproxyLog.join('').length;
    cut.proxy.hang();

    // Its health check fails on the database, and HAProxy stops sending to it.
    await eventually(
      async () => {
        const r = await fetch(`${cut.process.url}/api/v2/health`).catch(() => undefined);
        return r?.status === 503 && ((await r.json()) as { reasons: string[] }).reasons.includes('database');
      },
      30_000,
      'the cut-off broker to answer 503 database',
    );
    await eventually(() => haproxyLog.join('').slice(from).includes(`brokers/${cut.server} is DOWN`), 30_000, 'HAProxy to mark it down');
    // Its agent's connection was cut by HAProxy: the agent comes back through HAProxy on the other broker.
    await eventually(async () => (await ownerOf(device)) === otherId, 60_000, 'the agent on the other broker');
    const s = connectRemote(lb, 'console', { device_id: device, cols: 80, rows: 24 }, token);
    await s.ready;
    s.ws.send(Buffer.from('echo "moved-$((40+2))"\n'));
    await s.output('moved-42');
    s.ws.send(Buffer.from('exit 0\n'));
    expect((await s.closed).code).toBe(1000);
    // Reads and writes through HAProxy are answered, by the other broker.
    for (let i = 0; i < 4; i++) {
      const health = await call(lb, 'GET', '/api/v2/health');
      expect(health).toMatchObject({ status: 200, body: { broker_id: otherId } });
    }
    const role = await call(lb, 'POST', '/api/v2/role', { name: 'during-partition', policies: [{ permission: 'device:read', resources: ['*'] }] });
    expect(role?.status).toBe(201);
    const roles = await call(lb, 'GET', '/api/v2/roleslist');
    expect(roles?.body.items.map((r: { id: string }) => r.id)).toContain(role?.body.id);

    // Healed: the broker recovers by itself and HAProxy marks it up again.
    cut.proxy.heal();
    await eventually(async () => (await fetch(`${cut.process.url}/api/v2/health`).catch(() => undefined))?.status === 200, 60_000, 'the broker ready again');
    await eventually(() => haproxyLog.join('').slice(from).includes(`brokers/${cut.server} is UP`), 30_000, 'HAProxy to mark it up');
    await eventually(
      async () => (await call(lb, 'GET', '/api/v2/device/' + device + '/status'))?.body?.connected === true,
      30_000,
      'the device connected, as any broker tells',
    );
    const fromCut = await call(cut.process.url, 'GET', '/api/v2/roleslist');
    expect(fromCut?.body.items.map((r: { id: string }) => r.id)).toContain(role?.body.id);
  }, 300_000);

  it('afterwards the audit chain verifies and no session has two end entries', async () => {
    // The console's end is written by the broker that held it: wait for it.
    await eventually(
      async () => {
        const r = await db.query(
          `select count(*)::int as n from "${schema}".audit a where a.event = 'remote.console.start' and not exists (select 1 from "${schema}".audit e where e.ref_id = a.id and e.event = 'remote.console.end')`,
        );
        return r.rows[0].n === 0;
      },
      30_000,
      'every console ended in the audit',
    );
    expect(await auditProblems(schema)).toEqual([]);
  });
});
