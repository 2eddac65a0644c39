/**
 * What the audit trail asks of the brokers holding remote sessions (`remote_session_owners`, owned by
 * the cluster domain: broker/db/owners.ts). The audit writes a live session's start and its holder
 * together, and its end with the holder's release: these take the audit's transaction.
 */
import type { Db } from '../db/database.js';

/**
 * The statement recording which broker holds each live session (by the id of its start entry), to run
 * in the caller's transaction; the audit writer compiles it once per count of holders (its parameters
 * are each holder's id and broker, in order).
 */
export function recordSessionHoldersQuery(trx: Db, holders: { audit_id: number; broker_id: string }[]) {
  return trx.insertInto('remote_session_owners').values(holders.map(({ audit_id, broker_id }) => ({ audit_id, broker_id })));
}

/**
 * The statement releasing the sessions of these start entries (their end is being written), to run in
 * the caller's transaction; the audit writer compiles it once (its parameters are the ids, in order).
 */
export function releaseSessionsQuery(trx: Db, auditIds: number[]) {
  return trx.deleteFrom('remote_session_owners').where('audit_id', 'in', auditIds);
}

/** Releases every session whose start entry is at or before `auditId` (the retention deleted them), in the caller's transaction. */
export async function releaseSessionsThrough(trx: Db, auditId: number): Promise<void> {
  await trx.deleteFrom('remote_session_owners').where('audit_id', '<=', auditId).execute();
}

/** The start-entry ids of the sessions held by these brokers, as a subquery (one query with the caller's). */
export function sessionsHeldBy(db: Db, brokerIds: string[]) {
  // Typed as the audit's ids it is compared with (stored as the same integer).
  return db.selectFrom('remote_session_owners').select('remote_session_owners.audit_id').where('broker_id', 'in', brokerIds).$castTo<{ audit_id: number }>();
}
