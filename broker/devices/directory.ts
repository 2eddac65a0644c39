/**
 * What other domains ask of devices and nodes: the devices domain owns those tables (broker/db/owners.ts),
 * and this is its answer to everyone else, so that no other domain writes SQL on them.
 */
import type { Db } from '../db/database.js';
import { sql } from '../db/database.js';
import { TreeShape } from './tree.js';
import type { DevicesTable } from '../db/schema.js';

export type { Db };

/** The whole group tree from one read of every node, shaped by the devices domain (TreeShape). */
export async function readTreeShape(db: Db): Promise<TreeShape> {
  return new TreeShape(
    await db
      .selectFrom('nodes')
      .select(['node_id', 'parent_id', 'type', 'title', 'tags', sql<string | null>`NULL`.as('attributes'), sql<string | null>`NULL`.as('last_seen')])
      .execute(),
  );
}

/** Stored attributes (JSON) by device id: of these devices (500 ids a query), or of every device without `ids`. */
export async function deviceAttributes(db: Db, ids?: readonly string[]): Promise<Map<string, string>> {
  const query = () => db.selectFrom('devices').select(['device_id', 'attributes']);
  if (!ids) return new Map((await query().execute()).map((r) => [r.device_id, r.attributes]));
  const out = new Map<string, string>();
  for (let i = 0; i < ids.length; i += 500)
    for (const r of await query()
      .where('device_id', 'in', ids.slice(i, i + 500))
      .execute())
      out.set(r.device_id, r.attributes);
  return out;
}

/** Approved devices: what the subscription's usage counts. */
export async function countApprovedDevices(db: Db): Promise<number> {
  const row = await db
    .selectFrom('devices')
    .select((eb) => eb.fn.countAll<string | number>().as('n'))
    .where('state', '=', 'approved')
    .executeTakeFirst();
  return Number(row?.n ?? 0);
}

/** A device's record (pending or approved), or undefined; on the caller's executor. */
export async function deviceRecord(db: Db, deviceId: string): Promise<DevicesTable | undefined> {
  return db.selectFrom('devices').selectAll().where('device_id', '=', deviceId).executeTakeFirst();
}

/** A device's state (pending or approved), or undefined when there is no such device. */
export async function deviceState(db: Db, deviceId: string): Promise<DevicesTable['state'] | undefined> {
  return (await db.selectFrom('devices').select('state').where('device_id', '=', deviceId).executeTakeFirst())?.state;
}

/** Whether a node of the tree is a group. */
export async function isGroupNode(db: Db, nodeId: string): Promise<boolean> {
  const row = await db.selectFrom('nodes').select('type').where('node_id', '=', nodeId).executeTakeFirst();
  return row?.type === 'group';
}

/** Devices (pending and approved) enrolled with each of these bootstrap keys, by key_id. */
export async function deviceCountsByKey(db: Db, keyIds: string[]): Promise<Map<string, number>> {
  if (keyIds.length === 0) return new Map();
  const rows = await db
    .selectFrom('devices')
    .select(['bootstrap_key', (eb) => eb.fn.countAll<number>().as('n')])
    .where('bootstrap_key', 'in', keyIds)
    .groupBy('bootstrap_key')
    .execute();
  return new Map(rows.map((r) => [r.bootstrap_key as string, Number(r.n)]));
}

/** Inserts an enrolling device; false when one with this id was there already (a parallel enrolment: nothing changed). */
export async function insertEnrollingDevice(db: Db, row: DevicesTable): Promise<boolean> {
  const inserted = await db
    .insertInto('devices')
    .values(row)
    .onConflict((oc) => oc.column('device_id').doNothing())
    .returning('device_id')
    .executeTakeFirst();
  return inserted !== undefined;
}

/** Records what an enrolling device said of itself (hostname, address, when, agent version). */
export async function touchDevice(
  db: Db,
  deviceId: string,
  patch: Partial<Pick<DevicesTable, 'hostname' | 'last_ip' | 'last_seen' | 'agent_version'>>,
): Promise<void> {
  if (Object.keys(patch).length === 0) return;
  await db.updateTable('devices').set(patch).where('device_id', '=', deviceId).execute();
}

/** pending → approved, on the caller's transaction (which places the device's node); false when it was not pending. */
export async function markDeviceApproved(db: Db, deviceId: string, at: string): Promise<boolean> {
  const r = await db
    .updateTable('devices')
    .set({ state: 'approved', approved_at: at })
    .where('device_id', '=', deviceId)
    .where('state', '=', 'pending')
    .executeTakeFirst();
  return Number(r.numUpdatedRows) === 1;
}

/** Deletes a pending device, on the caller's transaction; false when it was not pending (decided meanwhile). */
export async function deletePendingDevice(db: Db, deviceId: string): Promise<boolean> {
  const r = await db.deleteFrom('devices').where('device_id', '=', deviceId).where('state', '=', 'pending').executeTakeFirst();
  return Number(r.numDeletedRows) === 1;
}

/** One page of the pending devices, oldest first, and how many there are. */
export async function listPendingDevices(db: Db, offset: number, limit: number): Promise<{ rows: DevicesTable[]; total: number }> {
  const rows = await db
    .selectFrom('devices')
    .selectAll()
    .where('state', '=', 'pending')
    .orderBy('created_at')
    .orderBy('device_id')
    .offset(offset)
    .limit(limit)
    .execute();
  const { total } = await db
    .selectFrom('devices')
    .select((eb) => eb.fn.countAll<number>().as('total'))
    .where('state', '=', 'pending')
    .executeTakeFirstOrThrow();
  return { rows, total: Number(total) };
}

/** The ids of every enrolled device (pending or approved), as a subquery for another owner's `in` (not run by itself). */
export function enrolledDeviceIds(db: Db) {
  return db.selectFrom('devices').select('device_id');
}

/** The node ids of every device in the tree, as a subquery for another owner's `in` (not run by itself). */
export function deviceNodeIds(db: Db) {
  return db.selectFrom('nodes').select('node_id').where('type', '=', 'device');
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

/** The titles of the given nodes by id, in one query (none when there are no ids); unknown ids are left out. */
export async function nodeTitles(db: Db, ids: readonly string[]): Promise<Map<string, string>> {
  const titles = new Map<string, string>();
  if (ids.length === 0) return titles;
  for (const row of await db
    .selectFrom('nodes')
    .select(['node_id', 'title'])
    .where('node_id', 'in', [...ids])
    .execute())
    titles.set(row.node_id, row.title);
  return titles;
}

/** Ids per `IN (...)` query: well under SQLite's and PostgreSQL's parameter limits. */
const DIRECTORY_ID_BATCH = 500;

/** What a device's record says of its host (name, address, last contact, agent, attributes JSON), for these devices: one query per 500 ids. */
export async function deviceHostRows(
  db: Db,
  deviceIds: string[],
): Promise<Array<{ device_id: string; hostname: string; last_ip: string | null; last_seen: string | null; agent_version: string | null; attributes: string }>> {
  const out = [];
  for (let i = 0; i < deviceIds.length; i += DIRECTORY_ID_BATCH)
    out.push(
      ...(await db
        .selectFrom('devices')
        .select(['device_id', 'hostname', 'last_ip', 'last_seen', 'agent_version', 'attributes'])
        .where('device_id', 'in', deviceIds.slice(i, i + DIRECTORY_ID_BATCH))
        .execute()),
    );
  return out;
}

/** Whether a node (group or device) with this id is in the tree. */
export async function nodeExists(db: Db, nodeId: string): Promise<boolean> {
  return (await db.selectFrom('nodes').select('node_id').where('node_id', '=', nodeId).executeTakeFirst()) !== undefined;
}
