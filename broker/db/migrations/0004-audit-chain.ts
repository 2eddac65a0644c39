import crypto from 'node:crypto';
import { type Kysely, type Migration } from 'kysely';
import type { Dialect } from '../dialect.js';

// The audit hash as it was when this migration was written (broker/audit/chain.ts then), copied so
// that this migration chains the same way whatever that module becomes.
const HASHED_COLUMNS = [
  'id',
  'ts',
  'event',
  'user_id',
  'user_email',
  'device_id',
  'action',
  'options',
  'result',
  'reason',
  'source_ip',
  'source',
  'session_id',
  'ref_id',
  'ended_at',
  'duration_ms',
  'bytes_in',
  'bytes_out',
] as const;

function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value ?? null);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

function normalized(row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const column of HASHED_COLUMNS) {
    const v = row[column];
    out[column] = typeof v === 'bigint' ? Number(v) : v === undefined ? null : v;
  }
  for (const column of ['id', 'ref_id', 'duration_ms', 'bytes_in', 'bytes_out'] as const) {
    if (out[column] !== null) out[column] = Number(out[column]);
  }
  return out;
}

function entrySha(previousSha: string, row: Record<string, unknown>): string {
  return crypto
    .createHash('sha256')
    .update(previousSha)
    .update('\n')
    .update(canonicalJson(normalized(row)))
    .digest('hex');
}

/**
 * Each entry chained to the one before it by sha (tamper evidence); a remote session's end is an
 * entry of its own pointing at its start (ref_id), so no entry is ever updated. Existing rows are
 * chained in id order as they stand.
 */
export function migration(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema.alterTable('audit').addColumn('sha', 'text').execute();
      await db.schema
        .alterTable('audit')
        .addColumn('ref_id', dialect === 'postgres' ? 'bigint' : 'integer')
        .execute();
      await db.schema.createIndex('audit_ref').on('audit').column('ref_id').execute();
      const audit = db as unknown as Kysely<{ audit: { id: number; sha: string | null } }>;
      let previous = '';
      let after = -1;
      for (;;) {
        const rows = await audit.selectFrom('audit').selectAll().where('id', '>', after).orderBy('id').limit(500).execute();
        if (rows.length === 0) break;
        for (const row of rows) {
          previous = entrySha(previous, { ...row, ref_id: null });
          await audit.updateTable('audit').set({ sha: previous }).where('id', '=', row.id).execute();
          after = Number(row.id);
        }
      }
    },
  };
}
