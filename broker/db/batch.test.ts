import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { AgentPresence } from '../agents/presence.js';
import { WriteBatch } from './batch.js';
import { openStore, type Store } from './database.js';

let store: Store | undefined;
let dir: string | undefined;
afterEach(async () => {
  await store?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
  store = undefined;
  dir = undefined;
});

/** A SQLite store whose transactions are counted. */
async function countedStore(): Promise<{ s: Store; transactions: () => number }> {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-batch-'));
  const s = await openStore(`sqlite:${path.join(dir, 'test.sqlite')}`);
  store = s;
  let count = 0;
  const transaction: Store['transaction'] = (work) => {
    count++;
    return s.transaction(work);
  };
  return { s: { ...s, transaction }, transactions: () => count };
}

const put =
  (s: Store, key: string, value = 'v') =>
  () =>
    s.db.insertInto('settings').values({ key, value }).execute();
const keys = async (s: Store) => (await s.db.selectFrom('settings').select('key').where('key', 'like', 'batch-%').orderBy('key').execute()).map((r) => r.key);

describe('WriteBatch', () => {
  it('commits the writes queued in one turn in one transaction, each caller getting its own result', async () => {
    const { s, transactions } = await countedStore();
    const batch = new WriteBatch(s);
    const results = await Promise.all(['batch-a', 'batch-b', 'batch-c'].map((k) => batch.run(async () => (await put(s, k)(), k.toUpperCase()))));
    expect(results).toEqual(['BATCH-A', 'BATCH-B', 'BATCH-C']);
    expect(transactions()).toBe(1);
    expect(await keys(s)).toEqual(['batch-a', 'batch-b', 'batch-c']);
  });

  it('holds at most its limit in one transaction', async () => {
    const { s, transactions } = await countedStore();
    const batch = new WriteBatch(s, 2);
    await Promise.all(['batch-1', 'batch-2', 'batch-3', 'batch-4', 'batch-5'].map((k) => batch.run(put(s, k))));
    // Two of two, then the last one alone (a single write needs no transaction of its own).
    expect(transactions()).toBe(2);
    expect(await keys(s)).toHaveLength(5);
  });

  it('lets a refused write fail alone: the others of its batch are kept', async () => {
    const { s } = await countedStore();
    const batch = new WriteBatch(s);
    await put(s, 'batch-taken')();
    const outcomes = await Promise.allSettled([batch.run(put(s, 'batch-x')), batch.run(put(s, 'batch-taken')), batch.run(put(s, 'batch-y'))]);
    expect(outcomes.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled']);
    expect(await keys(s)).toEqual(['batch-taken', 'batch-x', 'batch-y']);
  });

  it('runs a write queued inside a transaction at once, in it (a queued one would wait for the connection it holds)', async () => {
    const { s, transactions } = await countedStore();
    const batch = new WriteBatch(s);
    await expect(
      s.transaction(async () => {
        await batch.run(put(s, 'batch-inner'));
        throw new Error('rolled back');
      }),
    ).rejects.toThrow('rolled back');
    expect(transactions()).toBe(1);
    expect(await keys(s)).toEqual([]);
  });
});

describe("agents' contact at connect", () => {
  it('is written with the other connects of the same turn, in one transaction', async () => {
    const { s, transactions } = await countedStore();
    const presence = new AgentPresence(s.db, pino({ level: 'silent' }), () => [], new WriteBatch(s));
    await Promise.all(['d1', 'd2', 'd3', 'd4'].map((id) => presence.touch(id, { last_seen: '2026-11-27T00:00:00.000Z', last_ip: '192.0.2.1' })));
    expect(transactions()).toBe(1);
  });
});
