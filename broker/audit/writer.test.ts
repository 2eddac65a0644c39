import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { DefaultQueryCompiler, sql } from 'kysely';
import pg from 'pg';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { dropSchema, openStore, type Store } from '../db/database.js';
import { AuditService, type RemoteAuditStart } from './service.js';
import { BUSY_WINDOW_MS, GROUP_WINDOW_MS, GroupStatements } from './writer.js';

/** The local PostgreSQL of the tests (as test/support/broker.ts). */
const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const start = (i: number, reason = 'allowed'): RemoteAuditStart => ({
  event: 'remote.tunnel',
  user: { id: 'u1', email: 'op@example.com' },
  deviceId: 'd'.repeat(64),
  action: 'tunnel',
  options: { i },
  allowed: true,
  reason,
  ip: '192.0.2.1',
  source: 'api',
});

/** A store of its own for each test (a fresh SQLite file or PostgreSQL schema), closed and dropped after it. */
function freshStore(database: 'sqlite' | 'postgres') {
  const t = { store: undefined as unknown as Store, schema: '', dir: '', url: '' };
  beforeEach(async () => {
    t.dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-writer-'));
    t.schema = database === 'postgres' ? `t_writer_${crypto.randomBytes(5).toString('hex')}` : '';
    t.url = database === 'postgres' ? PG_URL : `sqlite:${path.join(t.dir, 'fleet.sqlite')}`;
    t.store = await openStore(t.url, t.schema);
  });
  afterEach(async () => {
    await t.store.close();
    if (t.schema) await dropSchema(PG_URL, t.schema);
    fs.rmSync(t.dir, { recursive: true, force: true });
  });
  return t;
}

describe.each(['sqlite', 'postgres'] as const)('audit group commit (%s)', (database) => {
  const t = freshStore(database);

  it('entries queued together share one transaction, and the chain verifies', async () => {
    const audit = new AuditService(t.store.db, t.store.dialect, { brokerId: 'b1' });
    const before = t.store.statements();
    const ids = await Promise.all(Array.from({ length: 200 }, (_, i) => audit.recordRemoteStart(start(i))));
    // One group: begin with the chain's lock, one head read, an INSERT per 100 rows, the owners, one
    // commit (the code before group commit opened 200 transactions; the code before this count sent
    // the lock as a statement of its own: 7).
    expect(t.store.statements() - before).toBe(6);
    expect(new Set(ids).size).toBe(200);
    expect([...ids].sort((a, b) => a - b)).toEqual(ids);
    const owners = await t.store.db.selectFrom('remote_session_owners').select('audit_id').execute();
    expect(owners.map((o) => Number(o.audit_id)).sort((a, b) => a - b)).toEqual(ids);
    expect(await audit.verify()).toMatchObject({ ok: true, entries: 200 });
  });

  it("a group's statements are compiled once (per count of ids) and sent again with each group's ids (ninth round)", async () => {
    const statements = new GroupStatements();
    const db = t.store.db;
    await db
      .insertInto('remote_session_owners')
      .values([1, 2, 3, 4, 5].map((audit_id) => ({ audit_id, broker_id: 'b1' })))
      .execute();
    for (let i = 0; i < 3; i++) expect((await db.executeQuery(statements.head(db))).rows).toEqual([]);
    const first = statements.release(db, [1, 2]);
    const second = statements.release(db, [3, 4]);
    expect(second.sql).toBe(first.sql);
    expect(second.parameters).toEqual([3, 4]);
    await db.executeQuery(second);
    const left = await db.selectFrom('remote_session_owners').select('audit_id').orderBy('audit_id').execute();
    expect(left.map((o) => Number(o.audit_id))).toEqual([1, 2, 5]);
    expect(statements.ended(db, [7, 8, 9]).parameters).toEqual([7, 8, 9, 'remote.%.end']);
    expect(statements.ended(db, [10, 11, 12]).parameters).toEqual([10, 11, 12, 'remote.%.end']);
    // head once, release for 2 ids once, ended for 3 ids once (the code before built and compiled each every group).
    expect(statements.compiled).toBe(3);
  });

  it('a group of a size written before compiles nothing: its INSERT, its owners, the lock and the commit are sent again (tenth round)', async () => {
    const audit = new AuditService(t.store.db, t.store.dialect, { brokerId: 'b1' });
    const group = (from: number) => Promise.all(Array.from({ length: 3 }, (_, i) => audit.recordRemoteStart(start(from + i))));
    const end = (ids: number[]) => Promise.all(ids.map((id) => audit.recordRemoteEnd(id, { durationMs: 5, bytesIn: 7, bytesOut: 9, reason: 'closed' })));
    // The first group of each kind compiles its statements.
    const starts = await group(0);
    await end(starts);
    const compiles = vi.spyOn(DefaultQueryCompiler.prototype, 'compileQuery');
    try {
      for (let g = 1; g < 5; g++) {
        const ids = await group(g * 3);
        starts.push(...ids);
        if (g % 2 === 0) await end(ids);
      }
      // The code before built and compiled each group's INSERT, owners, begin and commit: 4 a group.
      expect(compiles).toHaveBeenCalledTimes(0);
    } finally {
      compiles.mockRestore();
    }
    expect(new Set(starts).size).toBe(15);
    const owners = await t.store.db.selectFrom('remote_session_owners').select('audit_id').execute();
    expect(owners.map((o) => Number(o.audit_id)).sort((a, b) => a - b)).toEqual([...starts.slice(3, 6), ...starts.slice(9, 12)]);
    const rows = await t.store.db.selectFrom('audit').selectAll().where('id', 'in', starts).orderBy('id').execute();
    expect(rows.map((r) => JSON.parse(r.options).i)).toEqual(starts.map((_, i) => i));
    expect(rows.every((r) => r.device_id === 'd'.repeat(64) && r.user_email === 'op@example.com' && r.ref_id === null && r.bytes_in === null)).toBe(true);
    const ends = await t.store.db.selectFrom('audit').selectAll().where('event', 'like', 'remote.%.end').orderBy('id').execute();
    expect(ends.map((e) => [Number(e.ref_id), Number(e.duration_ms), Number(e.bytes_in), Number(e.bytes_out)])).toEqual(
      [...starts.slice(0, 3), ...starts.slice(6, 9), ...starts.slice(12, 15)].map((id) => [id, 5, 7, 9]),
    );
    expect(await audit.verify()).toMatchObject({ ok: true, entries: 24 });
  });

  it("the writer's INSERT is Kysely's text for a row naming every column, sent with each group's rows; a flood of group sizes keeps its texts bounded", async () => {
    const statements = new GroupStatements();
    const db = t.store.db;
    const row = (id: number, sha: string) => ({
      id,
      ts: '2026-11-28T00:00:00.000Z',
      event: 'test.insert',
      user_id: null,
      user_email: null,
      device_id: null,
      action: `a${id}`,
      options: '{}',
      result: 'ok',
      reason: null,
      source_ip: null,
      source: null,
      session_id: null,
      ref_id: null,
      ended_at: null,
      duration_ms: null,
      bytes_in: null,
      bytes_out: null,
      sha,
    });
    const first = statements.insert(db, [row(1, 'x1'), row(2, 'x2')]);
    expect(first.sql).toBe(
      db
        .insertInto('audit')
        .values([row(1, 'x1'), row(2, 'x2')])
        .compile().sql,
    );
    const second = statements.insert(db, [row(3, 'x3'), row(4, 'x4')]);
    expect(second.sql).toBe(first.sql);
    await db.executeQuery(second);
    const written = await db.selectFrom('audit').select(['id', 'action', 'sha']).orderBy('id').execute();
    expect(written.map((w) => [Number(w.id), w.action, w.sha])).toEqual([
      [3, 'a3', 'x3'],
      [4, 'a4', 'x4'],
    ]);
    expect(statements.compiled).toBe(1);
    // Hostile: groups of every size, many times over, and holders of every count: one text per count.
    for (let round = 0; round < 3; round++) {
      for (let n = 1; n <= 100; n++)
        statements.insert(
          db,
          Array.from({ length: n }, (_, i) => row(i + 10, `s${i}`)),
        );
      for (let n = 1; n <= 600; n += 7)
        statements.holdersOf(
          db,
          Array.from({ length: n }, (_, i) => ({ audit_id: i, broker_id: 'b' })),
        );
    }
    expect(statements.kept()).toBeLessThanOrEqual(100 + 500);
    expect(statements.compiled).toBe(100 + Math.ceil(600 / 7));
  });

  it('sessions started and ended in many groups: every end written once and the chain verifies, with the compiled statements', async () => {
    const audit = new AuditService(t.store.db, t.store.dialect, { brokerId: 'b1' });
    const starts = [];
    for (let g = 0; g < 5; g++) starts.push(...(await Promise.all(Array.from({ length: 3 }, (_, i) => audit.recordRemoteStart(start(g * 3 + i))))));
    for (let g = 0; g < 5; g++) {
      const ids = starts.slice(g * 3, g * 3 + 3);
      // Each end twice in one group: the second is found already written.
      await Promise.all(ids.flatMap((id) => [0, 1].map(() => audit.recordRemoteEnd(id, { durationMs: 1, bytesIn: 0, bytesOut: 0, reason: 'closed' }))));
    }
    const ends = await t.store.db.selectFrom('audit').select('ref_id').where('event', 'like', 'remote.%.end').execute();
    expect(ends.map((e) => Number(e.ref_id)).sort((a, b) => a - b)).toEqual([...starts].sort((a, b) => a - b));
    expect(await t.store.db.selectFrom('remote_session_owners').select('audit_id').execute()).toEqual([]);
    expect(await audit.verify()).toMatchObject({ ok: true, entries: 30 });
  });

  it('concurrent appends from two writers (two brokers) and a transaction of a change keep one chain', async () => {
    const a = new AuditService(t.store.db, t.store.dialect, { brokerId: 'a' });
    const b = new AuditService(t.store.db, t.store.dialect, { brokerId: 'b' });
    const work: Promise<unknown>[] = [];
    for (let i = 0; i < 150; i++) {
      work.push(a.recordRemoteStart(start(i)).then((id) => a.recordRemoteEnd(id, { durationMs: 1, bytesIn: 1, bytesOut: 1, reason: 'exit 0' })));
      work.push(b.recordChange({ event: 'test.concurrent', action: `b ${i}`, options: { i }, ip: '127.0.0.1' }));
      // A change and its entry commit together, beside the groups.
      if (i % 25 === 0) work.push(t.store.transaction(() => a.recordChange({ event: 'test.in-transaction', action: `t ${i}`, options: {}, ip: '127.0.0.1' })));
    }
    await Promise.all(work);
    const verified = await a.verify();
    expect(verified).toMatchObject({ ok: true, entries: 150 * 3 + 6 });
    const ends = await t.store.db.selectFrom('audit').select('ref_id').where('event', '=', 'remote.tunnel.end').execute();
    expect(new Set(ends.map((e) => Number(e.ref_id))).size).toBe(150);
    expect(await t.store.db.selectFrom('remote_session_owners').selectAll().execute()).toEqual([]);
  });

  it('an entry the database refuses fails alone: the rest of its group is written', async () => {
    if (database === 'sqlite') {
      await sql`create trigger refuse_boom before insert on audit when new.reason = 'boom' begin select raise(abort, 'refused'); end`.execute(t.store.db);
    } else {
      await sql`create function refuse_boom() returns trigger language plpgsql as $$ begin if new.reason = 'boom' then raise exception 'refused'; end if; return new; end $$`.execute(
        t.store.db,
      );
      await sql`create trigger refuse_boom before insert on audit for each row execute function refuse_boom()`.execute(t.store.db);
    }
    const audit = new AuditService(t.store.db, t.store.dialect, { brokerId: 'b1' });
    const outcomes = await Promise.allSettled(Array.from({ length: 20 }, (_, i) => audit.recordRemoteStart(start(i, i === 7 ? 'boom' : 'allowed'))));
    expect(outcomes.filter((o) => o.status === 'rejected')).toHaveLength(1);
    expect(outcomes[7].status).toBe('rejected');
    expect(await audit.verify()).toMatchObject({ ok: true, entries: 19 });
    // The refused start has no owner row either: nothing of it was written.
    expect(await t.store.db.selectFrom('remote_session_owners').selectAll().execute()).toHaveLength(19);
  });

  it('a broker killed between queueing and committing never reported a start that is not in the database', async () => {
    await t.store.close();
    const child = spawnSync(process.execPath, ['--import', 'tsx', 'test/support/audit-crash.ts', t.url, t.schema, '50'], {
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(child.signal).toBe('SIGKILL');
    const reported = [...child.stdout.matchAll(/^started (\d+)$/gm)].map((m) => Number(m[1]));
    expect(reported.length).toBeGreaterThanOrEqual(50);
    t.store = await openStore(t.url, t.schema);
    const rows = await t.store.db.selectFrom('audit').select(['id', 'event']).where('id', 'in', reported).execute();
    expect(rows).toHaveLength(reported.length);
    expect(rows.every((r) => r.event === 'remote.tunnel.start')).toBe(true);
    const audit = new AuditService(t.store.db, t.store.dialect, { brokerId: 'after' });
    expect((await audit.verify()).ok).toBe(true);
    // What was queued but not committed is simply absent: the restart closes what was written.
    expect(await audit.closeOpenSessions('broker restarted')).toBeGreaterThanOrEqual(reported.length);
    expect((await audit.verify()).ok).toBe(true);
  });
});

// The window's length in the loop's own time (fake timers): SQLite only, as PostgreSQL's client keeps timers of its own.
describe('audit group commit (sqlite), the window under load (thirteenth round)', () => {
  const t = freshStore('sqlite');
  afterEach(() => void vi.useRealTimers());

  /** Submits `perMs` starts every millisecond for `ms` milliseconds; answers each entry's wait (ms, the loop's time) and the statements sent. */
  async function stream(audit: AuditService, ms: number, perMs: number): Promise<{ waits: number[]; statements: number }> {
    const before = t.store.statements();
    const waits: number[] = [];
    const written: Promise<unknown>[] = [];
    for (let i = 0; i < ms; i++) {
      for (let k = 0; k < perMs; k++) {
        const at = performance.now();
        written.push(audit.recordRemoteStart(start(i * perMs + k)).then(() => waits.push(performance.now() - at)));
      }
      await vi.advanceTimersByTimeAsync(1);
    }
    await vi.advanceTimersByTimeAsync(BUSY_WINDOW_MS);
    await Promise.all(written);
    return { waits, statements: t.store.statements() - before };
  }

  it('entries arriving two a millisecond share groups (24 in 4 groups; the code before wrote two at a time: 12 groups); one after a quiet spell still waits 1 ms', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const audit = new AuditService(t.store.db, t.store.dialect, { brokerId: 'b1' });
    const { waits, statements } = await stream(audit, 12, 2);
    expect(waits).toHaveLength(24);
    // A group of starts is 5 statements (begin with the lock, head, insert, owners, commit): the first
    // millisecond's two, then one group each BUSY_WINDOW_MS.
    expect(statements).toBe(4 * 5);
    expect(Math.max(...waits)).toBeLessThanOrEqual(BUSY_WINDOW_MS);
    // Quiet: the next entry's group is written after GROUP_WINDOW_MS, as before.
    await vi.advanceTimersByTimeAsync(100);
    let done = false;
    const lone = audit.recordRemoteStart(start(99)).then(() => (done = true));
    await vi.advanceTimersByTimeAsync(GROUP_WINDOW_MS);
    expect(done).toBe(true);
    await lone;
    vi.useRealTimers();
    expect(await audit.verify()).toMatchObject({ ok: true, entries: 25 });
  });

  it('after a group of several, entries arriving one each 3 ms keep sharing groups until QUIET_AFTER_SINGLES groups of one in a row', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const audit = new AuditService(t.store.db, t.store.dialect, { brokerId: 'b1' });
    await stream(audit, 1, 2);
    const before = t.store.statements();
    const written: Promise<unknown>[] = [];
    for (let i = 0; i < 24; i++) {
      written.push(audit.recordRemoteStart(start(10 + i)));
      await vi.advanceTimersByTimeAsync(3);
    }
    await vi.advanceTimersByTimeAsync(BUSY_WINDOW_MS);
    await Promise.all(written);
    // 24 entries in 19 groups: pairs share a group while the window is the busy one (each alone with a
    // 1 ms window, as when the busy window ended at the first group of one: 24).
    expect((t.store.statements() - before) / 5).toBe(19);
    vi.useRealTimers();
    expect(await audit.verify()).toMatchObject({ ok: true, entries: 26 });
  });

  it('a caller writing one entry after another is not held by the busy window: each is written GROUP_WINDOW_MS after it arrives', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const audit = new AuditService(t.store.db, t.store.dialect, { brokerId: 'b1' });
    const before = t.store.statements();
    for (let i = 0; i < 12; i++) {
      let done = false;
      const one = audit.recordRemoteStart(start(i)).then(() => (done = true));
      await vi.advanceTimersByTimeAsync(GROUP_WINDOW_MS);
      expect(done).toBe(true);
      await one;
    }
    expect(t.store.statements() - before).toBe(12 * 5);
    vi.useRealTimers();
    expect(await audit.verify()).toMatchObject({ ok: true, entries: 12 });
  });

  it('hostile: a flood of entries never waits longer than BUSY_WINDOW_MS, and is written in at most one group each BUSY_WINDOW_MS (the code before: one each millisecond)', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });
    const audit = new AuditService(t.store.db, t.store.dialect, { brokerId: 'b1' });
    const { waits, statements } = await stream(audit, 200, 10);
    expect(waits).toHaveLength(2000);
    expect(Math.max(...waits)).toBeLessThanOrEqual(BUSY_WINDOW_MS);
    // 2,000 entries in 200 ms: the first group, then one each 4 ms (the code before: 200 groups, 1,000 statements).
    expect(statements).toBeLessThanOrEqual((1 + 200 / BUSY_WINDOW_MS) * 5);
    vi.useRealTimers();
    const owners = await t.store.db.selectFrom('remote_session_owners').select('audit_id').execute();
    expect(owners).toHaveLength(2000);
    expect(await audit.verify()).toMatchObject({ ok: true, entries: 2000 });
  });
});

// PostgreSQL's statement timeout: SQLite has no chain lock another session could hold.
describe('audit group commit (postgres), lock timeout', () => {
  const t = freshStore('postgres');

  it('a group whose lock times out leaves its connection outside any transaction: the next groups are written', async () => {
    await t.store.close();
    // Statements time out after 300 ms (the reply 5 s after).
    t.store = await openStore(t.url, t.schema, undefined, 5300);
    const holder = new pg.Client({ connectionString: PG_URL, options: `-c search_path=${t.schema}` });
    await holder.connect();
    try {
      // The chain's lock held by another session, as a stuck broker's group would hold it.
      await holder.query(`select pg_advisory_lock(hashtext('fleet-audit-chain:' || current_schema()))`);
      const audit = new AuditService(t.store.db, t.store.dialect, { brokerId: 'b1' });
      await expect(audit.recordRemoteStart(start(0))).rejects.toThrow(/statement timeout/);
      await holder.query(`select pg_advisory_unlock(hashtext('fleet-audit-chain:' || current_schema()))`);
      // The pool hands out the connection released last: the one whose begin went through and whose lock did not.
      for (let i = 1; i <= 3; i++) await audit.recordRemoteStart(start(i));
      expect(await audit.verify()).toMatchObject({ ok: true, entries: 3 });
    } finally {
      await holder.end();
    }
  });
});
