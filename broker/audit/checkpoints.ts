/**
 * The chain's integrity over time: `verifyChain` walks it (GET /audit/verify, `audit-verify`), and
 * the retention deletes its oldest entries behind a checkpoint entry that the walk starts from.
 */
import type { AuditVerification } from '../../shared/api-types.js';
import { releaseSessionsThrough } from '../cluster/audit-queries.js';
import type { Db, Dialect } from '../db/database.js';
import { entrySha } from './chain.js';
import { CHECKPOINT_EVENT } from './entries.js';
import { CHAIN_LOCK, type NewEntry } from './writer.js';

interface CheckpointOptions {
  deleted_through: number;
  deleted_through_sha: string;
  deleted: number;
  cutoff: string;
}

/**
 * Retention: deletes the entries older than `cutoff`, behind a checkpoint entry appended first
 * (event audit.checkpoint) that records the id and sha of the last entry deleted, so `verify`
 * starts from it. One transaction under the chain's lock: appends wait, and a verify sees the
 * chain before or after, never between. Answers how many entries went.
 */
export async function pruneChain(
  db: Db,
  dialect: Dialect,
  cutoff: Date,
  append: (entry: NewEntry) => Promise<number>,
): Promise<{ deleted: number; checkpoint?: number }> {
  return db.transaction().execute(async (trx) => {
    await CHAIN_LOCK[dialect].execute(trx);
    const last = await trx
      .selectFrom('audit')
      .select(['id', 'sha'])
      .where('ts', '<', cutoff.toISOString())
      .where('event', '!=', CHECKPOINT_EVENT)
      .orderBy('id', 'desc')
      .limit(1)
      .executeTakeFirst();
    if (!last) return { deleted: 0 };
    const through = Number(last.id);
    const { n } = await trx
      .selectFrom('audit')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('id', '<=', through)
      .executeTakeFirstOrThrow();
    // The sha of the last entry deleted is the checkpoint's: the chain goes on from it.
    const options: CheckpointOptions = { deleted_through: through, deleted_through_sha: last.sha, deleted: Number(n), cutoff: cutoff.toISOString() };
    const checkpoint = await append({
      event: CHECKPOINT_EVENT,
      user_id: null,
      user_email: null,
      device_id: null,
      action: 'retention',
      options: JSON.stringify(options),
      result: 'ok',
      reason: `${Number(n)} entries older than ${cutoff.toISOString()} deleted (AUDIT_RETENTION_DAYS)`,
      source_ip: null,
      source: 'broker',
      session_id: null,
    });
    await releaseSessionsThrough(trx, through);
    await trx.deleteFrom('audit').where('id', '<=', through).execute();
    return { deleted: Number(n), checkpoint };
  });
}

/**
 * Walks the chain from its first entry; names the first entry whose sha does not match. When the
 * retention deleted the oldest entries, the walk starts from the newest checkpoint: the first entry
 * kept must chain to the sha of the last entry deleted that the checkpoint records (the checkpoint
 * itself is an entry of the chain, checked in turn). Entries deleted at the start without a
 * checkpoint, or beyond the one it names, break the chain at the first entry kept.
 */
export async function verifyChain(db: Db): Promise<AuditVerification> {
  let previous = '';
  let after = -1;
  let entries = 0;
  let from: AuditVerification['checkpoint'];
  const checkpoint = await db
    .selectFrom('audit')
    .select(['id', 'options'])
    .where('event', '=', CHECKPOINT_EVENT)
    .orderBy('id', 'desc')
    .limit(1)
    .executeTakeFirst();
  if (checkpoint) {
    const o = parseCheckpoint(checkpoint.options);
    if (o) {
      previous = o.deleted_through_sha;
      from = { id: Number(checkpoint.id), deleted_through: o.deleted_through };
    }
  }
  for (;;) {
    // From the first entry there is: one at or before the checkpoint's last deleted one (left over, put back) does not chain to it.
    const rows = await db.selectFrom('audit').selectAll().where('id', '>', after).orderBy('id').limit(1000).execute();
    if (rows.length === 0) return { ok: true, entries, ...(from ? { checkpoint: from } : {}) };
    for (const row of rows) {
      const expected = entrySha(previous, row);
      if (row.sha !== expected)
        return { ok: false, entries, ...(from ? { checkpoint: from } : {}), first_bad: { id: Number(row.id), sha: row.sha ?? '', expected } };
      entries += 1;
      previous = row.sha;
      after = Number(row.id);
    }
  }
}

function parseCheckpoint(options: string): CheckpointOptions | undefined {
  try {
    const o = JSON.parse(options) as Partial<CheckpointOptions>;
    if (typeof o.deleted_through === 'number' && typeof o.deleted_through_sha === 'string') return o as CheckpointOptions;
  } catch {
    // not a checkpoint's options: verified from the start
  }
  return undefined;
}
