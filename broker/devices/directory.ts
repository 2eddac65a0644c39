/**
 * What other domains ask of devices and nodes: the devices domain owns those tables (broker/db/owners.ts),
 * and this is its answer to everyone else, so that no other domain writes SQL on them.
 */
import type { Db } from '../db/database.js';

export type { Db };

/** A device's stored row by its id, as it is (the audit compares it before and after a change). */
export async function deviceRow(db: Db, deviceId: string) {
  return db.selectFrom('devices').selectAll().where('device_id', '=', deviceId).executeTakeFirst();
}

/** A node's stored row (group or device) by its id, as it is. */
export async function nodeRow(db: Db, nodeId: string) {
  return db.selectFrom('nodes').selectAll().where('node_id', '=', nodeId).executeTakeFirst();
}

/** The stored rows of these nodes (ids as given, no more than asked), in node_id order: one query. */
export async function nodeRows(db: Db, nodeIds: string[]) {
  return nodeIds.length ? db.selectFrom('nodes').selectAll().where('node_id', 'in', nodeIds).orderBy('node_id').execute() : [];
}

/** When a device was last in contact, as stored (null if never; undefined for no such device). */
export async function lastSeenOf(db: Db, deviceId: string): Promise<string | null | undefined> {
  const row = await db.selectFrom('devices').select(['last_seen']).where('device_id', '=', deviceId).executeTakeFirst();
  return row?.last_seen;
}

/** Records an agent's contact on its device: last contact, and the address and version it came with. */
export async function recordContact(db: Db, deviceId: string, patch: { last_seen?: string; last_ip?: string; agent_version?: string | null }): Promise<void> {
  await db.updateTable('devices').set(patch).where('device_id', '=', deviceId).execute();
}

/** Records the same last contact on many devices in one statement (the caller bounds the batch). */
export async function recordLastSeen(db: Db, deviceIds: string[], lastSeen: string): Promise<void> {
  await db.updateTable('devices').set({ last_seen: lastSeen }).where('device_id', 'in', deviceIds).execute();
}
