import crypto from 'node:crypto';
import type { Db } from '../db/database.js';
import { deviceRecord, nodeRow, nodeRows } from '../devices/directory.js';
import { EnrolStore } from '../enrol/store.js';
import { PortmapStore } from '../remote/portmaps.js';
import { roleRow } from '../roles/directory.js';
import { SettingsStore } from '../settings.js';
import { userWithRoles } from '../users/directory.js';
import { canonicalJson } from './chain.js';

/**
 * The records a change's audit entry compares before and after (route `subject`): stored rows as
 * they are, so the entry shows every field that changed, secrets included as `[redacted]`.
 */

type Row = Record<string, unknown>;

/** Field names whose values never reach the audit trail, only the fact that they changed. */
const SECRET_FIELD = /pass|secret|hash|token|totp|challenge|private|^key$|_key$|code/i;
const MAX_VALUE = 200;
const MAX_FIELDS = 60;

/** JSON text columns read as values, so a change inside them shows as a change of that field. */
const JSON_COLUMNS = new Set(['attributes', 'tags', 'policies', 'value']);

function fieldValue(key: string, value: unknown): unknown {
  if (typeof value !== 'string') return value;
  if (JSON_COLUMNS.has(key)) {
    try {
      return JSON.parse(value) as unknown;
    } catch {
      return value;
    }
  }
  return value;
}

function shown(key: string, value: unknown, depth = 0): unknown {
  if (SECRET_FIELD.test(key)) return value === null || value === undefined ? value : '[redacted]';
  if (typeof value === 'string') return value.length > MAX_VALUE ? `${value.slice(0, MAX_VALUE)}…` : value;
  if (depth > 3) return '…';
  if (Array.isArray(value)) return value.slice(0, MAX_FIELDS).map((v) => shown('', v, depth + 1));
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value as Row)
        .slice(0, MAX_FIELDS)
        .map(([k, v]) => [k, shown(k, v, depth + 1)]),
    );
  }
  return value;
}

/**
 * What changed between two loads of a record: the differing fields only, before and after, secrets
 * redacted. A record created has no before (null), one deleted no after.
 */
export function changeSet(before: object | undefined, after: object | undefined): { before: Row | null; after: Row | null } {
  const b = before ? Object.fromEntries(Object.entries(before as Row).map(([k, v]) => [k, fieldValue(k, v)])) : undefined;
  const a = after ? Object.fromEntries(Object.entries(after as Row).map(([k, v]) => [k, fieldValue(k, v)])) : undefined;
  const redacted = (row: Row) => Object.fromEntries(Object.entries(row).map(([k, v]) => [k, shown(k, v)]));
  if (!b || !a) return { before: b ? redacted(b) : null, after: a ? redacted(a) : null };
  const was: Row = {};
  const now: Row = {};
  for (const key of new Set([...Object.keys(b), ...Object.keys(a)])) {
    if (canonicalJson(b[key] ?? null) === canonicalJson(a[key] ?? null)) continue;
    was[key] = b[key] ?? null;
    now[key] = a[key] ?? null;
  }
  return { before: redacted(was), after: redacted(now) };
}

/** The key of a record as a route hands it: a non-empty string, or nothing to load. */
const keyOf = (value: unknown): string | undefined => (typeof value === 'string' && value !== '' ? value : undefined);

/** Loaders of the records changes concern, by their key: each asks the domain that owns the record. */
export const subjectRecords = {
  async user(db: Db, id: unknown): Promise<Row | undefined> {
    const key = keyOf(id);
    return key === undefined ? undefined : userWithRoles(db, key);
  },
  async role(db: Db, id: unknown): Promise<Row | undefined> {
    const key = keyOf(id);
    return key === undefined ? undefined : roleRow(db, key);
  },
  async device(db: Db, id: unknown): Promise<Row | undefined> {
    const key = keyOf(id);
    if (key === undefined) return undefined;
    const device = await deviceRecord(db, key);
    const node = await nodeRow(db, key);
    if (!device && !node) return undefined;
    return { ...device, ...(node ? { parent_id: node.parent_id, title: node.title, tags: node.tags } : {}) };
  },
  async node(db: Db, id: unknown): Promise<Row | undefined> {
    const key = keyOf(id);
    return key === undefined ? undefined : nodeRow(db, key);
  },
  async nodes(db: Db, ids: unknown[]): Promise<Row> {
    const wanted = [...new Set(ids.filter((id): id is string => typeof id === 'string'))].slice(0, 100).sort();
    const rows = await nodeRows(db, wanted);
    return Object.fromEntries(rows.map((r) => [r.node_id, { parent_id: r.parent_id, title: r.title, tags: JSON.parse(r.tags) as unknown }]));
  },
  async bootstrapKey(db: Db, ref: unknown): Promise<Row | undefined> {
    // Named by its public id or by the key itself (whose hash is stored).
    if (typeof ref !== 'string') return undefined;
    const keys = new EnrolStore(db);
    const key = (ref !== '' ? await keys.keyById(ref) : undefined) ?? (await keys.keyByHash(crypto.createHash('sha256').update(ref, 'utf8').digest('hex')));
    return key && { ...key };
  },
  async portmap(db: Db, id: unknown): Promise<Row | undefined> {
    const key = keyOf(id);
    const preset = key === undefined ? undefined : await new PortmapStore(db).storedRow(key);
    return preset && { ...preset };
  },
  /** A setting as stored: its key and its value's JSON. */
  async setting(db: Db, key: string): Promise<Row | undefined> {
    if (key === '') return undefined;
    const value = await new SettingsStore(db).get<unknown>(key);
    return value === undefined ? undefined : { key, value: JSON.stringify(value) };
  },
};
