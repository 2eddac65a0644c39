/**
 * What other domains ask of devices and nodes: the devices domain owns those tables (broker/db/owners.ts),
 * and this is its answer to everyone else, so that no other domain writes SQL on them.
 */
import type { Db } from '../db/database.js';

export type { Db };

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
