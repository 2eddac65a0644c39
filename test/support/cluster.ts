/**
 * Several brokers on one PostgreSQL schema, for tests and benchmarks: the environment they share,
 * and a broker as its own process (so it can be killed with SIGKILL, or load its own CPU).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { eventually } from './agent.js';
import { PG_URL } from './broker.js';
import { schemaName } from './pg-schemas.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/** What every broker of one test cluster shares: the schema, CLUSTER_SECRET and JWT_SECRET. */
export function clusterEnv(heartbeatMs = 300): { schema: string; secret: string; env: Record<string, string> } {
  const schema = schemaName();
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
export async function spawnBroker(
  env: Record<string, string>,
  id: string,
  given?: { dataDir?: string; port?: number; listenTimeoutMs?: number },
): Promise<BrokerProcess> {
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
    if (!given?.dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
  };
  const url = `http://127.0.0.1:${port}`;
  try {
    await eventually(
      async () => {
        if (child.exitCode !== null) throw new Error(`broker ${id} exited: ${output.join('')}`);
        return (await fetch(`${url}/api/v2/openapi.json`).catch(() => undefined))?.status === 200;
      },
      given?.listenTimeoutMs ?? 60_000,
      `broker ${id} to listen`,
    );
  } catch (err) {
    kill();
    throw new Error(`${(err as Error).message}; its output:\n${output.join('').slice(-4000)}`);
  }
  return { url, child, output, kill };
}

/**
 * What must hold on a cluster's schema after any fault: `audit-verify` (the broker's own command, as
 * an operator runs it) passes, and no remote session has two end entries. Answers what is wrong, or
 * an empty list.
 */
export async function auditProblems(schema: string): Promise<string[]> {
  const problems: string[] = [];
  const verifyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-verify-'));
  try {
    const run = spawnSync(process.execPath, [path.join(ROOT, 'node_modules', 'tsx', 'dist', 'cli.mjs'), path.join(ROOT, 'broker', 'main.ts'), 'audit-verify'], {
      cwd: ROOT,
      env: { PATH: process.env.PATH, DATA_DIR: verifyDir, DATABASE_URL: PG_URL, DATABASE_SCHEMA: schema, LOG_LEVEL: 'silent' },
      encoding: 'utf8',
    });
    if (run.status !== 0) problems.push(`audit-verify exited ${run.status}: ${run.stdout}${run.stderr}`);
  } finally {
    fs.rmSync(verifyDir, { recursive: true, force: true });
  }
  const db = new pg.Client({ connectionString: PG_URL });
  await db.connect();
  try {
    const twice = await db.query(
      `select ref_id, count(*)::int as n from "${schema}".audit where event like 'remote.%.end' group by ref_id having count(*) > 1`,
    );
    for (const row of twice.rows) problems.push(`session ${row.ref_id} has ${row.n} end entries`);
  } finally {
    await db.end();
  }
  return problems;
}
