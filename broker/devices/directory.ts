/**
 * What other domains ask of devices and nodes: the devices domain owns those tables (broker/db/owners.ts),
 * and this is its answer to everyone else, so that no other domain writes SQL on them.
 */
import type { Db } from '../db/database.js';

export type { Db };

/** Ids per `IN (...)` query: well under SQLite's and PostgreSQL's parameter limits. */
const DIRECTORY_ID_BATCH = 500;

/** A device's enrolment state ('pending', 'approved', …), or undefined when the broker does not know it. */
export async function deviceState(db: Db, deviceId: string): Promise<string | undefined> {
  return (await db.selectFrom('devices').select('state').where('device_id', '=', deviceId).executeTakeFirst())?.state;
}

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
