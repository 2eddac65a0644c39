/**
 * Several brokers when the database goes away from one of them, through a TCP proxy the test
 * controls (test/support/tcp-proxy.ts) between that broker and PostgreSQL:
 * - a partition longer than the expiry: the other broker takes it for gone and writes the end of
 *   its live session; once healed, the cut-off broker ends that session itself (its client is told)
 *   and the session keeps exactly one end entry;
 * - a broker started while its database refuses connections retries, logging so, and starts once
 *   the database answers;
 * - SIGTERM stops a broker whose database hangs mid-connection.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../broker/db/database.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { clusterEnv, spawnBroker, type BrokerProcess } from '../support/cluster.js';
import { connectRemote } from '../support/remote-ws.js';
import { startTcpProxy, type TcpProxy } from '../support/tcp-proxy.js';

const HEARTBEAT_MS = 300;
const { schema, env: common } = clusterEnv(HEARTBEAT_MS);
const pgUrl = new URL(PG_URL);

let proxy: TcpProxy;
let cut: TestBroker;
let other: TestBroker;
let agent: TestAgent;
let device: string;
const spawned: BrokerProcess[] = [];
const schemas: string[] = [];

async function consoleEntries(t: TestBroker): Promise<any[]> {
  const r = await t.api('GET', `/api/v2/commitlist?device_id=${device}&action=console`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

beforeAll(async () => {
  proxy = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
  other = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-other' } });
  cut = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-cut', DATABASE_URL: proxy.url(PG_URL) } });
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

describe('a broker cut off from the database', () => {
  it('a session the others ended during a partition ends on its broker after it, with one end entry', async () => {
    const s = connectRemote(cut.url, 'console', { device_id: device, cols: 80, rows: 24 }, cut.adminToken);
    await s.ready;
    const start = await eventually(async () => (await consoleEntries(other)).find((e) => e.event === 'remote.console.start'), 10_000, 'the start entry');

    proxy.hang();
    // The other broker takes the silent one for gone and writes the end of its session.
    const end = await eventually(
      async () => (await consoleEntries(other)).find((e) => e.event === 'remote.console.end' && e.ref_id === start.id),
      30_000,
      'the end written by the other broker',
    );
    expect(end.reason).toContain('broker-cut');
    proxy.heal();

    // Once it reaches the database again, the cut-off broker ends the session itself (the client is told why)…
    const closed = await Promise.race([s.closed, new Promise<undefined>((r) => setTimeout(r, 30_000))]);
    if (!closed) s.ws.close();
    await eventually(() => cut.broker.services.remote.sessions.list().length === 0, 10_000, 'the session gone on its broker');
    // …and writes no second end (its own end write comes right after the relay ends: give it time to land).
    await new Promise((r) => setTimeout(r, 1000));
    const ends = (await consoleEntries(other)).filter((e) => e.event === 'remote.console.end' && e.ref_id === start.id);
    expect(ends).toHaveLength(1);
    expect(closed?.code).toBe(1001);
    expect(s.frames.find((f) => f.type === 'error')).toMatchObject({ error: 'session_ended' });
  });

  it('the cut-off broker is back in the cluster by itself: the other one reaches its agent again', async () => {
    await eventually(() => other.broker.services.locator.isConnected(device), 30_000, 'the other broker to see the agent again');
    const status = await other.api('GET', `/api/v2/device/${device}/status`, { token: other.adminToken });
    expect(status.body).toMatchObject({ connected: true });
  });
});

describe('a broker process and an unreachable database', () => {
  it('started while the database refuses connections, it retries (and says so) and starts once it answers', async () => {
    const local = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
    try {
      local.refuse();
      const own = clusterEnv(HEARTBEAT_MS);
      schemas.push(own.schema);
      const starting = spawnBroker({ ...own.env, DATABASE_URL: local.url(PG_URL), SHUTDOWN_DRAIN_MS: '200' }, 'broker-late');
      // Healed once the broker has been refused a few times (longer than the start used to last).
      await eventually(() => local.refused >= 4, 60_000, 'the broker to try the database a few times');
      local.heal();
      const broker = await starting;
      spawned.push(broker);
      expect(broker.output.join('')).toContain('database unreachable at start: retrying');
    } finally {
      local.heal();
      await local.close();
    }
  });

  it('SIGTERM stops a broker whose database hangs', async () => {
    const local = await startTcpProxy(pgUrl.hostname, Number(pgUrl.port || 5432));
    try {
      const own = clusterEnv(HEARTBEAT_MS);
      schemas.push(own.schema);
      const broker = await spawnBroker({ ...own.env, DATABASE_URL: local.url(PG_URL), SHUTDOWN_DRAIN_MS: '200' }, 'broker-hung');
      spawned.push(broker);
      local.hang();
      broker.child.kill('SIGTERM');
      const code = await eventually(() => broker.child.exitCode ?? broker.child.signalCode ?? undefined, 60_000, 'the broker to exit').catch((err: Error) => {
        throw new Error(`${err.message}; its output:\n${broker.output.join('').slice(-4000)}`);
      });
      expect(code).not.toBeUndefined();
    } finally {
      local.heal();
      await local.close();
    }
  });
});
