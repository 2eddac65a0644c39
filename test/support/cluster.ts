/**
 * Several brokers on one PostgreSQL schema, for tests and benchmarks: the environment they share,
 * and a broker as its own process (so it can be killed with SIGKILL, or load its own CPU).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { eventually } from './agent.js';
import { PG_URL } from './broker.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** What every broker of one test cluster shares: the schema, CLUSTER_SECRET and JWT_SECRET. */
export function clusterEnv(heartbeatMs = 300): { schema: string; secret: string; env: Record<string, string> } {
  const schema = `t_cluster_${crypto.randomBytes(5).toString('hex')}`;
  const secret = crypto.randomBytes(32).toString('hex');
  return {
    schema,
    secret,
    env: {
      DATABASE_URL: PG_URL,
      DATABASE_SCHEMA: schema,
      CLUSTER_SECRET: secret,
      JWT_SECRET: crypto.randomBytes(32).toString('hex'),
      CLUSTER_HEARTBEAT_MS: String(heartbeatMs),
    },
  };
}

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export interface BrokerProcess {
  url: string;
  child: ChildProcess;
  output: string[];
  /** SIGKILL, and its data directory removed (unless it was given: then it stays for a restart). */
  kill(): void;
}

/** A broker as its own process (node with the tsx loader: one process), resolved once it answers HTTP. */
export async function spawnBroker(env: Record<string, string>, id: string, given?: { dataDir: string; port?: number }): Promise<BrokerProcess> {
  const port = given?.port ?? (await freePort());
  const dataDir = given?.dataDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cluster-'));
  const output: string[] = [];
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(ROOT, 'broker', 'main.ts')], {
    cwd: ROOT,
    // As in startTestBroker: tests burst from 127.0.0.1, no accept rate unless a test sets one.
    env: { ...process.env, ACCEPT_RATE_PER_ADDRESS: '0', ...env, BROKER_ID: id, PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout?.on('data', (d) => output.push(String(d)));
  child.stderr?.on('data', (d) => output.push(String(d)));
  const kill = () => {
    child.kill('SIGKILL');
    if (!given) fs.rmSync(dataDir, { recursive: true, force: true });
  };
  const url = `http://127.0.0.1:${port}`;
  try {
    await eventually(
      async () => {
        if (child.exitCode !== null) throw new Error(`broker ${id} exited: ${output.join('')}`);
        return (await fetch(`${url}/api/v2/openapi.json`).catch(() => undefined))?.status === 200;
      },
      60_000,
      `broker ${id} to listen`,
    );
  } catch (err) {
    kill();
    throw err;
  }
  return { url, child, output, kill };
}
