/**
 * Several brokers on one PostgreSQL schema sharing their agent artifacts directory
 * (AGENT_ARTIFACTS_DIR): a new agent build found by broker A is announced at once to a real agent
 * connected to broker B. A tells the others (`agent_release`, a NOTIFY); B looks at the shared
 * directory and announces the build to the agents it holds, which download it from B.
 *
 * The agent is the bundled one (1.0.0, from an unpacked tree as in agent-update.test.ts), run by a
 * tiny service manager that starts it again when it exits: it installs 1.1.0 received from B,
 * restarts into it and B sees it connected as 1.1.0.
 *
 * The periodic look at the directory (every 30 s) is stopped on both brokers, and the build is
 * found on A by calling its check directly: only A's event can be what makes B announce it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildAgent } from '../../agent/packaging/build.js';
import { dropSchema } from '../../broker/db/database.js';
import { eventually } from '../support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { clusterEnv } from '../support/cluster.js';

const { schema, env: common } = clusterEnv(300);

let work: string;
let artifacts: string;
let a: TestBroker;
let b: TestBroker;
let device: string;
let child: ChildProcess | undefined;
let stopped = false;
let starts = 0;
const logs: string[] = [];

/** The agent as a service manager runs it: started again 100 ms after it exits. */
function runAgent(args: string[]): void {
  starts += 1;
  child = spawn(process.execPath, [path.join(work, 'old', 'fleet-agent.mjs'), ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  child.stderr?.on('data', (d: Buffer) => logs.push(d.toString('utf8')));
  child.on('exit', () => {
    if (!stopped) setTimeout(() => !stopped && runAgent(args), 100);
  });
}

const versionOnB = () => b.broker.services.agents.connectionInfo(device)?.version;

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cluster-updates-'));
  artifacts = path.join(work, 'served');
  fs.mkdirSync(artifacts);
  await buildAgent(path.join(work, 'old'), { version: '1.0.0', packages: false });
  await buildAgent(path.join(work, 'new'), { version: '1.1.0', packages: false });
  a = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-a', AGENT_ARTIFACTS_DIR: artifacts } });
  b = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-b', AGENT_ARTIFACTS_DIR: artifacts } });
  // The 30 s look at the directory is stopped on both: only A's event can make B announce.
  a.broker.services.agentUpdates.stop();
  b.broker.services.agentUpdates.stop();
  const key = await b.api('POST', '/api/v2/bootstrapkey', { token: b.adminToken, body: { auto_accept: true } });
  const keyFile = path.join(work, 'bootstrap-key');
  fs.writeFileSync(keyFile, `${Object.keys(key.body)[0]}\n`, { mode: 0o600 });
  const stateDir = path.join(work, 'state');
  runAgent(['--broker', b.url, '--bootstrap-key-file', keyFile, '--state-dir', stateDir, '--exit-on-reload', '--retry-min-ms', '100', '--retry-max-ms', '500']);
  device = await eventually(() => b.broker.services.agents.connectedDevices()[0], 60_000, 'the agent connected to B');
  expect(versionOnB()).toBe('1.0.0');
  await eventually(
    () => a.broker.services.locator.isConnected(device) && !a.broker.services.agents.isConnected(device),
    10_000,
    'broker A to see the agent on B',
  );
}, 180_000);

afterAll(async () => {
  stopped = true;
  if (child && child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((resolve) => child?.once('exit', resolve));
    child.kill('SIGTERM');
    await exited;
  }
  await b?.close();
  await a?.close();
  await dropSchema(PG_URL, schema);
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('a new agent build found by the broker that does not hold the agent', () => {
  it('is announced to the agent on B at once; the agent downloads it from B and restarts into it', async () => {
    const bundle = fs.readFileSync(path.join(work, 'new', 'fleet-agent.mjs'));
    fs.writeFileSync(path.join(artifacts, 'fleet-agent.mjs'), bundle);
    fs.writeFileSync(path.join(artifacts, 'package.json'), JSON.stringify({ name: 'fleet-agent', version: '1.1.0' }));
    await a.broker.services.agentUpdates.checkPublished();
    // The broker holding the agent publishes that very build, and serves it.
    expect(await b.broker.services.agentUpdates.release()).toMatchObject({
      version: '1.1.0',
      sha256: crypto.createHash('sha256').update(bundle).digest('hex'),
      size: bundle.length,
    });
    await eventually(() => versionOnB() === '1.1.0', 60_000, 'the agent back on B as 1.1.0').catch((err: Error) => {
      throw new Error(`${err.message}; agent log:\n${logs.join('').slice(-3000)}`);
    });
    expect(starts).toBe(2);
    expect(logs.join('')).toContain('agent update installed: restarting into it');
  });
});
