/**
 * Across brokers (`npm run bench -- cluster`): two brokers on one PostgreSQL schema, the agent on
 * broker A. Each figure next to its baseline in the same run:
 *  - one tunnel's throughput with the user on B (B → peer link → A → agent) as a ratio of the user
 *    on A (target >= 0.8),
 *  - the console keystroke round trip added by the peer link (user on B minus user on A).
 * Broker A runs in this process, broker B in its own (as on two machines), the agent and the load
 * generators (bench/remote-client.ts) in theirs.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { dropSchema } from '../broker/db/database.js';
import { deviceIdOf } from '../shared/device-key.js';
import { eventually, startAgent, type TestAgent } from '../test/support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../test/support/broker.js';
import { clusterEnv, spawnBroker, type BrokerProcess } from '../test/support/cluster.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const CLIENT = path.join(ROOT, 'bench', 'remote-client.ts');
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const KEYSTROKES = Number(process.env.BENCH_KEYSTROKES ?? 1000);

type Log = (line: string) => void;
type Figures = Record<'mbps' | 'p50' | 'p99', number>;

function task(spec: Record<string, unknown>): Promise<Figures> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLIENT, JSON.stringify(spec)], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    child.on('close', (code) => {
      if (code !== 0) return reject(new Error(`${String(spec.mode)} failed: ${err.trim() || `exit ${code}`}`));
      resolve(JSON.parse(out.trim().split('\n').at(-1) as string) as Figures);
    });
  });
}

function sinkServer(): Promise<{ port: number; child: ChildProcess }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', CLIENT, JSON.stringify({ mode: 'sink' })], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    child.stdout?.once('data', (d) => resolve({ port: (JSON.parse(String(d)) as { port: number }).port, child }));
    child.once('exit', (code) => reject(new Error(`sink exited ${code}`)));
  });
}

const mb = (f: Figures) => `${f.mbps.toFixed(0)} MB/s`;
const ms = (v: number) => `${v.toFixed(3)} ms`;

export async function benchCluster(log: Log): Promise<void> {
  const { schema, env } = clusterEnv(1000);
  log('cluster: broker A here, broker B in its own process, one PostgreSQL schema; the agent on A');
  let a: TestBroker | undefined;
  let b: BrokerProcess | undefined;
  let agent: TestAgent | undefined;
  let sink: ChildProcess | undefined;
  try {
    a = await startTestBroker({ database: 'postgres', env: { ...env, BROKER_ID: 'bench-a' } });
    b = await spawnBroker(env, 'bench-b');
    const key = await a.api('POST', '/api/v2/bootstrapkey', { token: a.adminToken, body: { auto_accept: true } });
    agent = startAgent({ broker: a.url, bootstrapKey: Object.keys(key.body)[0], args: ['--log-level', 'warn'] });
    const keyFile = path.join(agent.stateDir, 'device-key.pem');
    await eventually(() => fs.existsSync(keyFile), 20_000, 'the agent key');
    const device = deviceIdOf(crypto.createPublicKey(fs.readFileSync(keyFile)));
    const brokerA = a;
    await eventually(() => brokerA.broker.services.agents.isConnected(device), 20_000, 'the agent to connect');
    const bUrl = b.url;
    const token = a.adminToken; // one JWT secret: good on both
    await eventually(
      async () => (await fetch(`${bUrl}/api/v2/device/${device}/status`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.json())).connected,
      20_000,
      'broker B to see the agent',
    );
    const started = await sinkServer();
    sink = started.child;

    log(`tunnel throughput, 1 stream, ${SECONDS} s each`);
    const onA = await task({ mode: 'throughput', via: 'tunnel', url: a.url, token, device, port: started.port, seconds: SECONDS, streams: 1 });
    const onB = await task({ mode: 'throughput', via: 'tunnel', url: bUrl, token, device, port: started.port, seconds: SECONDS, streams: 1 });
    log(`  user on A (single broker): ${mb(onA)}`);
    log(`  user on B, agent on A (peer link): ${mb(onB)} = ${(onB.mbps / onA.mbps).toFixed(2)} of single broker (target >= 0.8)`);

    log(`console keystroke round trip (${KEYSTROKES} keystrokes)`);
    const rttA = await task({ mode: 'rtt', via: 'console', url: a.url, token, device, count: KEYSTROKES });
    const rttB = await task({ mode: 'rtt', via: 'console', url: bUrl, token, device, count: KEYSTROKES });
    log(`  user on A: p50 ${ms(rttA.p50)}, p99 ${ms(rttA.p99)}`);
    log(`  user on B: p50 ${ms(rttB.p50)}, p99 ${ms(rttB.p99)}`);
    log(`  added by the peer link: p50 ${ms(rttB.p50 - rttA.p50)}, p99 ${ms(rttB.p99 - rttA.p99)}`);
  } finally {
    sink?.kill();
    await agent?.close();
    b?.kill();
    await a?.close();
    await dropSchema(PG_URL, schema);
  }
}

// `tsx bench/cluster.ts` runs this group alone.
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  benchCluster((line) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`)).then(
    () => process.exit(0),
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
