/**
 * The group tree as one caller may see it, computed in memory from one read of every node.
 *
 * Visibility (decided per node by the access service through `matches`):
 * - a device appears when the caller's resources match it (its node id, the groups above it,
 *   its own and inherited tags);
 * - a group appears when the caller's resources would match a device placed in it (so `*`, a
 *   `node:` resource naming it or a group above it, or a `tag:` resource naming one of its own or
 *   inherited tags), or when something below it appears (it is then shown as the way there).
 * Every group, however empty, is shown to a caller whose resources include `*`.
 */
import type { GroupTreeNode } from '../../shared/api-types.js';
import type { DeviceScope } from '../../shared/resources.js';
import { readAttributes } from './attributes.js';
import { ROOT_NODE } from './scope.js';

/** An ISO 8601 time as Unix seconds (qbee's int64 timestamps); null stays null. */
export function unixSeconds(iso: string | null): number | null {
  if (!iso) return null;
  const ms = Date.parse(iso);
  return Number.isNaN(ms) ? null : Math.floor(ms / 1000);
}

export interface NodeRow {
  node_id: string;
  parent_id: string | null;
  type: string;
  title: string;
  /** JSON string[] */
  tags: string;
  /** devices.attributes (JSON) for device nodes */
  attributes: string | null;
  last_seen: string | null;
  /** device nodes: the commit its agent last applied, and the commit of its rendered configuration */
  device_commit_sha?: string | null;
  config_commit_sha?: string | null;
}

/** Whether a device is connected now; `lastSeen` is the stored last contact. */
export type OnlineCheck = (deviceId: string, lastSeen: string | null) => boolean;

/**
 * Whether the caller may manage a node with this scope (the access service's answer): rendered as
 * `can_manage`. Like `matches`, it must not keep the scope it is given (see probeAt).
 */
export type ManageCheck = (scope: DeviceScope, type: 'group' | 'device') => boolean;

const NO_TAGS: string[] = [];
const NO_CHILDREN: number[] = [];

function parseTags(json: string): string[] {
  if (json === '[]' || !json) return NO_TAGS;
  try {
    const v: unknown = JSON.parse(json);
    return Array.isArray(v) ? v.filter((t): t is string => typeof t === 'string') : NO_TAGS;
  } catch {
    return NO_TAGS;
  }
}

/** A scope that only `*` matches: asking about it tells whether the caller sees everything. */
const NOWHERE: DeviceScope = { deviceId: '', nodeIds: [], tags: [] };

/**
 * The tree itself, the same for every caller: who is below whom, each group's path and inherited
 * tags, the order of a walk from root. Built from one read of every node; the group tree listing
 * keeps it for as long as nothing changed (see DevicesService), so a listing only decides visibility.
 */
export class TreeShape {
  readonly index = new Map<string, number>();
  readonly tags: string[][];
  /** Groups only: own id first, then every group above, up to root. */
  readonly paths: string[][] = [];
  /** Groups only: own and inherited tags. */
  readonly effective: string[][] = [];
  readonly children: number[][] = [];
  readonly parentIndex: Int32Array;
  /** reached from root (nodes whose parent is missing are left out) */
  readonly reachable: Uint8Array;
  /** reachable nodes, each after its parent */
  readonly order: number[] = [];

  constructor(readonly rows: readonly NodeRow[]) {
    const n = rows.length;
    this.tags = new Array(n);
    this.reachable = new Uint8Array(n);
    this.parentIndex = new Int32Array(n).fill(-1);
    for (let i = 0; i < n; i++) {
      this.index.set(rows[i].node_id, i);
      this.tags[i] = parseTags(rows[i].tags);
    }
    for (let i = 0; i < n; i++) {
      const parent = rows[i].parent_id;
      const p = parent === null ? undefined : this.index.get(parent);
      if (p !== undefined && p !== i && rows[p].type !== 'device') (this.children[p] ??= []).push(i);
    }
    const root = this.index.get(ROOT_NODE);
    if (root === undefined) return;
    // Top-down: each group's path and inherited tags from its parent's.
    const stack = [root];
    this.paths[root] = [ROOT_NODE];
    this.effective[root] = this.tags[root];
    while (stack.length) {
      const i = stack.pop() as number;
      if (this.reachable[i]) continue; // defensive: a cycle in the stored tree
      this.reachable[i] = 1;
      this.order.push(i);
      for (const c of this.children[i] ?? NO_CHILDREN) {
        if (this.reachable[c]) continue;
        this.parentIndex[c] = i;
        if (rows[c].type !== 'device') {
          this.paths[c] = [rows[c].node_id, ...this.paths[i]];
          this.effective[c] = this.tags[c].length === 0 ? this.effective[i] : union(this.effective[i], this.tags[c]);
        }
        stack.push(c);
      }
    }
  }
}

/** The tree as one caller sees it: which nodes their resources match, and which are shown. */
export class TreeSnapshot {
  private readonly rows: readonly NodeRow[];
  private readonly index: Map<string, number>;
  private readonly tags: string[][];
  private readonly paths: string[][];
  private readonly effective: string[][];
  private readonly children: number[][];
  private readonly parentIndex: Int32Array;
  private readonly reachable: Uint8Array;
  private readonly order: number[];
  /** matched by the caller's resources themselves */
  private readonly matched: Uint8Array;
  /** matched, or leading to something matched */
  private readonly shown: Uint8Array;
  /** Per group: the scope object probeAt re-fills for each device of the group. */
  private readonly probes: { deviceId: string; nodeIds: string[]; tags: string[] }[] = [];
  /** Device rows with their details read in, for rendering (the shape's rows stay as read). */
  private readonly detailed = new Map<number, NodeRow>();

  private constructor(shape: TreeShape, matches: (scope: DeviceScope) => boolean) {
    ({
      rows: this.rows,
      index: this.index,
      tags: this.tags,
      paths: this.paths,
      effective: this.effective,
      children: this.children,
      parentIndex: this.parentIndex,
      reachable: this.reachable,
      order: this.order,
    } = shape);
    const n = this.rows.length;
    this.shown = new Uint8Array(n);
    this.matched = new Uint8Array(n);
    if (this.order.length === 0) return;
    // A caller holding `*` sees every node: no need to ask per node.
    const everything = matches(NOWHERE);
    for (const i of this.order) {
      if (everything || matches(this.rows[i].type === 'device' ? this.probeAt(i) : this.scopeAt(i))) this.shown[i] = this.matched[i] = 1;
    }
    if (everything) return;
    // Bottom-up: a group leading to something shown is shown.
    for (let k = this.order.length - 1; k >= 0; k--) {
      const i = this.order[k];
      const p = this.parentIndex[i];
      if (this.shown[i] && p >= 0) this.shown[p] = 1;
    }
  }

  /** The scope of a reachable node; for a device built from its group's on demand. */
  private scopeAt(i: number): DeviceScope {
    const row = this.rows[i];
    if (row.type !== 'device') return { deviceId: row.node_id, nodeIds: this.paths[i], tags: this.effective[i] };
    const p = this.parentIndex[i];
    const inherited = p >= 0 ? this.effective[p] : NO_TAGS;
    return {
      deviceId: row.node_id,
      nodeIds: p >= 0 ? [row.node_id, ...this.paths[p]] : [row.node_id],
      tags: this.tags[i].length === 0 ? inherited : union(inherited, this.tags[i]),
    };
  }

  /**
   * The scope of a device for `matches` only, without allocating: one scope object per group is
   * re-filled for each of its devices (at 100k devices, one fresh scope each is most of the
   * garbage a listing makes).
   */
  private probeAt(i: number): DeviceScope {
    const p = this.parentIndex[i];
    if (p < 0) return this.scopeAt(i);
    const id = this.rows[i].node_id;
    const probe = (this.probes[p] ??= { deviceId: '', nodeIds: ['', ...this.paths[p]], tags: NO_TAGS });
    probe.deviceId = id;
    probe.nodeIds[0] = id;
    probe.tags = this.tags[i].length === 0 ? this.effective[p] : union(this.effective[p], this.tags[i]);
    return probe;
  }

  /**
   * `matches` answers for a node's scope: may the caller see a device placed here? It must not keep
   * the scope it is given (see probeAt).
   */
  static build(rows: NodeRow[] | TreeShape, matches: (scope: DeviceScope) => boolean): TreeSnapshot {
    return new TreeSnapshot(rows instanceof TreeShape ? rows : new TreeShape(rows), matches);
  }

  /**
   * Rows of every device the caller is shown, to fill in their details before rendering: copies,
   * so that the shape (which other listings may share) keeps its rows as they were read.
   */
  shownDeviceRows(): NodeRow[] {
    const out: NodeRow[] = [];
    for (let i = 0; i < this.rows.length; i++) {
      if (!this.shown[i] || this.rows[i].type !== 'device') continue;
      const copy = { ...this.rows[i] };
      this.detailed.set(i, copy);
      out.push(copy);
    }
    return out;
  }

  has(nodeId: string): boolean {
    const i = this.index.get(nodeId);
    return i !== undefined && this.reachable[i] === 1;
  }

  isShown(nodeId: string): boolean {
    const i = this.index.get(nodeId);
    return i !== undefined && this.shown[i] === 1;
  }

  /** Node ids from root down to the node itself. */
  ancestors(nodeId: string): string[] {
    const i = this.index.get(nodeId);
    return i === undefined || !this.reachable[i] ? [] : [...this.scopeAt(i).nodeIds].reverse();
  }

  /** The subtree at `nodeId` as the caller sees it, and how many devices it shows. */
  render(nodeId: string, online: OnlineCheck, manage?: ManageCheck): { tree: GroupTreeNode; totalDevices: number } | undefined {
    const i = this.index.get(nodeId);
    if (i === undefined || !this.shown[i]) return undefined;
    const counter = { devices: 0 };
    return { tree: this.renderNode(i, online, counter, manage), totalDevices: counter.devices };
  }

  private renderNode(i: number, online: OnlineCheck, counter: { devices: number }, manage?: ManageCheck): GroupTreeNode {
    const row = this.detailed.get(i) ?? this.rows[i];
    const hint = manage ? { can_manage: row.type === 'device' ? manage(this.probeAt(i), 'device') : manage(this.scopeAt(i), 'group') } : {};
    if (row.type === 'device') {
      counter.devices += 1;
      return {
        id: row.node_id,
        node_id: row.node_id,
        title: row.title,
        type: 'device',
        tags: this.tags[i],
        nodes: [],
        status: online(row.node_id, row.last_seen) ? 'online' : 'offline',
        last_reported: unixSeconds(row.last_seen),
        attributes: readAttributes(row.attributes),
        device_commit_sha: row.device_commit_sha ?? '',
        config_propagated: row.device_commit_sha != null && row.device_commit_sha === (row.config_commit_sha ?? ''),
        ...hint,
      };
    }
    const visible = (this.children[i] ?? NO_CHILDREN).filter((c) => this.shown[c] && this.parentIndex[c] === i);
    visible.sort((a, b) => compareNodes(this.rows[a], this.rows[b]));
    return {
      id: row.node_id,
      node_id: row.node_id,
      title: row.title,
      type: 'group',
      tags: this.tags[i],
      nodes: visible.map((c) => this.renderNode(c, online, counter, manage)),
      ...hint,
    };
  }

  /** Every device the caller may see, with its scope. */
  visibleDevices(): Array<DeviceScope & { title: string }> {
    const out: Array<DeviceScope & { title: string }> = [];
    for (const i of this.order) {
      const row = this.rows[i];
      if (row.type === 'device' && this.shown[i]) out.push({ ...this.scopeAt(i), title: row.title });
    }
    return out;
  }

  /**
   * For each tag carried directly by a node the caller's resources match: how many such nodes
   * carry it (groups shown only as the way to something visible are not counted).
   */
  tagCounts(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const i of this.order) {
      if (!this.matched[i]) continue;
      for (const tag of this.tags[i]) counts.set(tag, (counts.get(tag) ?? 0) + 1);
    }
    return counts;
  }
}

function union(inherited: string[], own: string[]): string[] {
  const out = [...inherited];
  for (const t of own) if (!out.includes(t)) out.push(t);
  return out;
}

/** Groups before devices, then by title, then by id (stable across calls). */
function compareNodes(a: NodeRow, b: NodeRow): number {
  if (a.type !== b.type) return a.type === 'group' ? -1 : 1;
  if (a.title !== b.title) return a.title < b.title ? -1 : 1;
  return a.node_id < b.node_id ? -1 : a.node_id > b.node_id ? 1 : 0;
}
