import { sql } from 'kysely';
import { deviceConfigStates, type DeviceConfigState } from '../config/device-rows.js';
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

/**
 * Removes what another domain holds of these devices, in the transaction that removes them: each
 * owner of such rows exports one (inventory, metrics, CVE findings, configuration state), and the
 * composition (broker/services.ts) hands them in, so that this domain imports none of them.
 */
export type DeviceRowsRemoval = (trx: Db, deviceIds: string[]) => Promise<void>;

/** Persistence of the group tree (`nodes`) and of device records (`devices`). Methods take the
 * connection to use, so a caller can run several in one transaction. */
export class DevicesStore {
  constructor(
    readonly db: Db,
    private readonly dialect: Dialect,
    /** What other domains remove with a device (see DeviceRowsRemoval). */
    private readonly removals: readonly DeviceRowsRemoval[] = [],
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

  /**
   * Sets attributes, last contact and configuration commits on device rows: for all devices, or a few
   * by id; the records and the configuration states (the config domain's) one query each.
   */
  async fillDeviceDetails(rows: NodeRow[], totalNodes: number, db: Db = this.db): Promise<void> {
    if (rows.length === 0) return;
    const byId = new Map(rows.map((r) => [r.node_id, r]));
    // With the configuration state of each device (what it should run, what its agent last applied).
    const apply = (found: { device_id: string; attributes: string; last_seen: string | null }[], states: DeviceConfigState[]) => {
      const stateOf = new Map(states.map((c) => [c.device_id, c]));
      for (const d of found) {
        const row = byId.get(d.device_id);
        if (row) {
          row.attributes = d.attributes;
          row.last_seen = d.last_seen;
          row.device_commit_sha = stateOf.get(d.device_id)?.device_commit_sha ?? null;
          row.config_commit_sha = stateOf.get(d.device_id)?.commit_sha ?? null;
        }
      }
    };
    const details = () => db.selectFrom('devices').select(['device_id', 'attributes', 'last_seen']);
    if (rows.length * 4 > totalNodes) {
      apply(await details().execute(), await deviceConfigStates(db));
      return;
    }
    const ids = [...byId.keys()];
    for (let i = 0; i < ids.length; i += 500) {
      const batch = ids.slice(i, i + 500);
      apply(await details().where('device_id', 'in', batch).execute(), await deviceConfigStates(db, batch));
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
   * Removes a device's record, what other domains hold of it (inventory, metrics, findings, …) and
   * its node. True when any existed. The device row goes first: an attribute change locks it before
   * the node, and the same order cannot deadlock.
   */
  async deleteDevice(db: Db, deviceId: string): Promise<boolean> {
    const device = await db.deleteFrom('devices').where('device_id', '=', deviceId).executeTakeFirst();
    for (const remove of this.removals) await remove(db, [deviceId]);
    const node = await db.deleteFrom('nodes').where('node_id', '=', deviceId).where('type', '=', 'device').executeTakeFirst();
    return Number(node.numDeletedRows) + Number(device.numDeletedRows) > 0;
  }
}
