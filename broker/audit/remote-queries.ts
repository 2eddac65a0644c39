/**
 * What remote access reads back from the audit trail: a console's start entry names its recording
 * (the `recording` option) and its owner, and its end entry says when it ended. The audit domain
 * owns the table (broker/db/owners.ts); broker/remote asks here.
 */
import type { Db } from '../db/database.js';

/** A recorded console's start entry, as the recordings list shows it. */
export interface RecordedConsoleStart {
  id: number | string;
  ts: string;
  user_id: string | null;
  user_email: string | null;
  device_id: string | null;
  /** JSON of its options, `recording` among them */
  options: string;
  session_id: string | null;
}

/**
 * Who opened the console recorded as `recordingId`, and on which device: its start entry's user and
 * device, or undefined when there is none (audit retention). The id must be a UUID: nothing in it
 * may be a LIKE wildcard.
 */
export async function recordingOwner(db: Db, recordingId: string): Promise<{ user_id: string | null; device_id: string | null } | undefined> {
  return db
    .selectFrom('audit')
    .select(['user_id', 'device_id'])
    .where('event', '=', 'remote.console.start')
    .where('options', 'like', `%"recording":"${recordingId}"%`)
    .orderBy('id')
    .limit(1)
    .executeTakeFirst();
}

/** The start entries of recorded consoles, newest first, at most `limit`; on one device when one is named. */
export async function recordedConsoleStarts(db: Db, query: { deviceId?: string; limit: number }): Promise<RecordedConsoleStart[]> {
  let q = db
    .selectFrom('audit')
    .select(['id', 'ts', 'user_id', 'user_email', 'device_id', 'options', 'session_id'])
    .where('event', '=', 'remote.console.start')
    .where('options', 'like', '%"recording":"%');
  if (query.deviceId) q = q.where('device_id', '=', query.deviceId);
  return q.orderBy('id', 'desc').limit(query.limit).execute();
}

/** The end entries of the given consoles' start entries, by start id, in one query (none when there are no ids). */
export async function consoleEnds(db: Db, startIds: readonly number[]): Promise<Map<number, { ts: string; duration_ms: number | null }>> {
  const ends = new Map<number, { ts: string; duration_ms: number | null }>();
  if (startIds.length === 0) return ends;
  const found = await db
    .selectFrom('audit')
    .select(['ref_id', 'ts', 'duration_ms'])
    .where('ref_id', 'in', [...startIds])
    .where('event', '=', 'remote.console.end')
    .execute();
  for (const end of found) ends.set(Number(end.ref_id), { ts: end.ts, duration_ms: end.duration_ms === null ? null : Number(end.duration_ms) });
  return ends;
}
