import { sql } from 'kysely';
import type { DeviceScope } from '../../shared/resources.js';
import type { DeviceScopeSource } from '../access/access.js';
import type { Db } from '../db/database.js';

export const ROOT_NODE = 'root';
export const UNASSIGNED_NODE = 'unassigned_group';

/** Where an approved device sits in the group tree: its node ids up to the root and its inherited tags. */
export class DeviceScopes implements DeviceScopeSource {
  constructor(private readonly db: Db) {}

  async scopeOf(deviceId: string): Promise<DeviceScope | undefined> {
    const rows = await sql<{ node_id: string; type: string; tags: string }>`
      WITH RECURSIVE chain(node_id, parent_id, type, tags, depth) AS (
        SELECT node_id, parent_id, type, tags, 0 FROM nodes WHERE node_id = ${deviceId}
        UNION ALL
        SELECT n.node_id, n.parent_id, n.type, n.tags, c.depth + 1 FROM nodes n JOIN chain c ON n.node_id = c.parent_id WHERE c.depth < 64
      )
      SELECT node_id, type, tags FROM chain ORDER BY depth`.execute(this.db);
    if (rows.rows.length === 0 || rows.rows[0].type !== 'device') return undefined;
    const tags = new Set<string>();
    for (const row of rows.rows) for (const tag of JSON.parse(row.tags) as string[]) tags.add(tag);
    return { deviceId, nodeIds: rows.rows.map((r) => r.node_id), tags: [...tags] };
  }
}

/** The tree's two system groups exist from the first start on. */
export async function ensureSystemNodes(db: Db): Promise<void> {
  const now = new Date().toISOString();
  for (const node of [
    { node_id: ROOT_NODE, parent_id: null, title: 'All devices' },
    { node_id: UNASSIGNED_NODE, parent_id: ROOT_NODE, title: 'Unassigned' },
  ]) {
    await db
      .insertInto('nodes')
      .values({ ...node, type: 'group', tags: '[]', created_at: now })
      .onConflict((oc) => oc.column('node_id').doNothing())
      .execute();
  }
}
