import { spawnSync } from 'node:child_process';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { PG_URL, startTestBroker } from './broker.js';
import { clusterEnv } from './cluster.js';
import setup, { schemaName, sweepSchemas, testRun } from './pg-schemas.js';

/** The pid of a process that has ended (a child run to its end). */
const deadPid = () => spawnSync(process.execPath, ['-e', '0']).pid!;

const client = new pg.Client({ connectionString: PG_URL });
const exists = async (schema: string) => (await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])).rowCount === 1;

afterAll(async () => {
  await client.end();
});

describe("the test brokers' PostgreSQL schemas", () => {
  it('are named by the run, and a broker closed under vitest leaves its schema to be dropped', async () => {
    await client.connect();
    expect(schemaName()).toMatch(new RegExp(`^t_${testRun()}_[0-9a-f]{12}$`));
    const broker = await startTestBroker({ database: 'postgres' });
    expect(broker.schema.startsWith(`t_${testRun()}_`)).toBe(true);
    // A test cluster's schema too (support/cluster.ts): its brokers are killed, the sweep drops it.
    expect(clusterEnv().schema).toMatch(new RegExp(`^t_${testRun()}_[0-9a-f]{12}$`));
    await broker.close();
    await expect.poll(() => exists(broker.schema)).toBe(false);
  });

  it("at a run's start sweep the runs that are gone; at its end this run's own; never another name", async () => {
    const dead = deadPid();
    const gone = schemaName(dead);
    const mine = schemaName(process.pid);
    const live = schemaName(process.ppid);
    const other = `t_${dead}_not_ours`;
    for (const s of [gone, mine, live, other]) await client.query(`CREATE SCHEMA "${s}"`);
    try {
      // Set-up (as the run's process, here this one): the dead run's schema only.
      const teardown = await setup();
      expect(await Promise.all([gone, mine, live, other].map(exists))).toEqual([false, true, true, true]);
      // Tear-down: this run's too.
      await teardown();
      expect(await Promise.all([mine, live, other].map(exists))).toEqual([false, true, true]);
      expect(await sweepSchemas(PG_URL, (run) => run === process.ppid)).toContain(live);
    } finally {
      for (const s of [gone, mine, live, other]) await client.query(`DROP SCHEMA IF EXISTS "${s}" CASCADE`);
    }
  });

  it('sweep nothing from a database they cannot reach', async () => {
    expect(await sweepSchemas('postgres://postgres@127.0.0.1:1/none', () => true)).toEqual([]);
  });
});
