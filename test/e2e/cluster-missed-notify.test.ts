/**
 * Several brokers on PostgreSQL: a broker that missed the NOTIFY (`config`) of a commit made through
 * another broker — its listening connection was down when it was sent — still sends the agent it
 * holds that configuration, at its next configuration re-check (every 15 s). Here broker A's
 * listener loses every `config` event it hears; the agent's own run (every 5 minutes) is not due
 * within this file's wait, so only the re-check can bring the commit.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClusterEvent } from '../../broker/cluster/bus.js';
import { dropSchema } from '../../broker/db/database.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { clusterEnv } from '../support/cluster.js';

const { schema, env: common } = clusterEnv(300);

let a: TestBroker;
let b: TestBroker;
let agent: TestAgent;
let device: string;

beforeAll(async () => {
  a = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-a' } });
  b = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-b' } });
  const key = await a.api('POST', '/api/v2/bootstrapkey', { token: a.adminToken, body: { auto_accept: true } });
  agent = startAgent({ broker: a.url, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.waitConnected(a, 60_000);
  await eventually(
    () => b.broker.services.locator.isConnected(device) && !b.broker.services.agents.isConnected(device),
    10_000,
    'broker B to see the agent on A',
  );
}, 180_000);

afterAll(async () => {
  await agent?.close();
  await b?.close();
  await a?.close();
  await dropSchema(PG_URL, schema);
});

describe('a configuration NOTIFY that a broker missed', () => {
  it('is made up for by its re-check: the commit through B reaches the agent on A', async () => {
    await agent.waitForLog((l) => l.msg === 'configuration applied', 60_000);
    // A's listener drops every `config` event from here on, as one whose connection was down would.
    const bus = a.broker.services.cluster!.bus;
    const emit = bus.emit.bind(bus);
    let missed = 0;
    bus.emit = ((name: 'event' | 'listening', ...args: [ClusterEvent] | []) => {
      if (name === 'event' && args[0]?.e === 'config') return Boolean((missed += 1));
      return (emit as (n: string, ...a: unknown[]) => boolean)(name, ...args);
    }) as typeof bus.emit;
    const committed = await b.api('POST', '/api/v2/commit', {
      token: b.adminToken,
      body: {
        action: 'commit',
        message: 'while A was not listening',
        changes: [{ node_id: device, formtype: 'parameters', extend: true, config: { parameters: [{ key: 'via', value: 'missed' }], secrets: [] } }],
      },
    });
    expect(committed.status).toBe(200);
    const sha: string = committed.body.sha;
    await eventually(
      async () => {
        const row = await a.broker.services.store.db.selectFrom('device_config').select('device_commit_sha').where('device_id', '=', device).executeTakeFirst();
        return row?.device_commit_sha === sha;
      },
      60_000,
      'the agent on A to apply the commit made through B',
    );
    // The NOTIFY was sent and lost: the re-check, not the event, brought it.
    expect(missed).toBeGreaterThan(0);
  });
});
