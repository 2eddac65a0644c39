/**
 * Rendering a configuration (qbee's semantics): for each bundle, the levels that carry it are walked
 * from the most general to the entity itself — root, the groups down the tree, the entity's tags
 * (inherited and own: tags carried higher up the tree first, then by commit time, then by name),
 * then the node itself. A level that `extend`s merges its
 * bundle into what it inherits; one that does not replaces it. `reset_to_group` is no level at all:
 * committing it removes the entity's own bundle, so the inherited one applies again.
 */
import { BUNDLES, extendBundle, type BundleData } from './bundles.js';

export type EntityType = 'node' | 'tag';

export interface OwnBundle {
  extend: boolean;
  data: BundleData;
  commitSha: string;
  /** Unix milliseconds of the commit */
  commitCreated: number;
  /** A staged change laid over the committed bundles (previews): its id. */
  changeId?: string;
}

export interface Level {
  type: EntityType;
  id: string;
  title: string;
  bundles: Map<string, OwnBundle>;
  /** tags: how far down the tree the tag is first carried (0: root); tags higher up come first */
  rank?: number;
}

/** qbee's config.Config. */
export interface RenderedConfig {
  id: string;
  type: EntityType;
  commit_id: string;
  /** nanoseconds, as qbee stores it */
  commit_created: number;
  bundles: string[];
  bundle_data: Record<string, BundleData>;
}

/**
 * Renders `target` (the last of `nodes` for a node; the tag itself for a tag) from its levels.
 * `nodes`: root first, the target node last (empty for a tag). `tags`: the tag levels that apply.
 */
export function render(target: { type: EntityType; id: string }, nodes: Level[], tags: Level[]): RenderedConfig {
  const out: RenderedConfig = { id: target.id, type: target.type, commit_id: '', commit_created: 0, bundles: [], bundle_data: {} };
  let newest = -1;
  const self = target.type === 'node' ? nodes[nodes.length - 1] : tags[0];
  const ancestors = target.type === 'node' ? nodes.slice(0, -1) : [];
  const sideTags = target.type === 'node' ? tags : [];
  for (const bundle of BUNDLES) {
    const carrying = sideTags.filter((t) => t.bundles.has(bundle));
    carrying.sort(
      (a, b) =>
        (a.rank ?? 0) - (b.rank ?? 0) ||
        a.bundles.get(bundle)!.commitCreated - b.bundles.get(bundle)!.commitCreated ||
        (a.id < b.id ? -1 : a.id > b.id ? 1 : 0),
    );
    const levels = [...ancestors.filter((l) => l.bundles.has(bundle)), ...carrying, ...(self?.bundles.has(bundle) ? [self] : [])];
    if (levels.length === 0) continue;
    let data: BundleData | undefined;
    let sources: Level[] = [];
    let last: OwnBundle | undefined;
    for (const level of levels) {
      const own = level.bundles.get(bundle)!;
      if (own.extend && data) {
        data = extendBundle(data, own.data);
        sources.push(level);
      } else {
        data = structuredClone(own.data);
        sources = [level];
      }
      last = own;
    }
    if (!data || !last) continue;
    let commit = sources[0].bundles.get(bundle)!;
    for (const s of sources) {
      const b = s.bundles.get(bundle)!;
      if (b.commitCreated > commit.commitCreated) commit = b;
    }
    if (commit.commitCreated > newest) {
      newest = commit.commitCreated;
      out.commit_id = commit.commitSha;
    }
    const inheritedFrom = sources.filter((s) => s !== self);
    const inherits: Record<string, string> = {};
    if (target.type === 'node' && inheritedFrom.length > 0) {
      // qbee's ordered map: from the first node the bundle comes from down to the rendered node.
      const firstNode = sources.find((s) => s.type === 'node');
      const from = firstNode ? nodes.indexOf(firstNode) : nodes.length - 1;
      for (const n of nodes.slice(Math.max(0, from))) inherits[n.id] = n.title;
    }
    delete data.reset_to_group;
    out.bundle_data[bundle] = {
      ...data,
      enabled: data.enabled ?? true,
      extend: last.extend,
      version: typeof data.version === 'string' && data.version !== '' ? data.version : 'v1',
      bundle_commit_id: commit.commitSha,
      inherited: inheritedFrom.length > 0,
      ...(inheritedFrom.length > 0 ? { inherits } : {}),
      inherited_from: sources.map((s) => ({ type: s.type, id: s.id, title: s.title })),
    };
    out.bundles.push(bundle);
  }
  out.commit_created = newest < 0 ? 0 : newest * 1_000_000;
  return out;
}
