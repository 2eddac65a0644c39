/**
 * The PostgreSQL schemas of the test brokers (support/broker.ts): named by the run that made them
 * (`t_<run>_<random>`, the run being the vitest process, parent of every worker), dropped by a
 * broker's close in the background, and swept by this global set-up: at the start, the schemas of
 * runs whose process is gone (a run killed or crashed before its tear-down); at the end, this run's
 * own, those whose drop a worker did not see through before it ended included. No schema of a run
 * outlives it (but for a run killed outright, whose schemas the next run sweeps), and a broker's
 * close does not wait for PostgreSQL to drop its tables (75–120 ms a schema).
 *
 * A database the tests cannot reach (a run of the SQLite files only, with no PostgreSQL) is not
 * an error here: there is nothing of ours to sweep.
 */
import crypto from 'node:crypto';
import pg from 'pg';

/** What names a test broker's schema: its run, and random hex. Nothing else is ever dropped. */
const SCHEMA = /^t_([1-9][0-9]{0,9})_[0-9a-f]{12}$/;

/** Under vitest, the run's process (every worker's parent); outside (benches, scripts), this process. */
export function testRun(): number {
  return process.env.VITEST ? process.ppid : process.pid;
}

/** A new test broker's schema name, of this run. */
export function schemaName(run = testRun()): string {
  return `t_${run}_${crypto.randomBytes(6).toString('hex')}`;
}

/** Whether the process `pid` exists on this machine (another user's counts: it may not be signalled). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/**
 * Drops the test brokers' schemas whose run `gone` says is over; returns their names. Only names
 * of the test brokers' form are looked at.
 */
export async function sweepSchemas(url: string, gone: (run: number) => boolean): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  try {
    await client.connect();
  } catch {
    return [];
  }
  const dropped: string[] = [];
  try {
    const { rows } = await client.query<{ name: string }>(`SELECT nspname AS name FROM pg_namespace WHERE nspname LIKE 't\\_%\\_%'`);
    for (const { name } of rows) {
      const match = SCHEMA.exec(name);
      if (!match || !gone(Number(match[1]))) continue;
      // Another run's sweep may drop it at the same moment: IF EXISTS, and its error is not ours.
      await client.query(`DROP SCHEMA IF EXISTS "${name}" CASCADE`).then(
        () => dropped.push(name),
        () => {},
      );
    }
  } finally {
    await client.end();
  }
  return dropped;
}

const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** vitest's global set-up: sweep the runs that are gone; at the end, this run's own schemas too. */
export default async function setup(): Promise<() => Promise<void>> {
  await sweepSchemas(PG_URL, (run) => run !== process.pid && !alive(run));
  return async () => {
    await sweepSchemas(PG_URL, (run) => run === process.pid || !alive(run));
  };
}
