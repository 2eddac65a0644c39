/**
 * Several brokers on one PostgreSQL schema (FILE_STORE=db): one broker, its own process, is killed
 * with SIGKILL in the middle of work, then started again on the same DATA_DIR and broker id:
 * - while a large upload streams into it (a live console held by it at the same time);
 * - once a large upload is received, while it writes the file's chunks to the database;
 * - while a stream of commits of 100 changes each goes through it.
 * Afterwards no partial file is visible and no chunk is left without its file, DATA_DIR/tmp is
 * empty, every commit is whole (its 100 changes, its entities, its audit entry) or absent,
 * `audit-verify` passes and no session has two end entries.
 */
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../broker/db/database.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { clusterEnv, spawnBroker, type BrokerProcess } from '../support/cluster.js';
import { connectRemote } from '../support/remote-ws.js';

const HEARTBEAT_MS = 300;
const { schema, env: common } = clusterEnv(HEARTBEAT_MS);
const env = { ...common, FILE_STORE: 'db', SHUTDOWN_DRAIN_MS: '200' };
const VICTIM = 'broker-victim';
const MIB = 1024 * 1024;

let other: TestBroker;
let victim: BrokerProcess;
let dataDir: string;
let db: pg.Client;
let agent: TestAgent;
let device: string;

const tmpEntries = () => fs.readdirSync(path.join(dataDir, 'tmp'));
const tmpBytes = () => tmpEntries().reduce((sum, f) => sum + fs.statSync(path.join(dataDir, 'tmp', f)).size, 0);

async function killVictim(): Promise<void> {
  const exited = new Promise((resolve) => victim.child.once('exit', resolve));
  victim.kill();
  await exited;
}

/** Started again on the same DATA_DIR, broker id and port (its agent comes back to it). */
async function restartVictim(): Promise<void> {
  victim = await spawnBroker(env, VICTIM, { dataDir, ...(victim ? { port: Number(new URL(victim.url).port) } : {}) });
}

/** What must hold after any kill and restart. */
async function checkAfterRestart(): Promise<void> {
  // Interrupted upload bodies are removed at start.
  expect(tmpEntries()).toEqual([]);
  // No file under /kill/ is visible (through either broker), and no chunk is left without its file.
  const nodes = await db.query(`select path from file_nodes where path like '/kill/%'`);
  expect(nodes.rows).toEqual([]);
  const orphans = await db.query(`select count(*)::int as n from file_chunks c where not exists (select 1 from file_nodes f where f.blob_id = c.blob_id)`);
  expect(orphans.rows[0].n).toBe(0);
  for (const base of [victim.url, other.url]) {
    const r = await fetch(`${base}/api/v2/file?path=/kill/big.bin`, { headers: { authorization: `Bearer ${other.adminToken}` } });
    expect(r.status).toBe(404);
  }
  // The audit chain is intact, and no session has two end entries.
  const verifyDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-verify-'));
  const run = spawnSync(process.execPath, [path.resolve('node_modules/tsx/dist/cli.mjs'), 'broker/main.ts', 'audit-verify'], {
    env: {
      PATH: process.env.PATH,
      DATA_DIR: verifyDir,
      DATABASE_URL: PG_URL,
      DATABASE_SCHEMA: schema,
      LOG_LEVEL: 'silent',
    },
    encoding: 'utf8',
  });
  fs.rmSync(verifyDir, { recursive: true, force: true });
  expect(`${run.status} ${run.stdout}${run.stderr}`).toMatch(/^0 /);
  const ends = await db.query(`select ref_id, count(*)::int as n from audit where event like 'remote.%.end' group by ref_id having count(*) > 1`);
  expect(ends.rows).toEqual([]);
}

/** A multipart upload of `size` bytes of /kill/big.bin whose body the caller writes (and may never finish). */
function streamingUpload(base: string, size: number) {
  const boundary = `----kill${crypto.randomBytes(8).toString('hex')}`;
  const head = Buffer.from(
    `--${boundary}\r\ncontent-disposition: form-data; name="path"\r\n\r\n/kill/\r\n` +
      `--${boundary}\r\ncontent-disposition: form-data; name="file"; filename="big.bin"\r\ncontent-type: application/octet-stream\r\n\r\n`,
  );
  const tail = Buffer.from(`\r\n--${boundary}--\r\n`);
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const body = new ReadableStream<Uint8Array>({ start: (c) => void (controller = c) });
  controller.enqueue(head);
  const answer = fetch(`${base}/api/v2/file`, {
    method: 'POST',
    body,
    duplex: 'half',
    headers: {
      authorization: `Bearer ${other.adminToken}`,
      'content-type': `multipart/form-data; boundary=${boundary}`,
      'content-length': String(head.length + size + tail.length),
    },
  } as RequestInit).then(
    (r) => r.status,
    (err: Error) => err,
  );
  let sent = 0;
  return {
    answer,
    /** Writes up to `bytes` more of the file (the tail after the last byte). */
    send(bytes: number): void {
      const n = Math.min(bytes, size - sent);
      if (n > 0) controller.enqueue(crypto.randomBytes(n));
      sent += n;
      if (sent === size) {
        controller.enqueue(tail);
        controller.close();
      }
    },
    get sent() {
      return sent;
    },
  };
}

beforeAll(async () => {
  other = await startTestBroker({ database: 'postgres', env: { ...env, BROKER_ID: 'broker-other' } });
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-kill-'));
  await restartVictim();
  db = new pg.Client({ connectionString: PG_URL });
  await db.connect();
  await db.query(`set search_path to ${schema}`);
  const key = await other.api('POST', '/api/v2/bootstrapkey', { token: other.adminToken, body: { auto_accept: true } });
  agent = startAgent({ broker: victim.url, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.deviceId(60_000);
  await eventually(() => other.broker.services.locator.isConnected(device), 60_000, 'the agent on the victim');
}, 120_000);

afterAll(async () => {
  await agent?.close();
  victim?.kill();
  await other?.close();
  await db?.end();
  await dropSchema(PG_URL, schema);
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

describe('a broker killed with SIGKILL mid-work, then started again', () => {
  it('mid-upload (the body half received) with a live console: no file, tmp emptied, one end for the session', async () => {
    const s = connectRemote(victim.url, 'console', { device_id: device, cols: 80, rows: 24 }, other.adminToken);
    await s.ready;
    const upload = streamingUpload(victim.url, 64 * MIB);
    // Fed 1 MiB at a time as the broker takes it, until 8 MiB are on its disk.
    await eventually(
      () => {
        if (upload.sent < 32 * MIB) upload.send(MIB);
        return tmpBytes() >= 8 * MIB;
      },
      60_000,
      'the upload half received',
    );
    await killVictim();
    expect(await upload.answer).toBeInstanceOf(Error);
    expect((await s.closed).code).not.toBe(1000);
    // The other broker takes the victim for gone and writes the session's end…
    await eventually(async () => (await db.query(`select 1 from audit where event = 'remote.console.end'`)).rows.length > 0, 30_000, 'the end entry');
    // The half-received body is still on the victim's disk until it starts again…
    expect(tmpBytes()).toBeGreaterThan(0);
    // …when it is removed, and the victim writes no second end (checkAfterRestart).
    await restartVictim();
    await eventually(() => other.broker.services.locator.isConnected(device), 60_000, 'the agent back on the victim');
    await checkAfterRestart();
  });

  it('once the upload is received, while its chunks go into the database: no file, no chunk left', async () => {
    const size = 64 * MIB;
    const upload = streamingUpload(victim.url, size);
    await eventually(
      () => {
        upload.send(4 * MIB);
        return upload.sent === size;
      },
      60_000,
      'the upload sent',
    );
    // The body is on the victim's disk in full: its handler now writes chunks in a transaction.
    await eventually(() => tmpBytes() >= size, 60_000, 'the upload received');
    // Between two chunk inserts the victim's connection is idle in its transaction: that counts too
    // (polled for 'active' alone, a fast run of inserts could pass between two polls, and the upload
    // then committed before the kill).
    await eventually(
      async () =>
        (
          await db.query(
            `select 1 from pg_stat_activity where state in ('active', 'idle in transaction') and query ilike '%file_chunks%' and pid <> pg_backend_pid()`,
          )
        ).rows.length > 0,
      30_000,
      'the chunks being written',
    );
    await killVictim();
    expect(await upload.answer).toBeInstanceOf(Error);
    await restartVictim();
    await checkAfterRestart();
  });

  it('while commits of 100 changes stream through it: each commit whole or absent', async () => {
    const tag = crypto.randomBytes(3).toString('hex');
    const commit = (n: number) =>
      fetch(`${victim.url}/api/v2/commit`, {
        method: 'POST',
        headers: { authorization: `Bearer ${other.adminToken}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          action: 'commit',
          message: `kill ${tag} ${n}`,
          changes: Array.from({ length: 100 }, (_, i) => ({
            tag: `k${tag}-${n}-${i}`,
            formtype: 'parameters',
            extend: true,
            config: { parameters: [{ key: 'n', value: String(n) }], secrets: [] },
          })),
        }),
      }).then(
        (r) => r.status,
        (err: Error) => err,
      );
    let done = 0;
    let next = 0;
    const results: (number | Error)[] = [];
    let killed = false;
    // Four commits in flight at any time; the victim is killed once five have been answered.
    const lane = async () => {
      while (!killed) {
        const r = await commit(next++);
        results.push(r);
        if (r === 200) done += 1;
      }
    };
    const lanes = Promise.all([lane(), lane(), lane(), lane()]);
    await eventually(() => done >= 5, 60_000, 'five commits through the victim');
    killed = true;
    await killVictim();
    await lanes;
    expect(results.filter((r) => r instanceof Error).length).toBeGreaterThan(0);

    const commits = await db.query(`select sha, audit_id from config_commits where message like $1`, [`kill ${tag} %`]);
    expect(commits.rows.length).toBeGreaterThanOrEqual(done);
    for (const c of commits.rows) {
      const changes = await db.query(`select count(*)::int as n from config_changes where commit_sha = $1 and status = 'committed'`, [c.sha]);
      expect(changes.rows[0].n).toBe(100);
      const entities = await db.query(`select count(*)::int as n from config_entities where commit_sha = $1`, [c.sha]);
      expect(entities.rows[0].n).toBe(100);
      const audit = await db.query(`select sha from audit where id = $1`, [c.audit_id]);
      expect(audit.rows[0]?.sha).toBe(c.sha);
    }
    // Nothing of a commit cut short: no entity of its tags, no change of it left staged.
    const entities = await db.query(`select count(*)::int as n from config_entities where entity_id like $1`, [`k${tag}-%`]);
    expect(entities.rows[0].n).toBe(commits.rows.length * 100);
    const staged = await db.query(`select count(*)::int as n from config_changes where entity_id like $1 and status <> 'committed'`, [`k${tag}-%`]);
    expect(staged.rows[0].n).toBe(0);
    await restartVictim();
    await checkAfterRestart();
  });
});
