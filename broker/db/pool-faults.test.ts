/**
 * The PostgreSQL pool when the connection to the database is lost, through a TCP proxy the test
 * controls: a connection lost while the broker holds it between two statements (a transaction)
 * fails that work with an error, never the process, and the store works again once the database
 * can be reached.
 */
import crypto from 'node:crypto';
import { sql } from 'kysely';
import { afterEach, describe, expect, it } from 'vitest';
import { startTcpProxy, type TcpProxy } from '../../test/support/tcp-proxy.js';
import { dropSchema, openStore, type Store } from './database.js';

/** The local PostgreSQL of the tests (as test/support/broker.ts). */
const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

let proxy: TcpProxy | undefined;
let store: Store | undefined;
let schema = '';

afterEach(async () => {
  proxy?.heal();
  await store?.close();
  await proxy?.close();
  if (schema) await dropSchema(PG_URL, schema);
  proxy = undefined;
  store = undefined;
});

describe('a database connection lost while in use', () => {
  it('fails the work holding it, not the process; the store answers again once the database is back', async () => {
    const target = new URL(PG_URL);
    proxy = await startTcpProxy(target.hostname, Number(target.port || 5432));
    schema = `t_pool_${crypto.randomBytes(5).toString('hex')}`;
    store = await openStore(proxy.url(PG_URL), schema);
    const db = store.db;
    // Uncaught, a lost connection's 'error' event would end the process (and fail this run).
    const uncaught: Error[] = [];
    const onUncaught = (err: Error) => uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    try {
      const work = db.transaction().execute(async (trx) => {
        await sql`select 1`.execute(trx);
        // Between two statements, the connection held by this transaction is cut.
        proxy?.refuse();
        await new Promise((resolve) => setTimeout(resolve, 200));
        await sql`select 2`.execute(trx);
      });
      await expect(work).rejects.toThrow();
      proxy.heal();
      const answer = await sql<{ n: number }>`select 42 as n`.execute(db);
      expect(answer.rows[0].n).toBe(42);
      // Let a late 'error' event of the cut connection come out, if any.
      await new Promise((resolve) => setTimeout(resolve, 100));
      expect(uncaught).toEqual([]);
    } finally {
      process.off('uncaughtException', onUncaught);
    }
  });
});
