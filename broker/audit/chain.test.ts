import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import SqliteDatabase from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { describe, expect, it } from 'vitest';
import { openStore } from '../db/database.js';
import { migrations } from '../db/migrations/index.js';
import { canonicalJson, entrySha } from './chain.js';
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
