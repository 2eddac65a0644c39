import { sql } from 'kysely';
import type { DeviceScope } from '../../shared/resources.js';
import type { DeviceScopeSource } from '../access/access.js';
import { EpochCache, type ChangeEpoch } from '../cache.js';
import type { Db } from '../db/database.js';

export const ROOT_NODE = 'root';
export const UNASSIGNED_NODE = 'unassigned_group';
export const SYSTEM_NODES: readonly string[] = [ROOT_NODE, UNASSIGNED_NODE];

/** A device id: 64 lowercase hex, the SHA-256 of the device's public key. Group ids never take this form. */
export const DEVICE_ID_PATTERN = /^[0-9a-f]{64}$/;

/** How deep the tree may grow (root is depth 1). */
export const MAX_TREE_DEPTH = 32;

export interface ChainRow {
  node_id: string;
  parent_id: string | null;
  type: string;
  title: string;
  tags: string;
}

/** A node and every group above it, the node first and root last; empty when the node is absent. */
export async function nodeChain(db: Db, nodeId: string): Promise<ChainRow[]> {
  const rows = await sql<ChainRow>`
    WITH RECURSIVE chain(node_id, parent_id, type, title, tags, depth) AS (
      SELECT node_id, parent_id, type, title, tags, 0 FROM nodes WHERE node_id = ${nodeId}
      UNION ALL
      SELECT n.node_id, n.parent_id, n.type, n.title, n.tags, c.depth + 1 FROM nodes n JOIN chain c ON n.node_id = c.parent_id WHERE c.depth < 64
    )
    SELECT node_id, parent_id, type, title, tags FROM chain ORDER BY depth`.execute(db);
  return rows.rows;
}

/** The scope of a node from its chain: its node ids up the tree and its own and inherited tags. */
export function scopeOfChain(chain: ChainRow[], options: { withTags?: boolean } = {}): DeviceScope {
  const tags = new Set<string>();
  if (options.withTags !== false) {
    for (const row of chain) {
      try {
        for (const tag of JSON.parse(row.tags) as string[]) tags.add(tag);
      } catch {
        // a hand-edited row: no tags
      }
    }
  }
  return { deviceId: chain[0]?.node_id ?? '', nodeIds: chain.map((r) => r.node_id), tags: [...tags] };
}

/** Where an approved device sits in the group tree: its node ids up to the root and its inherited tags. */
export class DeviceScopes implements DeviceScopeSource {
  private readonly cache: EpochCache<string, DeviceScope>;

  constructor(
    private readonly db: Db,
    epoch: ChangeEpoch,
  ) {
    this.cache = new EpochCache(epoch);
  }

  async scopeOf(deviceId: string): Promise<DeviceScope | undefined> {
    const cached = this.cache.get(deviceId);
    if (cached) return cached;
    const chain = await nodeChain(this.db, deviceId);
    if (chain.length === 0 || chain[0].type !== 'device') return undefined;
    const scope = scopeOfChain(chain);
    this.cache.set(deviceId, scope);
    return scope;
  }

  async scopeOfNode(nodeId: string): Promise<DeviceScope | undefined> {
    const chain = await nodeChain(this.db, nodeId);
    if (chain.length === 0 || chain[chain.length - 1].node_id !== ROOT_NODE) return undefined;
    return scopeOfChain(chain);
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
