import crypto from 'node:crypto';
import { canonicalJson } from '../../shared/canonical-json.js';
import { replaceLoneSurrogates } from '../../shared/text.js';

export { canonicalJson };

/**
 * The columns an entry's `sha` covers. Every one is written once: an entry is never updated
 * (a remote session's end is an entry of its own), so any later edit breaks the chain.
 */
export const HASHED_COLUMNS = [
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

export type HashedEntry = { [K in (typeof HASHED_COLUMNS)[number]]: unknown };

/**
 * Text as both databases store it: UTF-8, where a lone UTF-16 surrogate becomes U+FFFD. Hashing the
 * stored form makes the sha computed when an entry is written the one `verify` computes from the row.
 */
export function asStored(text: string): string {
  // The common case (no lone surrogate) found by one native scan, without the regular expression's.
  return (text as string & { isWellFormed(): boolean }).isWellFormed() ? text : replaceLoneSurrogates(text);
}

/**
 * Numbers as stored: bigint columns come back as numbers or numeric strings depending on the driver;
 * text as stored (`asStored`).
 */
function normalized(row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const column of HASHED_COLUMNS) {
    const v = row[column];
    out[column] = typeof v === 'bigint' ? Number(v) : typeof v === 'string' ? asStored(v) : v === undefined ? null : v;
  }
  for (const column of ['id', 'ref_id', 'duration_ms', 'bytes_in', 'bytes_out'] as const) {
    if (out[column] !== null) out[column] = Number(out[column]);
  }
  return out;
}

/** The hashed columns in canonicalJson's key order, each with its `"key":` written once. */
const SORTED_COLUMNS = [...HASHED_COLUMNS].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
const KEY_PREFIXES = SORTED_COLUMNS.map((column) => `${JSON.stringify(column)}:`);

/**
 * canonicalJson of a normalized row: its keys are the hashed columns, none undefined, so their order
 * is known and the object need not be listed and sorted for every entry (the same text; chain.test.ts
 * holds it to canonicalJson).
 */
export function canonicalRow(out: Record<string, unknown>): string {
  let text = '{';
  for (let i = 0; i < SORTED_COLUMNS.length; i++) text += `${i === 0 ? '' : ','}${KEY_PREFIXES[i]}${canonicalJson(out[SORTED_COLUMNS[i]])}`;
  return `${text}}`;
}

/** SHA-256 over the previous entry's sha (empty for the first) and this entry's canonical content. */
export function entrySha(previousSha: string, row: Record<string, unknown>): string {
  // One call, where a Hash object took three updates and a digest: the same bytes hashed.
  return crypto.hash('sha256', `${previousSha}\n${canonicalRow(normalized(row))}`, 'hex');
}
