import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openStore, PG_TIMEOUTS, pgTimeouts, type Store } from './database.js';

let store: Store | undefined;
let dir: string | undefined;
afterEach(async () => {
  await store?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
  store = undefined;
  dir = undefined;
});

async function sqliteStore(): Promise<Store> {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-db-'));
  store = await openStore(`sqlite:${path.join(dir, 'test.sqlite')}`);
  return store;
}

const setting = (s: Store, key: string) => s.db.selectFrom('settings').select('value').where('key', '=', key).executeTakeFirst();

describe('the ambient transaction', () => {
  it('runs afterRollback tasks only when the transaction rolls back, never outside one', async () => {
    const s = await sqliteStore();
    const ran: string[] = [];
    s.afterRollback(() => ran.push('outside'));
    await s.transaction(async () => {
      s.afterRollback(() => ran.push('committed'));
    });
    await expect(
      s.transaction(async () => {
        s.afterRollback(() => ran.push('rolled back'));
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
    expect(ran).toEqual(['rolled back']);
  });

  it('is joined by the shared Db and by nested transactions, and commits as a whole', async () => {
    const s = await sqliteStore();
    await s.transaction(async () => {
      // On SQLite's single connection either of these would wait forever outside the open transaction.
      await s.db.insertInto('settings').values({ key: 'a', value: '1' }).execute();
      await s.db.transaction().execute(async (trx) => {
        await trx.insertInto('settings').values({ key: 'b', value: '2' }).execute();
      });
      expect(await setting(s, 'a')).toEqual({ value: '1' });
    });
    expect(await setting(s, 'b')).toEqual({ value: '2' });
  });

  it('rolls back everything, nested work included, when the work throws', async () => {
    const s = await sqliteStore();
    await expect(
      s.transaction(async () => {
        await s.db.insertInto('settings').values({ key: 'a', value: '1' }).execute();
        await s.db.transaction().execute((trx) => trx.insertInto('settings').values({ key: 'b', value: '2' }).execute());
        throw new Error('refused');
      }),
    ).rejects.toThrow('refused');
    expect(await setting(s, 'a')).toBeUndefined();
    expect(await setting(s, 'b')).toBeUndefined();
  });

  it('is left behind by a timer set up inside it that fires after the commit', async () => {
    const s = await sqliteStore();
    let later!: Promise<unknown>;
    await s.transaction(async () => {
      later = new Promise((resolve, reject) =>
        setTimeout(() => s.db.insertInto('settings').values({ key: 'late', value: '1' }).execute().then(resolve, reject), 10),
      );
    });
    await later;
    expect(await setting(s, 'late')).toEqual({ value: '1' });
  });

  it('runs after-commit tasks once committed, never after a rollback', async () => {
    const s = await sqliteStore();
    const ran: string[] = [];
    await s.transaction(async () => {
      s.afterCommit(() => ran.push('committed'));
      expect(ran).toEqual([]);
      expect(s.inTransaction()).toBe(true);
    });
    await s
      .transaction(async () => {
        s.afterCommit(() => ran.push('rolled back'));
        throw new Error('no');
      })
      .catch(() => undefined);
    expect(ran).toEqual(['committed']);
    expect(s.inTransaction()).toBe(false);
  });
});

describe('the PostgreSQL timeouts', () => {
  it('keep PG_TIMEOUTS by default; another reply timeout moves the statement timeout with it, 5 s under', () => {
    expect(pgTimeouts()).toEqual(PG_TIMEOUTS);
    expect(pgTimeouts(20_000)).toEqual({ ...PG_TIMEOUTS, query_timeout: 20_000, statement_timeout: 15_000 });
  });
});
