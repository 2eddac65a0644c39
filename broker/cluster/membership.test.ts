/**
 * Liveness of the other brokers is judged from this broker's reads of their heartbeats: a broker
 * whose own reads are late (a slow tick on a loaded machine) never takes a healthy peer for gone,
 * and a peer whose heartbeat stopped is gone at the first read the expiry after its last change.
 */
import { EventEmitter } from 'node:events';
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { openStore, type Store } from '../db/database.js';
import { Membership } from './membership.js';

const EXPIRY = 3000;
let store: Store;
let members: Membership;
let dropped: string[];

/** The membership of broker `me` on the test's database. */
const membership = (me: string, dropLink: (peer: string) => void = () => {}) =>
  new Membership({
    db: store.db,
    log: pino({ level: 'silent' }),
    me,
    expiryMs: EXPIRY,
    isClosing: () => false,
    presence: new EventEmitter(),
    publish: async () => {},
    dropLink,
  });

/** The other broker's heartbeat, as it would write it. */
const beat = (at: number) => store.db.updateTable('cluster_brokers').set({ heartbeat_at: at }).where('broker_id', '=', 'other').execute();

beforeEach(async () => {
  vi.useFakeTimers({ toFake: ['Date'] });
  vi.setSystemTime(1_000_000);
  store = await openStore('sqlite::memory:');
  dropped = [];
  members = membership('me', (peer) => dropped.push(peer));
  await store.db
    .insertInto('cluster_brokers')
    .values({ broker_id: 'other', peer_url: 'ws://other', started_at: new Date().toISOString(), heartbeat_at: Date.now() })
    .execute();
  await members.loadBrokers();
  members.heard({ e: 'presence', broker: 'other', device: 'dev-1', on: true });
});

afterEach(async () => {
  vi.useRealTimers();
  await store.close();
});

describe('the other brokers’ liveness', () => {
  it('stays alive while this broker reads late, however long since its last read', async () => {
    vi.setSystemTime(1_000_000 + 10 * EXPIRY);
    // No read since: nothing says the other broker stopped.
    expect(members.ownerOf('dev-1')).toEqual({ id: 'other', url: 'ws://other' });
    expect(members.liveBrokers()).toEqual(['me', 'other']);
    expect(members.silent()).toEqual([]);
    // The late read finds its heartbeat moved on: alive.
    await beat(Date.now());
    await members.loadBrokers();
    expect(members.silent()).toEqual([]);
    expect(members.ownerOf('dev-1')?.id).toBe('other');
  });

  it('a read sooner than the expiry after the last change that finds it unchanged leaves it alive', async () => {
    vi.setSystemTime(1_000_000 + EXPIRY - 1);
    await members.loadBrokers();
    expect(members.silent()).toEqual([]);
    expect(members.ownerOf('dev-1')?.id).toBe('other');
  });

  it('is gone at the first read the expiry or more after its last change that finds it unchanged', async () => {
    vi.setSystemTime(1_000_500);
    await beat(Date.now());
    await members.loadBrokers(); // changed: last change now at 1_000_500
    vi.setSystemTime(1_000_500 + EXPIRY);
    expect(members.silent()).toEqual([]);
    await members.loadBrokers();
    expect(members.silent()).toEqual([{ id: 'other', heartbeat: 1_000_500 }]);
    expect(members.ownerOf('dev-1')).toBeUndefined();
    expect(members.liveBrokers()).toEqual(['me']);
  });

  it('a broker first read with a heartbeat older than the expiry is gone at once; a fresh one is alive', async () => {
    await store.db
      .insertInto('cluster_brokers')
      .values([
        { broker_id: 'stale', peer_url: 'ws://stale', started_at: new Date().toISOString(), heartbeat_at: Date.now() - EXPIRY },
        { broker_id: 'fresh', peer_url: 'ws://fresh', started_at: new Date().toISOString(), heartbeat_at: Date.now() - 10 },
      ])
      .execute();
    await members.loadBrokers();
    expect(members.silent().map((b) => b.id)).toEqual(['stale']);
    expect(members.liveBrokers()).toEqual(['me', 'other', 'fresh']);
  });

  it('a gone broker’s presence rows are all removed, one written after its last heartbeat included; taken for gone wrongly, it writes them again', async () => {
    // Its agent connected after its last heartbeat, then it stopped.
    vi.setSystemTime(1_000_000 + 900);
    await store.db
      .insertInto('agent_presence')
      .values({ device_id: 'dev-1', broker_id: 'other', connected_at: new Date().toISOString(), seen_at: Date.now() })
      .execute();
    vi.setSystemTime(1_000_000 + EXPIRY);
    await members.loadBrokers();
    expect(members.silent().map((b) => b.id)).toEqual(['other']);
    await members.removePresenceOf('other');
    expect(await store.db.selectFrom('agent_presence').selectAll().execute()).toEqual([]);
    // Had it only paused, its next heartbeat's presence refresh writes the row again.
    const other = membership('other');
    await other.refreshPresence(['dev-1']);
    await vi.waitFor(async () =>
      expect(await store.db.selectFrom('agent_presence').select(['device_id', 'broker_id']).execute()).toEqual([{ device_id: 'dev-1', broker_id: 'other' }]),
    );
  });

  it('a row removed by the others: forgotten at the next read, its agents and link with it', async () => {
    await store.db.deleteFrom('cluster_brokers').where('broker_id', '=', 'other').execute();
    await members.loadBrokers();
    expect(members.ownerOf('dev-1')).toBeUndefined();
    expect(dropped).toEqual(['other']);
  });
});
