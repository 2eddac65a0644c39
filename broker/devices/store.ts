import { sql } from 'kysely';
import type { Db, Dialect } from '../db/database.js';
import type { DevicesTable } from '../db/schema.js';
import { nodeChain, ROOT_NODE, type ChainRow } from './scope.js';
import type { NodeRow } from './tree.js';

export interface NodeRecord {
  node_id: string;
  parent_id: string | null;
  type: string;
  title: string;
  tags: string;
}

/** Persistence of the group tree (`nodes`) and of device records (`devices`). Methods take the
 * connection to use, so a caller can run several in one transaction. */
export class DevicesStore {
  constructor(
    readonly db: Db,
    private readonly dialect: Dialect,
  ) {}

  transaction<T>(work: (trx: Db) => Promise<T>): Promise<T> {
    return this.db.transaction().execute(work);
  }

  /**
   * Serialises changes to the tree's shape. SQLite runs one transaction at a time already; on
   * PostgreSQL two concurrent moves could otherwise build a cycle, or a device could land in a
   * group being deleted.
   */
  async lockTree(trx: Db): Promise<void> {
    if (this.dialect === 'postgres') await trx.selectFrom('nodes').select('node_id').where('node_id', '=', ROOT_NODE).forUpdate().execute();
  }

  /**
   * Every node of the tree, without device details: one query. Details are read afterwards for
   * the devices the caller is shown only (`fillDeviceDetails`) — joining them here for every device
   * costs more than the whole rest of a listing for a restricted user.
   */
  async allNodes(db: Db = this.db): Promise<NodeRow[]> {
    // The detail columns come back empty from the query itself: no second object per row.
    return db
      .selectFrom('nodes')
      .select(['node_id', 'parent_id', 'type', 'title', 'tags', sql<string | null>`NULL`.as('attributes'), sql<string | null>`NULL`.as('last_seen')])
      .execute();
  }

  /** How many nodes there are: a cheap check that a kept tree shape still has every node. */
  async countNodes(db: Db = this.db): Promise<number> {
    const row = await db
      .selectFrom('nodes')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  /** Sets attributes and last contact on device rows: all devices in one query, or a few by id. */
  async fillDeviceDetails(rows: NodeRow[], totalNodes: number, db: Db = this.db): Promise<void> {
    if (rows.length === 0) return;
    const byId = new Map(rows.map((r) => [r.node_id, r]));
    const apply = (
      found: { device_id: string; attributes: string; last_seen: string | null; device_commit_sha: string | null; config_commit_sha: string | null }[],
    ) => {
      for (const d of found) {
        const row = byId.get(d.device_id);
        if (row) {
          row.attributes = d.attributes;
          row.last_seen = d.last_seen;
          row.device_commit_sha = d.device_commit_sha;
          row.config_commit_sha = d.config_commit_sha;
        }
      }
    };
    // With the configuration state of each device (what it should run, what its agent last applied).
    const details = () =>
      db
        .selectFrom('devices')
        .leftJoin('device_config', 'device_config.device_id', 'devices.device_id')
        .select([
          'devices.device_id',
          'devices.attributes',
          'devices.last_seen',
          'device_config.device_commit_sha',
          'device_config.commit_sha as config_commit_sha',
        ]);
    if (rows.length * 4 > totalNodes) {
      apply(await details().execute());
      return;
    }
    const ids = [...byId.keys()];
    for (let i = 0; i < ids.length; i += 500) {
      apply(
        await details()
          .where('devices.device_id', 'in', ids.slice(i, i + 500))
          .execute(),
      );
    }
  }

  chain(db: Db, nodeId: string): Promise<ChainRow[]> {
    return nodeChain(db, nodeId);
  }

  node(db: Db, nodeId: string): Promise<NodeRecord | undefined> {
    return db.selectFrom('nodes').select(['node_id', 'parent_id', 'type', 'title', 'tags']).where('node_id', '=', nodeId).executeTakeFirst();
  }

  /** What a group holds directly: its devices and its sub-groups, counted. */
  async childCounts(db: Db, nodeId: string): Promise<{ devices: number; groups: number }> {
    const rows = await db
      .selectFrom('nodes')
      .select(['type', (eb) => eb.fn.countAll<number | string>().as('n')])
      .where('parent_id', '=', nodeId)
      .groupBy('type')
      .execute();
    const count = (type: string) => Number(rows.find((r) => r.type === type)?.n ?? 0);
    return { devices: count('device'), groups: count('group') };
  }

  /** Levels below a node (0 for a leaf), bounded by `limit`. */
  async subtreeHeight(db: Db, nodeId: string, limit: number): Promise<number> {
    let frontier = [nodeId];
    let height = 0;
    while (height < limit && frontier.length > 0) {
      // Devices are leaves: one row tells that a level exists; only groups lead further down.
      const any = await db.selectFrom('nodes').select('node_id').where('parent_id', 'in', frontier).limit(1).executeTakeFirst();
      if (!any) break;
      height += 1;
      const groups = await db.selectFrom('nodes').select('node_id').where('parent_id', 'in', frontier).where('type', '=', 'group').execute();
      frontier = groups.map((r) => r.node_id);
    }
    return height;
  }

  async insertNode(db: Db, node: NodeRecord): Promise<void> {
    await db
      .insertInto('nodes')
      .values({ ...node, created_at: new Date().toISOString() })
      .execute();
  }

  async updateNode(db: Db, nodeId: string, change: Partial<Pick<NodeRecord, 'parent_id' | 'title' | 'tags'>>): Promise<void> {
    await db.updateTable('nodes').set(change).where('node_id', '=', nodeId).execute();
  }

  async deleteNode(db: Db, nodeId: string): Promise<void> {
    await db.deleteFrom('nodes').where('node_id', '=', nodeId).execute();
  }

  /** The device row; on PostgreSQL inside a transaction, locked until it ends. */
  async device(db: Db, deviceId: string, options: { lock?: boolean } = {}): Promise<DevicesTable | undefined> {
    let q = db.selectFrom('devices').selectAll().where('device_id', '=', deviceId);
    if (options.lock && this.dialect === 'postgres') q = q.forUpdate();
    return q.executeTakeFirst();
  }

  async setAttributes(db: Db, deviceId: string, attributes: string): Promise<void> {
    await db.updateTable('devices').set({ attributes }).where('device_id', '=', deviceId).execute();
  }

  /**
   * Removes a device's record, inventory, metrics and node. True when any existed. The device row goes
   * first: an attribute change locks it before the node, and the same order cannot deadlock.
   */
  async deleteDevice(db: Db, deviceId: string): Promise<boolean> {
    const device = await db.deleteFrom('devices').where('device_id', '=', deviceId).executeTakeFirst();
    await db.deleteFrom('inventory').where('device_id', '=', deviceId).execute();
    await db.deleteFrom('inventory_items').where('device_id', '=', deviceId).execute();
    await db.deleteFrom('inventory_packages').where('device_id', '=', deviceId).execute();
    await db.deleteFrom('metric_samples').where('device_id', '=', deviceId).execute();
    await db.deleteFrom('metric_rollups').where('device_id', '=', deviceId).execute();
    await db.deleteFrom('cve_matches').where('device_id', '=', deviceId).execute();
    const node = await db.deleteFrom('nodes').where('node_id', '=', deviceId).where('type', '=', 'device').executeTakeFirst();
    return Number(node.numDeletedRows) + Number(device.numDeletedRows) > 0;
  }
}
