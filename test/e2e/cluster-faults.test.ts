/**
 * Several brokers when the database goes away from one of them, through a TCP proxy the test
 * controls (test/support/tcp-proxy.ts) between that broker and PostgreSQL:
 * - a partition longer than the expiry, of each kind (connections hanging then moving again,
 *   refused, hanging and lost for good): the cut-off broker answers not ready, the other broker
 *   takes it for gone and writes the end of its live session; once healed, the cut-off broker
 *   ends that session itself (its client is told) and the session keeps exactly one end entry;
 *   the cut-off broker is ready again by itself and its agent is reached through the other one;
 * - after all of them the audit chain verifies and no session has two end entries;
 * - a broker started while its database refuses connections retries with a growing delay,
 *   logging so, and starts once the database answers;
 * - SIGTERM stops a broker whose database hangs mid-query within SHUTDOWN_DRAIN_MS and a few seconds.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../broker/db/database.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { auditProblems, clusterEnv, spawnBroker, type BrokerProcess } from '../support/cluster.js';
import { connectRemote } from '../support/remote-ws.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

const HEARTBEAT_MS = 300;
const QUERY_TIMEOUT_MS = 20_000;
const { schema, env: common } = clusterEnv(HEARTBEAT_MS);
const pgUrl = new URL(PG_URL);

let proxy: TcpProxy;
let cut: TestBroker;
let other: TestBroker;
let agent: TestAgent;
let device: string;
const spawned: BrokerProcess[] = [];
const schemas: string[] = [];
/** Console start entries already used by a test. */
const seen = new Set<number>();

async function consoleEntries(t: TestBroker): Promise<any[]> {
  const r = await t.api('GET', `/api/v2/commitlist?device_id=${device}&action=console`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

beforeAll(async () => {
  proxy = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
  other = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-other' } });
  // The cut-off broker gives up on a reply after 20 s (DATABASE_QUERY_TIMEOUT_MS) rather than the
  // default 65 s: a lost partition's connections are freed only by that timeout, so it is what the
  // lost partition waits for.
  cut = await startTestBroker({
    database: 'postgres',
    env: { ...common, BROKER_ID: 'broker-cut', DATABASE_URL: proxy.url(PG_URL), DATABASE_QUERY_TIMEOUT_MS: String(QUERY_TIMEOUT_MS) },
  });
  const key = await cut.api('POST', '/api/v2/bootstrapkey', { token: cut.adminToken, body: { auto_accept: true } });
  agent = startAgent({ broker: cut.url, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.waitConnected(cut, 60_000);
}, 120_000);

afterAll(async () => {
  proxy?.heal();
  for (const p of spawned) p.kill();
  await agent?.close();
  await cut?.close();
  await other?.close();
  await proxy?.close();
  for (const s of [schema, ...schemas]) await dropSchema(PG_URL, s);
});

const health = async (t: TestBroker) => (await fetch(`${t.url}/api/v2/health`)).status;

/**
 * Each kind of partition in turn, on the same cluster, each healed afterwards: connections that hang
 * (packets lost, nothing says so) and then move again; connections refused and cut (the database
 * unreachable); connections that hang and are lost for good (the database side closed them during
 * the partition: only the pool's own timeouts get the broker out of them, so it takes longer).
 */
const KINDS = {
  hang: { fault: () => proxy.hang(), heal: () => proxy.heal(), recoveryMs: 60_000 },
  refuse: { fault: () => proxy.refuse(), heal: () => proxy.heal(), recoveryMs: 60_000 },
  lost: { fault: () => proxy.hang(), heal: () => proxy.heal({ lose: true }), recoveryMs: 150_000 },
};

describe.each(Object.keys(KINDS) as (keyof typeof KINDS)[])('a broker cut off from the database (%s)', (kind) => {
  const { fault, heal, recoveryMs } = KINDS[kind];

  it('a session the others ended during a partition ends on its broker after it, with one end entry', async () => {
    await eventually(
      async () => (await health(cut)) === 200 && other.broker.services.locator.isConnected(device),
      30_000,
      'the cluster whole before the fault',
    );
    const s = connectRemote(cut.url, 'console', { device_id: device, cols: 80, rows: 24 }, cut.adminToken);
    await s.ready;
    const start = await eventually(
      async () => (await consoleEntries(other)).find((e) => e.event === 'remote.console.start' && !seen.has(e.id)),
      10_000,
      'the start entry',
    );
    seen.add(start.id);

    fault();
    // The cut-off broker says it cannot take traffic…
    await eventually(async () => (await health(cut)) === 503, 30_000, 'the cut-off broker to answer not ready');
    // …and the other broker takes the silent one for gone and writes the end of its session.
    const end = await eventually(
      async () => (await consoleEntries(other)).find((e) => e.event === 'remote.console.end' && e.ref_id === start.id),
      30_000,
      'the end written by the other broker',
    );
    expect(end.reason).toContain('broker-cut');
    heal();

    // Once it reaches the database again, the cut-off broker ends the session itself (the client is told why)…
    const closed = await Promise.race([s.closed, new Promise<undefined>((r) => setTimeout(r, recoveryMs))]);
    if (!closed) s.ws.close();
    await eventually(() => cut.broker.services.remote.sessions.list().length === 0, 10_000, 'the session gone on its broker');
    // …and writes no second end (its own end write comes right after the relay ends: give it time to land).
    await new Promise((r) => setTimeout(r, 1000));
    const ends = (await consoleEntries(other)).filter((e) => e.event === 'remote.console.end' && e.ref_id === start.id);
    expect(ends).toHaveLength(1);
    expect(closed?.code).toBe(1001);
    expect(s.frames.find((f) => f.type === 'error')).toMatchObject({ error: 'session_ended' });
  }, 300_000);

  it('the cut-off broker recovers by itself: ready again, and the other one reaches its agent again', async () => {
    await eventually(async () => (await health(cut)) === 200, recoveryMs, 'the cut-off broker ready again');
    await eventually(() => other.broker.services.locator.isConnected(device), 30_000, 'the other broker to see the agent again');
    const status = await other.api('GET', `/api/v2/device/${device}/status`, { token: other.adminToken });
    expect(status.body).toMatchObject({ connected: true });
    // A console through the other broker, relayed by the one that was cut off.
    const s = connectRemote(other.url, 'console', { device_id: device, cols: 80, rows: 24 }, other.adminToken);
    await s.ready;
    s.ws.send(Buffer.from('echo "healed-$((40+2))"\n'));
    await s.output('healed-42');
    s.ws.send(Buffer.from('exit 0\n'));
    expect((await s.closed).code).toBe(1000);
  });
});

describe('after the partitions', () => {
  it('the audit chain verifies and no session has two end entries', async () => {
    // The end of the last console (written by the broker holding it) has landed.
    await eventually(
      async () => {
        const entries = await consoleEntries(other);
        return entries
          .filter((e) => e.event === 'remote.console.start')
          .every((st) => entries.some((e) => e.event === 'remote.console.end' && e.ref_id === st.id));
      },
      30_000,
      'every console ended in the audit',
    );
    expect(await auditProblems(schema)).toEqual([]);
  });
});

describe('a broker process and an unreachable database', () => {
  it('started while the database refuses connections, it retries (and says so) and starts once it answers', async () => {
    const local = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
    try {
      local.refuse();
      const own = clusterEnv(HEARTBEAT_MS);
      schemas.push(own.schema);
      // Its first attempts, the healed one and its migrations on a loaded machine: given time.
      const starting = spawnBroker({ ...own.env, DATABASE_URL: local.url(PG_URL), SHUTDOWN_DRAIN_MS: '200' }, 'broker-late', { listenTimeoutMs: 180_000 });
      // Healed once the broker has been refused a few times (longer than the start used to last).
      await eventually(() => local.refused >= 4, 60_000, 'the broker to try the database a few times');
      local.heal();
      const broker = await starting;
      spawned.push(broker);
      expect(broker.output.join('')).toContain('database unreachable at start: retrying');
      // With a growing delay between the attempts.
      const delays = broker.output
        .join('')
        .split('\n')
        .filter((l) => l.includes('database unreachable at start: retrying'))
        .map((l) => (JSON.parse(l) as { retryInMs: number }).retryInMs);
      expect(delays.length).toBeGreaterThanOrEqual(3);
      expect(delays[1]).toBeGreaterThan(delays[0]);
      expect(delays[2]).toBeGreaterThan(delays[1]);
    } finally {
      local.heal();
      await local.close();
    }
  }, 240_000);

  it('SIGTERM stops a broker whose database hangs mid-query within SHUTDOWN_DRAIN_MS and a few seconds', async () => {
    const local = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
    try {
      const own = clusterEnv(HEARTBEAT_MS);
      schemas.push(own.schema);
      const drainMs = 200;
      const broker = await spawnBroker({ ...own.env, DATABASE_URL: local.url(PG_URL), SHUTDOWN_DRAIN_MS: String(drainMs) }, 'broker-hung', {
        listenTimeoutMs: 180_000,
      });
      spawned.push(broker);
      local.hang();
      // Requests that need the database, left hanging on its connections (the answers never come).
      const hanging = [
        fetch(`${broker.url}/api/v2/login`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ email: 'nobody@example.com', password: 'not-the-password' }),
        }).catch(() => undefined),
        fetch(`${broker.url}/api/v2/health`).catch(() => undefined),
      ];
      await eventually(() => local.held >= 2, 30_000, 'queries held by the hung database');
      const exited = new Promise<number>((resolve) => broker.child.once('exit', () => resolve(Date.now())));
      const signalled = Date.now();
      broker.child.kill('SIGTERM');
      const took = (await Promise.race([exited, new Promise<undefined>((r) => setTimeout(r, 60_000))])) ?? Number.NaN;
      void Promise.all(hanging);
      // The promise is SHUTDOWN_DRAIN_MS plus 5 s; 10 s more for a loaded machine's timers (it used to
      // ignore SIGTERM for 30 s).
      expect(took - signalled, `the broker did not exit; its output:\n${broker.output.join('').slice(-4000)}`).toBeLessThan(drainMs + 5000 + 10_000);
    } finally {
      local.heal();
      await local.close();
    }
  }, 240_000);
});
