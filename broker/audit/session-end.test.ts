import crypto from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { dropSchema, openStore, type Store } from '../db/database.js';
import { AuditService } from './service.js';

/** The local PostgreSQL of the tests (as test/support/broker.ts): the chain lock there is an advisory lock. */
const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

let store: Store;
let schema = '';

const start = {
  event: 'remote.console',
  user: { id: 'u1', email: 'op@example.com' },
  deviceId: 'a'.repeat(64),
  action: 'console',
  options: {},
  allowed: true,
  reason: 'allowed',
  ip: '192.0.2.1',
  source: 'api' as const,
};
const ends = async (startId: number) =>
  store.db.selectFrom('audit').select(['id', 'reason']).where('ref_id', '=', startId).where('event', '=', 'remote.console.end').execute();

describe.each(['sqlite', 'postgres'] as const)('one session, one end entry, whoever writes it (%s)', (database) => {
  beforeEach(async () => {
    schema = database === 'postgres' ? `t_end_${crypto.randomBytes(5).toString('hex')}` : '';
    store = database === 'postgres' ? await openStore(PG_URL, schema) : await openStore('sqlite::memory:');
  });
  afterEach(async () => {
    await store.close();
    if (schema) await dropSchema(PG_URL, schema);
  });

  it('the holding broker ending a session another broker already ended (a partition) writes no second end', async () => {
    const holder = new AuditService(store.db, store.dialect, { brokerId: 'broker-cut' });
    const other = new AuditService(store.db, store.dialect, { brokerId: 'broker-other' });
    const id = await holder.recordRemoteStart(start);
    // The other broker took the holder for gone.
    expect(await other.closeOpenSessions('broker broker-cut stopped (no heartbeat)', ['broker-other'])).toBe(1);
    // The holder, back, ends the session as usual.
    await holder.recordRemoteEnd(id, { durationMs: 1000, bytesIn: 1, bytesOut: 2, reason: 'exit 0' });
    expect(await ends(id)).toEqual([expect.objectContaining({ reason: 'broker broker-cut stopped (no heartbeat)' })]);
    expect((await holder.verify()).ok).toBe(true);
  });

  it('ends written at once by the holder and by a sweep: one of them', async () => {
    const holder = new AuditService(store.db, store.dialect, { brokerId: 'broker-cut' });
    const other = new AuditService(store.db, store.dialect, { brokerId: 'broker-other' });
    const id = await holder.recordRemoteStart(start);
    await Promise.all([
      holder.recordRemoteEnd(id, { durationMs: 1000, bytesIn: 1, bytesOut: 2, reason: 'exit 0' }),
      other.closeOpenSessions('broker broker-cut stopped (no heartbeat)', ['broker-other']),
      holder.recordRemoteEnd(id, { durationMs: 1000, bytesIn: 1, bytesOut: 2, reason: 'exit 0' }),
    ]);
    expect(await ends(id)).toHaveLength(1);
    // and the start is no longer open for anyone
    expect(await other.closeOpenSessions('again', [])).toBe(0);
  });
});
