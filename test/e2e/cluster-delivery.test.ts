/**
 * Several brokers on one PostgreSQL schema: what must reach an agent reaches it whichever broker
 * took the change. A real agent on broker A; a commit made through broker B is applied by the
 * agent (B records the digest and asks A, through NOTIFY, to send it); a configuration run
 * (run-agent) and a reload through B reach it over the peer link; a device-level message B
 * delivers is sent by A. The same the other way round: a second agent on B, the changes made
 * through A. (Update announcements: cluster-updates.test.ts; sessions ended through another
 * broker: cluster-sessions.test.ts.)
 *
 * Neither the configuration re-check of the brokers (stopped here) nor the agent's own run (every
 * 5 minutes, longer than this file's waits) can be what brings the commit.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../broker/db/database.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { clusterEnv } from '../support/cluster.js';

const { schema, env: common } = clusterEnv(300);

let a: TestBroker;
let b: TestBroker;
let agent: TestAgent;
let device: string;
let agentOnB: TestAgent;
let deviceOnB: string;

async function deviceCommit(t: TestBroker, deviceId: string): Promise<string | null | undefined> {
  const row = await t.broker.services.store.db.selectFrom('device_config').select(['device_commit_sha']).where('device_id', '=', deviceId).executeTakeFirst();
  return row?.device_commit_sha;
}

beforeAll(async () => {
  a = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-a' } });
  b = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-b' } });
  // The 15 s re-check of both brokers is stopped: only the change itself may bring the configuration.
  await a.broker.services.configuration.close();
  await b.broker.services.configuration.close();
  const key = await a.api('POST', '/api/v2/bootstrapkey', { token: a.adminToken, body: { auto_accept: true } });
  agent = startAgent({ broker: a.url, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.waitConnected(a, 60_000);
  await eventually(
    () => b.broker.services.locator.isConnected(device) && !b.broker.services.agents.isConnected(device),
    10_000,
    'broker B to see the agent on A',
  );
  agentOnB = startAgent({ broker: b.url, bootstrapKey: Object.keys(key.body)[0] });
  deviceOnB = await agentOnB.waitConnected(b, 60_000);
  await eventually(
    () => a.broker.services.locator.isConnected(deviceOnB) && !a.broker.services.agents.isConnected(deviceOnB),
    10_000,
    'broker A to see the agent on B',
  );
}, 180_000);

// What the agents said, when a test fails (an agent that left its broker says why).
afterEach(({ task }) => {
  if (task.result?.state !== 'fail') return;
  for (const [name, t] of [
    ['agent on A', agent],
    ['agent on B', agentOnB],
  ] as const) {
    const lines = t?.logs.slice(-30).map((l) => JSON.stringify(l).slice(0, 400)) ?? [];
    console.log(`${name}: exit code ${String(t?.process.exitCode)}\n${[...lines, ...(t?.output.slice(-10) ?? [])].join('\n')}`);
  }
});

afterAll(async () => {
  await agentOnB?.close();
  await agent?.close();
  await b?.close();
  await a?.close();
  await dropSchema(PG_URL, schema);
});

describe('a change made through the broker that does not hold the agent', () => {
  it('a commit through B reaches the agent on A at once', async () => {
    // The agent's first configuration, sent at its connection, is applied: its report can no longer be
    // what brings the commit (a report of an older commit makes the holding broker send the current one).
    await agent.waitForLog((l) => l.msg === 'configuration applied', 60_000);
    const committed = await b.api('POST', '/api/v2/commit', {
      token: b.adminToken,
      body: {
        action: 'commit',
        message: 'through the other broker',
        changes: [{ node_id: device, formtype: 'parameters', extend: true, config: { parameters: [{ key: 'via', value: 'broker-b' }], secrets: [] } }],
      },
    });
    expect(committed.status).toBe(200);
    const sha: string = committed.body.sha;
    // Waited for generously; the agent's own run (5 minutes) is not due within this wait.
    await eventually(async () => (await deviceCommit(a, device)) === sha, 60_000, 'the agent to apply the commit made through B');
    const tree = await b.api('GET', '/api/v2/grouptree', { token: b.adminToken });
    expect(JSON.stringify(tree.body)).toContain(sha);
  });

  it('a reload through B reaches the agent on A', async () => {
    const from = agent.logs.length;
    const r = await b.api('POST', `/api/v2/remote/reload/${device}`, { token: b.adminToken, body: {} });
    expect(r.status, JSON.stringify(r.body)).toBeLessThan(300);
    await agent.waitForLog((l) => l.msg.includes('reload'), 30_000, from);
  });

  it('a device-level message delivered through B is sent by A (a request for a fresh inventory)', async () => {
    const db = a.broker.services.store.db;
    const before = await eventually(
      async () => (await db.selectFrom('inventory').select('updated_at').where('device_id', '=', device).executeTakeFirst())?.updated_at,
      60_000,
      'the first inventory report',
    );
    // The reload above made the agent connect again: B knows it is back on A.
    await eventually(() => b.broker.services.locator.isConnected(device) && a.broker.services.agents.isConnected(device), 30_000, 'the agent back on A');
    expect(b.broker.services.deliver(device, { t: 'inventory', data: {} })).toBe(true);
    await eventually(
      async () => ((await db.selectFrom('inventory').select('updated_at').where('device_id', '=', device).executeTakeFirst())?.updated_at ?? '') > before,
      30_000,
      'a fresh inventory report',
    );
    // A device connected nowhere: nothing is sent.
    expect(b.broker.services.deliver('0'.repeat(64), { t: 'inventory', data: {} })).toBe(false);
  });
});

/** A commit of one parameter for `deviceId` through `via`: answers its sha. */
async function commitThrough(via: TestBroker, deviceId: string, value: string): Promise<string> {
  const committed = await via.api('POST', '/api/v2/commit', {
    token: via.adminToken,
    body: {
      action: 'commit',
      message: `through ${value}`,
      changes: [{ node_id: deviceId, formtype: 'parameters', extend: true, config: { parameters: [{ key: 'via', value }], secrets: [] } }],
    },
  });
  expect(committed.status, JSON.stringify(committed.body)).toBe(200);
  return committed.body.sha;
}

describe('the other way round: the agent on B, the change made through A', () => {
  it('a commit through A reaches the agent on B at once', async () => {
    await agentOnB.waitForLog((l) => l.msg === 'configuration applied', 60_000);
    const started = Date.now();
    const sha = await commitThrough(a, deviceOnB, 'broker-a');
    // The agent applied it and reported so (B records what the agent applied).
    await eventually(async () => (await deviceCommit(b, deviceOnB)) === sha, 60_000, 'the agent on B to apply the commit made through A');
    console.log(`cluster delivery: a commit through A applied by the agent on B ${Date.now() - started} ms after the call`);
    expect(a.broker.services.agents.isConnected(deviceOnB)).toBe(false);
  });

  it("a configuration run through A (qbee's run-agent) reaches the agent on B, which stays connected", async () => {
    const from = agentOnB.logs.length;
    const r = await a.api('GET', `/api/v2/device/${deviceOnB}/run-agent`, { token: a.adminToken });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    await agentOnB.waitForLog((l) => l.msg === 'configuration run requested by the broker', 30_000, from);
    expect(agentOnB.logs.slice(from).some((l) => l.msg.includes('reload'))).toBe(false);
  });

  it('a reload through A reaches the agent on B', async () => {
    const from = agentOnB.logs.length;
    const r = await a.api('POST', `/api/v2/remote/reload/${deviceOnB}`, { token: a.adminToken, body: {} });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    await agentOnB.waitForLog((l) => l.msg === 'reload requested by the broker', 30_000, from);
  });

  it('a device-level message delivered through A is sent by B (a request for a fresh inventory)', async () => {
    const db = b.broker.services.store.db;
    const inventoryAt = async () => (await db.selectFrom('inventory').select('updated_at').where('device_id', '=', deviceOnB).executeTakeFirst())?.updated_at;
    const before = await eventually(inventoryAt, 60_000, 'the first inventory report');
    await eventually(() => a.broker.services.locator.isConnected(deviceOnB) && b.broker.services.agents.isConnected(deviceOnB), 30_000, 'the agent back on B');
    expect(a.broker.services.deliver(deviceOnB, { t: 'inventory', data: {} })).toBe(true);
    await eventually(async () => ((await inventoryAt()) ?? '') > before, 30_000, 'a fresh inventory report');
  });
});
