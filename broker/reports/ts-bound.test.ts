import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import SqliteDatabase from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { describe, expect, it } from 'vitest';
import { openStore } from '../db/database.js';
import { migrations } from '../db/migrations/index.js';
import { REPORT_FUTURE_SKEW_S } from './validate.js';

describe('migration 0018', () => {
  it('brings report times stored in the future (the year 5138) down to the broker clock bound, leaving the others', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-report-ts-'));
    const file = path.join(dir, 'old.sqlite');
    try {
      const old = new Kysely<any>({ dialect: new SqliteDialect({ database: new SqliteDatabase(file) }) });
      const all = migrations('sqlite');
      const before = Object.keys(all)
        .sort()
        .filter((name) => name < '0018');
      const migrator = new Migrator({ db: old, provider: { getMigrations: async () => all } });
      expect((await migrator.migrateTo(before[before.length - 1])).error).toBeUndefined();
      const report = {
        device_id: 'd'.repeat(64),
        received_at: '2026-01-01T00:00:00.000Z',
        sev: 'INFO',
        level: 0,
        bundle: 'b',
        bundle_commit_id: '',
        commit_id: '',
        labels: '',
        text: 't',
      };
      await old
        .insertInto('reports')
        .values([
          { ...report, ts: 99_999_999_999 },
          { ...report, ts: 1_700_000_000 },
        ])
        .execute();
      await old.destroy();

      const started = Math.floor(Date.now() / 1000);
      const store = await openStore(`sqlite:${file}`);
      try {
        const rows = await store.db.selectFrom('reports').select(['id', 'ts']).orderBy('id').execute();
        expect(Number(rows[0].ts)).toBeGreaterThanOrEqual(started);
        expect(Number(rows[0].ts)).toBeLessThanOrEqual(Math.floor(Date.now() / 1000) + REPORT_FUTURE_SKEW_S);
        expect(Number(rows[1].ts)).toBe(1_700_000_000);
      } finally {
        await store.close();
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
