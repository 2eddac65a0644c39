/**
 * The devices domain's service: device records for other domains (placing and removing a device),
 * device attributes, and the group tree as each caller may see it (listing, nodes, tags). Changes
 * to the tree's shape are applied by tree-changes.ts; the shapes it answers with are in types.ts.
 */
import type { AttributesRecord, DeviceAttributes, GroupTree, GroupTreeNode } from '../../shared/api-types.js';
import type { Permission } from '../../shared/permissions.js';
import type { DeviceScope } from '../../shared/resources.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { Config } from '../environment.js';
import type { ChangeEpoch } from '../cache.js';
import type { Db, Store } from '../db/database.js';
import { forbidden, invalid, notFound } from '../errors.js';
import { applyPatch, AttributeLimitError, readAttributes, storedForm, type AttributesPatch } from './attributes.js';
import { DEVICE_ID_PATTERN, ROOT_NODE, scopeOfChain, UNASSIGNED_NODE, type ChainRow } from './scope.js';
import { DevicesStore, type DeviceRowsRemoval } from './store.js';
import { TreeShape, TreeSnapshot, unixSeconds, type OnlineCheck } from './tree.js';
import { applyTreeChanges, type TreeEditor } from './tree-changes.js';
import type { DeviceRecord, GroupListItem, HeardSource, NodeView, OnlineSource, TreeChange, TreeChangeResult } from './types.js';

export type { DeviceRecord, GroupListItem, HeardSource, NodeView, OnlineSource, TreeChange, TreeChangeResult };

/** A device counts as online when it was heard from within this window (until live state is plugged in). */
export const ONLINE_WINDOW_MS = 2 * 60_000;
/** How long a kept tree shape may be used without a change on this broker (another broker's changes show within this). */
const TREE_SHAPE_TTL_MS = 1000;

function parseTags(json: string): string[] {
  try {
    const v: unknown = JSON.parse(json);
    return Array.isArray(v) ? v.filter((t): t is string => typeof t === 'string') : [];
  } catch {
    return [];
  }
}

/** Devices, their attributes and the group tree. */
export class DevicesService {
  private readonly store: DevicesStore;
  private onlineSource?: OnlineSource;
  private heardSource?: HeardSource;

  /** The tree shape of the last listing, for the next ones while nothing changed (see shape()). */
  private kept?: { shape: TreeShape; epoch: number; at: number; count: number };

  constructor(
    database: Pick<Store, 'db' | 'dialect'>,
    private readonly config: Pick<Config, 'maxCustomAttributes'>,
    private readonly access: Pick<AccessService, 'canSee' | 'seer' | 'mayManageGroup' | 'mayManageTag' | 'treeManager' | 'manageableTags'>,
    /** Bumped by every change through the API: the kept tree shape is current only within one epoch. */
    private readonly epoch: Pick<ChangeEpoch, 'value'>,
    /** What other domains remove with a device, in the same transaction (broker/services.ts names them). */
    removals: readonly DeviceRowsRemoval[] = [],
  ) {
    this.store = new DevicesStore(database.db, database.dialect, removals);
  }

  async init(): Promise<void> {}

  async close(): Promise<void> {}

  /**
   * Plugs in live connection state (the agent connections). Without it, or when it answers
   * undefined, a device is online when its last contact is within ONLINE_WINDOW_MS.
   * Returns the source it replaces.
   */
  setOnlineSource(source: OnlineSource | undefined): OnlineSource | undefined {
    const previous = this.onlineSource;
    this.onlineSource = source;
    return previous;
  }

  /**
   * Plugs in the live last contact of connected agents (their last heartbeat, kept in memory): the
   * tree's `last_reported` and a node's then say when an online device was last heard from, not
   * when last_seen was last written.
   */
  setHeardSource(source: HeardSource | undefined): void {
    this.heardSource = source;
  }

  /** The last contact of a device: its live last heartbeat when connected, else the stored one. */
  private lastContact(deviceId: string, stored: string | null): string | null {
    return this.heardSource?.(deviceId) ?? stored;
  }

  isOnline(deviceId: string, lastSeen: string | null, now = Date.now()): boolean {
    const live = this.onlineSource?.(deviceId);
    if (live !== undefined) return live;
    if (!lastSeen) return false;
    const t = Date.parse(lastSeen);
    return Number.isFinite(t) && now - t <= ONLINE_WINDOW_MS;
  }

  private onlineCheck(): OnlineCheck {
    const now = Date.now();
    return (id, lastSeen) => this.isOnline(id, lastSeen, now);
  }

  // ---- for other domains -------------------------------------------------------------------

  /** A device known to the broker (pending or approved), or undefined. */
  async getDevice(deviceId: string): Promise<DeviceRecord | undefined> {
    const row = await this.store.device(this.store.db, deviceId);
    if (!row) return undefined;
    const node = await this.store.node(this.store.db, deviceId);
    return {
      device_id: row.device_id,
      state: row.state,
      hostname: row.hostname,
      public_key: row.public_key,
      bootstrap_key: row.bootstrap_key,
      attributes: readAttributes(row.attributes),
      created_at: row.created_at,
      approved_at: row.approved_at,
      last_seen: row.last_seen,
      last_ip: row.last_ip,
      agent_version: row.agent_version,
      node: node && node.type === 'device' ? { parent_id: node.parent_id, title: node.title, tags: parseTags(node.tags) } : null,
    };
  }

  /** Every device in the tree on which the principal holds `permission`, with its scope and title. */
  async listVisibleDevices(principal: Principal, permission: Permission = 'device:read'): Promise<Array<DeviceScope & { title: string }>> {
    return (await this.snapshot(principal, permission)).visibleDevices();
  }

  /**
   * Puts an approved device into the tree under `parentId` (a group), or updates its place and
   * title when it is there already. A missing or non-group parent (say, a deleted group a
   * bootstrap key still names) places it in `unassigned_group`, so no device gets lost.
   * Pass a transaction to make it part of a larger change. Returns the group used.
   */
  async placeDevice(deviceId: string, parentId: string, title: string, trx?: Db): Promise<string> {
    if (!DEVICE_ID_PATTERN.test(deviceId)) throw new Error(`placeDevice: "${deviceId}" is not a device id`);
    const run = async (db: Db) => {
      await this.store.lockTree(db);
      const parent = await this.store.node(db, parentId);
      const target = parent?.type === 'group' ? parentId : UNASSIGNED_NODE;
      const existing = await this.store.node(db, deviceId);
      if (existing) await this.store.updateNode(db, deviceId, { parent_id: target, title });
      else await this.store.insertNode(db, { node_id: deviceId, parent_id: target, type: 'device', title, tags: '[]' });
      return target;
    };
    return trx ? run(trx) : this.store.transaction(run);
  }

  /** Deletes a device's node, inventory and record together. True when it existed. */
  async removeDevice(deviceId: string, trx?: Db): Promise<boolean> {
    const run = async (db: Db) => {
      await this.store.lockTree(db);
      return this.store.deleteDevice(db, deviceId);
    };
    return trx ? run(trx) : this.store.transaction(run);
  }

  // ---- device attributes -------------------------------------------------------------------

  async getAttributes(deviceId: string): Promise<AttributesRecord> {
    const row = await this.store.device(this.store.db, deviceId);
    if (!row) throw notFound(`Device ${deviceId}`);
    return { ...readAttributes(row.attributes), custom_max: this.config.maxCustomAttributes };
  }

  /** Changes only the given fields, all or nothing; `""` clears a field or removes a custom key. */
  async patchAttributes(deviceId: string, patch: AttributesPatch): Promise<AttributesRecord> {
    const max = this.config.maxCustomAttributes;
    const next = await this.store.transaction(async (trx) => {
      const row = await this.store.device(trx, deviceId, { lock: true });
      if (!row) throw notFound(`Device ${deviceId}`);
      let updated: DeviceAttributes;
      try {
        updated = applyPatch(readAttributes(row.attributes), patch, max);
      } catch (err) {
        if (err instanceof AttributeLimitError) throw invalid(err.message, { field: err.field }, 'too_many_custom_attributes');
        throw err;
      }
      await this.store.setAttributes(trx, deviceId, JSON.stringify(storedForm(updated)));
      if (patch.device_name !== undefined) {
        await this.store.updateNode(trx, deviceId, { title: deviceTitle(updated.device_name, row.hostname, deviceId) });
      }
      return updated;
    });
    return { ...next, custom_max: max };
  }

  // ---- the group tree ------------------------------------------------------------------------

  private async snapshot(principal: Principal, permission: Permission, db: Db = this.store.db): Promise<TreeSnapshot> {
    return TreeSnapshot.build(await this.shape(db), this.access.seer(principal, permission));
  }

  /**
   * The tree's shape: read whole, or kept from the last listing while it is certainly current: no
   * change through this broker's API since (the change epoch), the same number of nodes (a cheap
   * count catches rows written around the API), and read at most TREE_SHAPE_TTL_MS ago, which bounds
   * how long a move or tag change made through another broker may go unseen (as for the other
   * hot-path caches, broker/cache.ts).
   * Inside a transaction the tree is always read.
   */
  private async shape(db: Db = this.store.db): Promise<TreeShape> {
    if (db !== this.store.db) return new TreeShape(await this.store.allNodes(db));
    const epoch = this.epoch.value; // taken before reading: a change during the read discards what it read
    const count = await this.store.countNodes();
    const kept = this.kept;
    if (kept && kept.epoch === epoch && kept.count === count && Date.now() - kept.at <= TREE_SHAPE_TTL_MS) return kept.shape;
    const shape = new TreeShape(await this.store.allNodes());
    if (this.epoch.value === epoch) this.kept = { shape, epoch, at: Date.now(), count: shape.rows.length };
    return shape;
  }

  /** A snapshot ready to render: the shown devices' attributes and last contact read in. */
  private async renderable(principal: Principal): Promise<TreeSnapshot> {
    const shape = await this.shape();
    const snap = TreeSnapshot.build(shape, this.access.seer(principal, 'device:read'));
    const rows = snap.shownDeviceRows();
    await this.store.fillDeviceDetails(rows, shape.rows.length);
    for (const row of rows) row.last_seen = this.lastContact(row.node_id, row.last_seen);
    return snap;
  }

  /**
   * The whole tree as the principal may see it. With `manageHints` (for the console, and only for a
   * holder of device:manage) each node says whether the principal may manage it, and the answer
   * which tags they may change: what to offer, decided by the access service.
   */
  async tree(principal: Principal, options: { manageHints?: boolean } = {}): Promise<GroupTree> {
    const snap = await this.renderable(principal);
    const manage = options.manageHints ? this.access.treeManager(principal) : undefined;
    const rendered = snap.render(ROOT_NODE, this.onlineCheck(), manage);
    // Root is shown to everyone holding device:read, even when nothing below is visible.
    const tree = rendered?.tree ?? {
      ...emptyRoot(),
      ...(manage ? { can_manage: manage({ deviceId: ROOT_NODE, nodeIds: [ROOT_NODE], tags: [] }, 'group') } : {}),
    };
    return { total_devices: rendered?.totalDevices ?? 0, tree, ...(manage ? { manageable_tags: this.access.manageableTags(principal) } : {}) };
  }

  /** The tree without `unassigned_group` (qbee's `skip_unassigned`), its devices no longer counted. */
  async treeWithoutUnassigned(principal: Principal, options: { manageHints?: boolean } = {}): Promise<GroupTree> {
    const whole = await this.tree(principal, options);
    const { total_devices, tree } = whole;
    const skipped = tree.nodes.find((n) => n.node_id === UNASSIGNED_NODE);
    if (!skipped) return whole;
    return { ...whole, total_devices: total_devices - countDevices(skipped), tree: { ...tree, nodes: tree.nodes.filter((n) => n !== skipped) } };
  }

  /**
   * Every group the principal sees in the tree, flat (qbee's GET /groups), filtered by direct
   * parent and by own tags that must all be present.
   */
  async groups(principal: Principal, search: { parent_id?: string; tags?: string[] }): Promise<GroupListItem[]> {
    const { tree } = await this.tree(principal);
    const out: GroupListItem[] = [];
    const walk = (node: GroupTreeNode, above: string[]) => {
      if (node.type !== 'group') return;
      const parent = above.length ? above[above.length - 1] : '';
      const ownTags = node.tags ?? [];
      if ((search.parent_id === undefined || search.parent_id === parent) && (search.tags ?? []).every((t) => ownTags.includes(t))) {
        out.push({
          node_id: node.node_id,
          parent_id: parent,
          tags: ownTags,
          type: 'group',
          title: node.title,
          ancestors: [...above, node.node_id],
          updated: 0,
        });
      }
      for (const child of node.nodes ?? []) walk(child, [...above, node.node_id]);
    };
    walk(tree, []);
    return out;
  }

  /** The subtree at a node: the node's fields at the top, with its ancestors and device count. */
  async subtree(principal: Principal, nodeId: string): Promise<GroupTreeNode & { ancestors: string[]; total_devices: number }> {
    const snap = await this.renderable(principal);
    if (!snap.has(nodeId)) throw notFound(`Node ${nodeId}`);
    const rendered = snap.render(nodeId, this.onlineCheck());
    if (!rendered && nodeId === ROOT_NODE) return { ...emptyRoot(), ancestors: [ROOT_NODE], total_devices: 0 };
    // A group the caller may not see answers like one that does not exist: its id and name stay unknown.
    if (!rendered) throw notFound(`Node ${nodeId}`);
    return { ...rendered.tree, ancestors: snap.ancestors(nodeId), total_devices: rendered.totalDevices };
  }

  /** One node with its path and effective tags. Devices were checked by the route already. */
  async node(principal: Principal, nodeId: string): Promise<NodeView> {
    const chain = await this.store.chain(this.store.db, nodeId);
    if (chain.length === 0 || chain[chain.length - 1].node_id !== ROOT_NODE) throw notFound(`Node ${nodeId}`);
    // A group the caller may not see answers like one that does not exist.
    if (chain[0].type !== 'device' && !(await this.visible(principal, chain))) throw notFound(`Node ${nodeId}`);
    const view = await this.viewOf(chain);
    // For a holder of device:manage: whether it reaches this node (the console offers its controls by it).
    const manage = this.access.treeManager(principal);
    return manage ? { ...view, can_manage: manage(scopeOfChain(chain), view.type) } : view;
  }

  /**
   * Is the node known to the caller: in their view of the tree (device:read on it, or a group
   * leading to something readable), or — for changes — within their device:manage resources?
   */
  private async visible(principal: Principal, chain: ChainRow[], db: Db = this.store.db, orManaged = false): Promise<boolean> {
    const scope = scopeOfChain(chain);
    if (this.access.canSee(principal, 'device:read', scope)) return true;
    if (orManaged && this.access.canSee(principal, 'device:manage', scope)) return true;
    // Shown anyway when it leads to something visible.
    return (await this.snapshot(principal, 'device:read', db)).isShown(chain[0].node_id);
  }

  private async viewOf(chain: ChainRow[], db: Db = this.store.db): Promise<NodeView> {
    const self = chain[0];
    const down = [...chain].reverse();
    const view: NodeView = {
      id: self.node_id,
      node_id: self.node_id,
      title: self.title,
      type: self.type === 'device' ? 'device' : 'group',
      parent_id: self.parent_id,
      tags: parseTags(self.tags),
      effective_tags: scopeOfChain(chain).tags,
      ancestors: down.map((r) => r.node_id),
      path: down.map((r) => ({ node_id: r.node_id, title: r.title })),
    };
    if (self.type === 'device') {
      const row = await this.store.device(db, self.node_id);
      view.status = this.isOnline(self.node_id, row?.last_seen ?? null) ? 'online' : 'offline';
      view.last_reported = unixSeconds(this.lastContact(self.node_id, row?.last_seen ?? null));
      view.attributes = readAttributes(row?.attributes);
    }
    return view;
  }

  /** Tags carried by nodes the principal may see, with how many such nodes carry each. */
  async tagsList(
    principal: Principal,
    query: { offset: number; items_per_page: number; search?: string },
  ): Promise<{ items: { tag: string; count: number }[]; total: number }> {
    const counts = (await this.snapshot(principal, 'device:read')).tagCounts();
    const search = query.search?.toLowerCase();
    const all = [...counts]
      .filter(([tag]) => !search || tag.toLowerCase().includes(search))
      .map(([tag, count]) => ({ tag, count }))
      .sort((a, b) => (a.tag < b.tag ? -1 : a.tag > b.tag ? 1 : 0));
    return { items: all.slice(query.offset, query.offset + query.items_per_page), total: all.length };
  }

  /**
   * Sets a node's own tags. Devices were checked by the route (device:manage on the device);
   * a group needs device:manage on `*` or a `node:` resource at or above it. Tags that a
   * restricted manager adds or removes must themselves be within their device:manage resources
   * (a `tag:` resource naming them): otherwise tagging would widen what other permissions,
   * keyed on tags, reach.
   */
  async setTags(principal: Principal, nodeId: string, tags: string[]): Promise<NodeView> {
    const wanted = [...new Set(tags)];
    return this.store.transaction(async (trx) => {
      await this.store.lockTree(trx);
      const chain = await this.store.chain(trx, nodeId);
      if (chain.length === 0) throw notFound(`Node ${nodeId}`);
      if (chain[0].type !== 'device' && !this.canManageGroup(principal, chain)) {
        if (!(await this.visible(principal, chain, trx, true))) throw notFound(`Node ${nodeId}`);
        throw forbidden('Not allowed: managing a group needs device:manage on "*" or on a node: resource at or above it.', {
          permission: 'device:manage',
          node_id: nodeId,
        });
      }
      await this.writeTags(trx, principal, chain, wanted);
      chain[0] = { ...chain[0], tags: JSON.stringify(wanted) };
      return this.viewOf(chain, trx);
    });
  }

  /** Replaces a node's own tags; a restricted manager may add or remove only tags within their resources. */
  private async writeTags(trx: Db, principal: Principal, chain: ChainRow[], wanted: string[]): Promise<void> {
    const current = parseTags(chain[0].tags);
    const changed = [...wanted.filter((t) => !current.includes(t)), ...current.filter((t) => !wanted.includes(t))];
    const refused = changed.find((tag) => !this.canManageTag(principal, tag));
    if (refused !== undefined) {
      throw forbidden(`Not allowed: tag "${refused}" is outside your device:manage resources, so you may not add or remove it.`, {
        permission: 'device:manage',
        field: 'tags',
        tag: refused,
      });
    }
    await this.store.updateNode(trx, chain[0].node_id, { tags: JSON.stringify(wanted) });
  }

  private canManageGroup(principal: Principal, chain: ChainRow[]): boolean {
    return this.access.mayManageGroup(principal, scopeOfChain(chain));
  }

  private canManageDevice(principal: Principal, chain: ChainRow[]): boolean {
    return this.access.canSee(principal, 'device:manage', scopeOfChain(chain));
  }

  private canManageNode(principal: Principal, chain: ChainRow[]): boolean {
    return chain[0].type === 'device' ? this.canManageDevice(principal, chain) : this.canManageGroup(principal, chain);
  }

  private canManageTag(principal: Principal, tag: string): boolean {
    return this.access.mayManageTag(principal, tag);
  }

  /** Applies tree changes in order, in one transaction: all of them or none (tree-changes.ts). */
  async changeTree(principal: Principal, changes: TreeChange[]): Promise<TreeChangeResult> {
    return this.store.transaction(async (trx) => {
      await this.store.lockTree(trx);
      return applyTreeChanges(this.editor(trx, principal), changes);
    });
  }

  /** What applying tree changes asks of this service, for one caller inside one transaction. */
  private editor(trx: Db, principal: Principal): TreeEditor {
    return {
      trx,
      store: this.store,
      knows: (chain) => this.visible(principal, chain, trx, true),
      canManageGroup: (chain) => this.canManageGroup(principal, chain),
      canManageNode: (chain) => this.canManageNode(principal, chain),
      canManageTag: (tag) => this.canManageTag(principal, tag),
      writeTags: (chain, wanted) => this.writeTags(trx, principal, chain, wanted),
    };
  }
}

function countDevices(node: GroupTreeNode): number {
  return node.type === 'device' ? 1 : (node.nodes ?? []).reduce((n, c) => n + countDevices(c), 0);
}

function emptyRoot(): GroupTreeNode {
  return { id: ROOT_NODE, node_id: ROOT_NODE, title: 'All devices', type: 'group', tags: [], nodes: [] };
}

/** A device's title in the tree: its name, else its host name, else the start of its id. */
export function deviceTitle(deviceName: string, hostname: string, deviceId: string): string {
  return deviceName || hostname || deviceId.slice(0, 12);
}
