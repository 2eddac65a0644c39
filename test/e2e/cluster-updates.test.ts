/**
 * Several brokers on one PostgreSQL schema sharing their agent artifacts directory
 * (AGENT_ARTIFACTS_DIR): a new agent build found by broker A is announced at once to a real agent
 * connected to broker B. A tells the others (`agent_release`, a NOTIFY); B looks at the shared
 * directory and announces the build to the agents it holds, which download it from B.
 *
 * The periodic look at the directory (every 30 s) is stopped on both brokers, and the build is
 * found on A by calling its check directly: only A's event can be what makes B announce it.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../broker/db/database.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { clusterEnv } from '../support/cluster.js';

const { schema, env: common } = clusterEnv(300);

let artifacts: string;
let a: TestBroker;
let b: TestBroker;
let agent: TestAgent;
let device: string;

beforeAll(async () => {
  artifacts = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cluster-artifacts-'));
  a = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-a', AGENT_ARTIFACTS_DIR: artifacts } });
  b = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-b', AGENT_ARTIFACTS_DIR: artifacts } });
  a.broker.services.agentUpdates.stop();
  b.broker.services.agentUpdates.stop();
  const key = await b.api('POST', '/api/v2/bootstrapkey', { token: b.adminToken, body: { auto_accept: true } });
  agent = startAgent({ broker: b.url, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.waitConnected(b, 60_000);
  await eventually(
    () => a.broker.services.locator.isConnected(device) && !a.broker.services.agents.isConnected(device),
    10_000,
    'broker A to see the agent on B',
  );
}, 120_000);

afterAll(async () => {
  await agent?.close();
  await b?.close();
  await a?.close();
  await dropSchema(PG_URL, schema);
  if (artifacts) fs.rmSync(artifacts, { recursive: true, force: true });
});

describe('a new agent build found by the broker that does not hold the agent', () => {
  it('is announced to the agent on B at once, and B serves it', async () => {
    const bundle = Buffer.from(`#!/usr/bin/env node\n// build ${crypto.randomBytes(8).toString('hex')}\n`);
    fs.writeFileSync(path.join(artifacts, 'fleet-agent.mjs'), bundle);
    fs.writeFileSync(path.join(artifacts, 'package.json'), JSON.stringify({ name: 'fleet-agent', version: '9.1.0' }));
    const from = agent.logs.length;
    await a.broker.services.agentUpdates.checkPublished();
    // The agent runs from source: it logs the announcement it received rather than installing it.
    const line = await agent.waitForLog((l) => l.msg.includes('agent update published') && l.version === '9.1.0', 20_000, from);
    expect(line.version).toBe('9.1.0');
    // The broker holding the agent publishes that very build (the download is served from there).
    expect(await b.broker.services.agentUpdates.release()).toMatchObject({
      version: '9.1.0',
      sha256: crypto.createHash('sha256').update(bundle).digest('hex'),
      size: bundle.length,
    });
  });
});
