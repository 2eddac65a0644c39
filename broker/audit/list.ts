/**
 * Reading the audit trail: GET /commitlist's filters (qbee's CommitListSearch among them), its sort
 * and paging, and each entry as the API presents it (a session's start with its end joined, a
 * configuration commit as qbee's Commit, a sentence saying who did what).
 */
import type { Selectable } from 'kysely';
import { z } from 'zod';
import type { AuditEntry, ListPage } from '../../shared/api-types.js';
import { commitShasWithChangeLike } from '../config/audit-queries.js';
import { sql, type Db } from '../db/database.js';
import type { AuditTable } from '../db/schema.js';
import { parseJsonSearch } from '../http/search.js';
import { userIdsNamedLike } from '../users/directory.js';
import { CHECKPOINT_EVENT, REFUSALS_EVENT, REMOTE_END_LIKE, REMOTE_START } from './entries.js';

export interface AuditQuery {
  device_id?: string;
  user_id?: string;
  action?: string;
  result?: string;
  event?: string;
  from?: string;
  to?: string;
  /** qbee's CommitListSearch as JSON (commitSearch); its filters narrow the trail. */
  search?: string;
  sort_field?: 'created' | 'user_id' | 'type';
  sort_direction?: 'asc' | 'desc';
  offset: number;
  items_per_page: number;
}

/** qbee's `YYYY-MM-DD hh:ii:ss` (UTC). */
const DATE_TIME = /^(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}:\d{2})$/;
const dateTime = z
  .string()
  .regex(DATE_TIME, 'must be "YYYY-MM-DD hh:mm:ss" (UTC)')
  .refine((v) => !Number.isNaN(Date.parse(v.replace(' ', 'T') + 'Z')), 'is not a date');

/** qbee's CommitListSearch (qbee-cli commit.go): what GET /commitlist's `search` may hold. */
export const commitSearch = z.object({
  commit_sha: z.string().max(64).optional().describe('Part of the entry’s sha (case-insensitive)'),
  message: z.string().max(1000).optional().describe('Part of a configuration commit’s message (case-insensitive): configuration commits only'),
  user_id: z.string().max(64).optional().describe('Exactly this user'),
  committer: z.string().max(200).optional().describe('Part of the first or last name of the user'),
  change_sha: z.string().max(64).optional().describe('Part of the sha of one of a configuration commit’s changes'),
  labels_include: z.array(z.string().max(100)).max(100).optional().describe('Labels every entry must carry (no entry carries labels here)'),
  labels_exclude: z.array(z.string().max(100)).max(100).optional().describe('Labels no entry may carry'),
  start_date: dateTime.optional().describe('From, inclusive'),
  end_date: dateTime.optional().describe('Until, inclusive'),
});

/** A LIKE pattern matching `text` anywhere, its wildcards taken literally (escape '\\'). */
const containing = (text: string) => `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;

/** A page of the trail, filtered and sorted as asked: two queries, and a third for the ends of the sessions it shows. */
export async function listEntries(db: Db, q: AuditQuery): Promise<ListPage<AuditEntry>> {
  let query = db.selectFrom('audit');
  if (q.device_id) query = query.where('device_id', '=', q.device_id);
  if (q.user_id) query = query.where('user_id', '=', q.user_id);
  if (q.action) query = query.where('action', '=', q.action);
  if (q.result) query = query.where('result', '=', q.result);
  if (q.event) {
    // A prefix, matched literally: `_` and `%` in event codes are not wildcards.
    const prefix = `${q.event.replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    query = query.where(sql<boolean>`event like ${prefix} escape '\\'`);
  }
  if (q.from) query = query.where('ts', '>=', q.from);
  if (q.to) query = query.where('ts', '<=', q.to);
  const s = parseJsonSearch(q.search, commitSearch);
  if (s.commit_sha) query = query.where(sql<boolean>`lower(sha) like ${containing(s.commit_sha.toLowerCase())} escape '\\'`);
  if (s.message) {
    // A commit's options are JSON written by recordCommit, its message first: the message's JSON
    // text is matched, up to the key that follows it (which an escaped message cannot contain).
    const text = JSON.stringify(s.message).slice(1, -1).toLowerCase();
    const pattern = `{"message":"${containing(text)}","changes":%`;
    query = query.where('event', '=', 'config.commit').where(sql<boolean>`lower(options) like ${pattern} escape '\\'`);
  }
  if (s.user_id) query = query.where('user_id', '=', s.user_id);
  if (s.committer) {
    const name = containing(s.committer.toLowerCase());
    query = query.where('user_id', 'in', userIdsNamedLike(db, name));
  }
  if (s.change_sha) {
    const change = containing(s.change_sha.toLowerCase());
    query = query.where('event', '=', 'config.commit').where('sha', 'in', commitShasWithChangeLike(db, change));
  }
  // No entry carries labels: requiring one finds nothing, excluding them excludes nothing.
  if (s.labels_include && s.labels_include.length > 0) query = query.where(sql<boolean>`1 = 0`);
  if (s.start_date) query = query.where('ts', '>=', new Date(`${s.start_date.replace(' ', 'T')}Z`).toISOString());
  if (s.end_date) query = query.where('ts', '<', new Date(Date.parse(`${s.end_date.replace(' ', 'T')}Z`) + 1000).toISOString());
  const { total } = await query.select((eb) => eb.fn.countAll<number>().as('total')).executeTakeFirstOrThrow();
  const direction = q.sort_direction ?? 'desc';
  const ordered =
    q.sort_field === 'user_id'
      ? query.selectAll().orderBy('user_id', direction).orderBy('id', direction)
      : q.sort_field === 'type'
        ? query.selectAll().orderBy('event', direction).orderBy('id', direction)
        : query.selectAll().orderBy('id', direction);
  const rows = await ordered.offset(q.offset).limit(q.items_per_page).execute();
  // A session's start is shown with its end joined, as readers expect one line per session.
  const starts = rows.filter((r) => REMOTE_START.test(r.event)).map((r) => Number(r.id));
  const ends = new Map<number, Selectable<AuditTable>>();
  if (starts.length > 0) {
    // Only end entries: a console's attach and watch entries point at its start too.
    const found = await db.selectFrom('audit').selectAll().where('ref_id', 'in', starts).where('event', 'like', REMOTE_END_LIKE).execute();
    for (const end of found) ends.set(Number(end.ref_id), end);
  }
  return { total: Number(total), items: rows.map((r) => present(r, ends.get(Number(r.id)))) };
}

function present(row: Selectable<AuditTable>, end?: Selectable<AuditTable>): AuditEntry {
  const entry: AuditEntry = {
    ...row,
    id: Number(row.id),
    ref_id: row.ref_id === null ? null : Number(row.ref_id),
    options: JSON.parse(row.options) as unknown,
    message: '',
    type: row.event.split('.')[0],
    created: Math.floor(Date.parse(row.ts) / 1000),
  };
  const count = (v: number | null) => (v === null ? null : Number(v));
  if (end) {
    entry.ended_at = end.ts;
    entry.end_result = end.result;
    entry.end_reason = end.reason;
    entry.duration_ms = end.duration_ms;
    entry.bytes_in = end.bytes_in;
    entry.bytes_out = end.bytes_out;
  }
  // bigint columns may come back as text from PostgreSQL.
  entry.duration_ms = count(entry.duration_ms);
  entry.bytes_in = count(entry.bytes_in);
  entry.bytes_out = count(entry.bytes_out);
  entry.message = describe(entry, end);
  // A configuration commit reads as qbee's Commit: its message, the shas of its changes, its labels.
  if (row.event === 'config.commit' && entry.options && typeof entry.options === 'object') {
    const o = entry.options as { message?: unknown; changes?: unknown; labels?: unknown };
    if (typeof o.message === 'string') entry.message = o.message;
    entry.changes = Array.isArray(o.changes) ? (o.changes as string[]) : [];
    entry.labels = Array.isArray(o.labels) ? (o.labels as string[]) : [];
  }
  return entry;
}

const ARTICLE: Record<string, string> = {
  console: 'a console',
  tunnel: 'a tunnel',
  copy: 'a copy',
  reload: 'an agent reload',
  connect: 'a qbee-v1 connection',
};

/** The commit message: who did what, and how it went. */
export function describe(
  entry: Pick<AuditEntry, 'event' | 'user_email' | 'source_ip' | 'action' | 'device_id' | 'result' | 'reason'>,
  end?: { reason: string | null },
): string {
  if (entry.event === CHECKPOINT_EVENT) return `Retention: ${entry.reason ?? 'old entries deleted'}`;
  const who = entry.user_email ?? `an unidentified caller from ${entry.source_ip ?? 'an unknown address'}`;
  if (entry.event === REFUSALS_EVENT) return `${entry.user_email ?? 'an unidentified caller'}: ${entry.reason ?? 'refused calls summarised'}`;
  const outcome = entry.reason && entry.result !== 'ok' ? `${entry.result}: ${entry.reason}` : entry.result;
  if (entry.event.startsWith('remote.')) {
    const what = ARTICLE[entry.action] ?? entry.action;
    const on = entry.device_id ? ` on ${entry.device_id}` : '';
    if (entry.event.endsWith('.end')) return `${who} ended ${what}${on} (${outcome})`;
    if (entry.event.endsWith('.attach')) return `${who} re-attached to ${what}${on} (${outcome})`;
    if (entry.event.endsWith('.watch')) return `${who} watched ${what}${on}, read-only (${outcome})`;
    const ended = end ? `, ended: ${end.reason ?? 'ended'}` : '';
    return `${who} opened ${what}${on} (${outcome}${ended})`;
  }
  return `${who}: ${entry.event} ${entry.action} (${outcome})`;
}
