import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import SqliteDatabase from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { describe, expect, it, vi } from 'vitest';
import { openStore } from '../db/database.js';
import { migrations } from '../db/migrations/index.js';
import { asStored, canonicalJson, canonicalRow, entrySha, HASHED_COLUMNS } from './chain.js';
import { AuditService } from './service.js';

describe('canonical JSON', () => {
  it('is one text whatever the key order', () => {
    expect(canonicalJson({ b: 1, a: { d: [1, { f: 2, e: 3 }], c: null } })).toBe(canonicalJson({ a: { c: null, d: [1, { e: 3, f: 2 }] }, b: 1 }));
    expect(canonicalJson({ a: 1, b: 2 })).toBe('{"a":1,"b":2}');
  });
});

describe('entry sha', () => {
  const row = { id: 1, ts: '2026-01-01T00:00:00.000Z', event: 'user.update', action: 'PATCH', options: '{}', result: 'ok' };
  it('changes with any hashed field and with the previous sha', () => {
    const base = entrySha('', row);
    expect(entrySha('', { ...row, result: 'denied' })).not.toBe(base);
    expect(entrySha('x', row)).not.toBe(base);
    expect(entrySha('', { ...row, id: 2 })).not.toBe(base);
  });
  it('reads numbers the same whether the driver gives numbers or numeric text', () => {
    expect(entrySha('', { ...row, bytes_in: '42' })).toBe(entrySha('', { ...row, bytes_in: 42 }));
  });
});

describe('entry sha, without sorting each row (ninth round)', () => {
  /** The definition before the fast path: a Hash over the sha, a newline and canonicalJson of the normalized row. */
  function normalizedAsBefore(row: Record<string, unknown>): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (const column of HASHED_COLUMNS) {
      const v = row[column];
      out[column] = typeof v === 'bigint' ? Number(v) : typeof v === 'string' ? asStored(v) : v === undefined ? null : v;
    }
    for (const column of ['id', 'ref_id', 'duration_ms', 'bytes_in', 'bytes_out']) if (out[column] !== null) out[column] = Number(out[column]);
    return out;
  }
  function reference(previous: string, row: Record<string, unknown>): string {
    const out = normalizedAsBefore(row);
    return crypto.createHash('sha256').update(previous).update('\n').update(canonicalJson(out)).digest('hex');
  }
  const rows: Record<string, unknown>[] = [
    { id: 1, ts: '2026-01-01T00:00:00.000Z', event: 'remote.tunnel.start', action: 'tunnel', options: '{"port":22}', result: 'allowed' },
    { id: 2n, ref_id: '1', bytes_in: '42', bytes_out: 7n, duration_ms: 1.5, ended_at: '2026-01-01T00:00:01.000Z', extra: 'not hashed' },
    { id: 3, user_email: 'lone \ud800 surrogate \udc00', reason: 'NUL \u0000 and "quotes" \\ and \u2028', device_id: '\u{1F600} pair' },
    { id: 4, options: { nested: { b: 1, a: [2, { d: 1, c: undefined }] } }, session_id: undefined, bytes_in: Number.NaN, source: true },
  ];
  it('hashes the text canonicalJson gives, for every kind of value a row may hold', () => {
    let previous = '';
    for (const row of rows) {
      const out = normalizedAsBefore(row);
      expect(canonicalRow(out)).toBe(canonicalJson(out));
      expect(entrySha(previous, row)).toBe(reference(previous, row));
      previous = entrySha(previous, row);
    }
  });
  it('makes no Hash object per entry (one call hashes the text)', () => {
    const createHash = vi.spyOn(crypto, 'createHash');
    try {
      for (let i = 0; i < 100; i++) entrySha('x', { ...rows[0], id: i });
      expect(createHash).toHaveBeenCalledTimes(0);
    } finally {
      createHash.mockRestore();
    }
  });
});

describe('migration 0004', () => {
  it('chains the entries written before it, so the chain verifies', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-chain-'));
    const file = path.join(dir, 'old.sqlite');
    try {
      const old = new Kysely<any>({ dialect: new SqliteDialect({ database: new SqliteDatabase(file) }) });
      const all = migrations('sqlite');
      const migrator = new Migrator({ db: old, provider: { getMigrations: async () => all } });
      expect((await migrator.migrateTo('0003_revoked_devices')).error).toBeUndefined();
      const entry = { ts: '2026-01-01T00:00:00.000Z', event: 'remote.console.start', action: 'console', options: '{}', result: 'allowed' };
      await old
        .insertInto('audit')
        .values([entry, { ...entry, ended_at: '2026-01-01T00:01:00.000Z', bytes_in: 5 }, entry])
        .execute();
      await old.destroy();

      const store = await openStore(`sqlite:${file}`);
      try {
        const audit = new AuditService(store.db, store.dialect);
        expect(await audit.verify()).toEqual({ ok: true, entries: 3 });
        await audit.recordChange({ event: 'user.update', action: 'PATCH /api/v2/user/{user_id}', options: {}, ip: '127.0.0.1' });
        expect(await audit.verify()).toEqual({ ok: true, entries: 4 });
        await store.db.updateTable('audit').set({ bytes_in: 6 }).where('id', '=', 2).execute();
        expect(await audit.verify()).toMatchObject({ ok: false, entries: 1, first_bad: { id: 2 } });
      } finally {
        await store.close();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
