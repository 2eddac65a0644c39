/**
 * What other domains ask of devices and nodes: the devices domain owns those tables (broker/db/owners.ts),
 * and this is its answer to everyone else, so that no other domain writes SQL on them.
 */
import type { Db } from '../db/database.js';
import { sql } from '../db/database.js';
import { TreeShape } from './tree.js';

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
