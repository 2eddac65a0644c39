import { AsyncLocalStorage } from 'node:async_hooks';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { sql } from 'kysely';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { dropSchema, openStore, PG_TIMEOUTS, pgTimeouts, type Store } from './database.js';

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

describe('the ambient transaction outside transactions', () => {
  // Node 20's AsyncLocalStorage carries a store to each new async resource in an async hook's init,
  // through its `_propagate`; later versions carry it without hooks and have no `_propagate`.
  type Propagating = { _propagate?: (...args: unknown[]) => void };
  const proto = AsyncLocalStorage.prototype as unknown as Propagating;

  it('leaves no async hook running once no transaction runs: a tick, a timer or a promise outside one pays none', async () => {
    const s = await sqliteStore();
    const runs = vi.spyOn(AsyncLocalStorage.prototype, 'run');
    await s.transaction(async () => {
      await setting(s, 'a');
      await new Promise((resolve) => setTimeout(resolve, 1));
      expect(s.inTransaction()).toBe(true);
    });
    await s.transaction(async (trx) => trx.insertInto('settings').values({ key: 'b', value: '1' }).execute());
    const ours = new Set(runs.mock.contexts);
    expect(ours.size).toBe(1);
    // Node turns its promise hook off a microtask after the async hook.
    await new Promise((resolve) => setImmediate(resolve));
    let propagated = 0;
    if (typeof proto._propagate === 'function') {
      const propagate = vi.spyOn(proto as Required<Propagating>, '_propagate');
      for (let i = 0; i < 100; i++) {
        await new Promise((resolve) => setImmediate(resolve));
        await new Promise<void>((resolve) => process.nextTick(resolve));
        await setting(s, 'b');
      }
      propagated = propagate.mock.contexts.filter((storage) => ours.has(storage)).length;
    }
    expect(propagated).toBe(0);
    expect(s.inTransaction()).toBe(false);
    // And the next transaction still carries its own across awaits, timers and nested calls.
    await s.transaction(async () => {
      await new Promise((resolve) => setTimeout(resolve, 1));
      await s.transaction(async () => s.db.insertInto('settings').values({ key: 'c', value: '1' }).execute());
      expect(s.inTransaction()).toBe(true);
    });
    expect(await setting(s, 'c')).toEqual({ value: '1' });
  });

  it('keeps a transaction that waited for another its own context once that one ends', async () => {
    const s = await sqliteStore();
    const seen: string[] = [];
    // SQLite has one connection: the second waits for the first to commit before it begins.
    const first = s.transaction(async () => {
      await new Promise((resolve) => setTimeout(resolve, 1));
      await s.db.insertInto('settings').values({ key: 'first', value: '1' }).execute();
      seen.push(`first ${s.inTransaction()}`);
    });
    const second = s.transaction(async () => {
      await new Promise((resolve) => setTimeout(resolve, 1));
      await s.transaction(async () => s.db.insertInto('settings').values({ key: 'second', value: '1' }).execute());
      seen.push(`second ${s.inTransaction()}`);
      throw new Error('refused');
    });
    await first;
    await expect(second).rejects.toThrow('refused');
    expect(seen).toEqual(['first true', 'second true']);
    expect(await setting(s, 'first')).toEqual({ value: '1' });
    // The nested insert joined the second transaction and went with its rollback.
    expect(await setting(s, 'second')).toBeUndefined();
    expect(s.inTransaction()).toBe(false);
  });
});

describe('opening a store that records every migration', () => {
  it("on SQLite sends one statement (the migrations it records), not the migrator's look through the catalog", async () => {
    const s = await sqliteStore();
    expect(s.statements()).toBeGreaterThan(20); // a new file: every migration ran
    await s.close();
    store = await openStore(`sqlite:${path.join(dir!, 'test.sqlite')}`);
    expect(store.statements()).toBe(1);
    expect((await setting(store, 'no-such-key')) ?? null).toBeNull();
  });

  it("on PostgreSQL sends one statement, in the store's own schema, beside schemas that lack the tables", async () => {
    const url = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
    const schema = `t_reopen_${process.pid}`;
    const empty = `${schema}_empty`;
    try {
      await (await openStore(url, schema)).close();
      store = await openStore(url, schema);
      expect(store.statements()).toBe(1);
      await store.close();
      // A schema of its own with no migration table: migrated in full, not taken as current.
      store = await openStore(url, empty);
      expect((await sql<{ n: string }>`SELECT count(*) AS n FROM kysely_migration`.execute(store.db)).rows[0].n).not.toBe('0');
    } finally {
      await store?.close();
      store = undefined;
      await dropSchema(url, schema);
      await dropSchema(url, empty);
    }
  });
});

describe('the PostgreSQL timeouts', () => {
  it('keep PG_TIMEOUTS by default; another reply timeout moves the statement timeout with it, 5 s under', () => {
    expect(pgTimeouts()).toEqual(PG_TIMEOUTS);
    expect(pgTimeouts(20_000)).toEqual({ ...PG_TIMEOUTS, query_timeout: 20_000, statement_timeout: 15_000 });
  });
});
