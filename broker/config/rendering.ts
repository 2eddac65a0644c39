/**
 * What a node or tag is configured with, rendered from its levels (render.ts): for the API (GET
 * /config, /configpreview, an inventory's Pushed), secrets masked, and for agents (a device's
 * configuration as it is sent, one device at a time or every device of one read of the tree).
 */
import crypto from 'node:crypto';
import type { AgentDefaults, CommittedConfig } from '../../shared/protocol.js';
import { TAG_PATTERN, TAG_RULE } from '../../shared/resources.js';
import { isSingleLine } from '../../shared/text.js';
import type { Principal } from '../access/principal.js';
import type { Db } from '../db/database.js';
import { readAttributes } from '../devices/attributes.js';
import { deviceAttributes } from '../devices/directory.js';
import { nodeChain, ROOT_NODE, scopeOfChain, type ChainRow } from '../devices/scope.js';
import type { TreeShape } from '../devices/tree.js';
import { invalid, notFound } from '../errors.js';
import { distributedFiles, maskSecrets, referencedFiles, withFileDigests, type BundleData } from './bundles.js';
import type { ConfigFiles, Entity, SecretKey } from './deps.js';
import type { EntityAccess } from './entities.js';
import { render, type EntityType, type Level, type OwnBundle, type RenderedConfig } from './render.js';
import { level, levelsOf, type ChangeRow, type ConfigStore, type EntityRow } from './store.js';

/** A device's configuration as its agent gets it, with what decides whether and how to send it. */
export type Pushable = ReturnType<typeof pushable>;

/** File-store digests looked up so far, shared across the devices of one propagation. */
export type DigestCache = Map<string, Promise<string | undefined>>;

export class Rendering {
  constructor(
    private readonly db: Db,
    private readonly q: ConfigStore,
    private readonly entities: EntityAccess,
    private readonly files: ConfigFiles,
    private readonly secrets: SecretKey,
    private readonly defaults: () => Promise<AgentDefaults>,
  ) {}

  /** The levels of an entity: for a node its chain root first and its tags; for a tag itself. With `staged`, the user's staged changes on top. */
  private async levelsFor(entity: Entity, chain: ChainRow[] | undefined, stagedBy?: string): Promise<{ nodes: Level[]; tags: Level[] }> {
    const down = chain ? [...chain].reverse() : [];
    const ranked = entity.type === 'tag' ? [{ tag: entity.id, rank: 0 }] : chain ? tagsDown(chain) : [];
    const keys: Entity[] = [...down.map((r) => ({ type: 'node' as const, id: r.node_id })), ...ranked.map((r) => ({ type: 'tag' as const, id: r.tag }))];
    const bundles = levelsOf(await this.q.entities(keys));
    if (stagedBy) applyStaged(bundles, await this.q.staged(stagedBy));
    return {
      nodes: down.map((r) => level('node', r.node_id, r.title, bundles)),
      tags: ranked.map((r) => ({ ...level('tag', r.tag, r.tag, bundles), rank: r.rank })),
    };
  }

  /** GET /config and /configpreview of a node or tag: `own` its own bundles, `all` rendered with what it inherits. */
  async entityConfig(principal: Principal, type: EntityType, id: string, scope: 'all' | 'own', preview: boolean): Promise<object> {
    const entity: Entity = { type, id };
    if (type === 'tag' && !TAG_PATTERN.test(id)) throw invalid(`item_id must be a tag: ${TAG_RULE}.`, { field: 'item_id' });
    await this.entities.requireEntity(principal, 'configuration:read', entity);
    const chain = type === 'node' ? await this.entities.chainOf(id) : undefined;
    const { nodes, tags } = this.maskedLevels(await this.levelsFor(entity, chain, preview ? principal.user.id : undefined));
    const rendered = scope === 'own' ? render(entity, type === 'node' ? nodes.slice(-1) : [], type === 'tag' ? tags : []) : render(entity, nodes, tags);
    return { status: 'success', config: rendered };
  }

  /** GET /config/{device_id} and /configpreview/{node_id}: rendered with everything it inherits. */
  async nodeConfig(principal: Principal, nodeId: string, preview: boolean, devicesOnly: boolean): Promise<object> {
    const chain = await this.entities.chainOf(nodeId);
    if (devicesOnly && chain[0].type !== 'device') throw notFound(`Device ${nodeId}`);
    return this.entityConfig(principal, 'node', nodeId, 'all', preview);
  }

  /**
   * Levels for answers: each level's credential fields as references bound to where they are stored
   * (the level's entity and the commit, or staged change, that stored them), masked before rendering
   * so a rendered value keeps the reference of its own level.
   */
  private maskedLevels<T extends Level>(levels: { nodes: Level[]; tags: T[] }): { nodes: Level[]; tags: T[] } {
    const mask = <L extends Level>(l: L): L => {
      const bundles = new Map<string, OwnBundle>();
      for (const [name, own] of l.bundles)
        bundles.set(name, {
          ...own,
          data: maskSecrets(name, own.data, this.secrets.key, { entity: `${l.type}:${l.id}`, version: own.changeId ?? own.commitSha }),
        });
      return { ...l, bundles };
    };
    return { nodes: levels.nodes.map(mask), tags: levels.tags.map(mask) };
  }

  /**
   * qbee's Pushed of a device (GET /inventory/{id}): its committed configuration as its agent gets it,
   * secret values as references; the bundles only for a caller whose configuration:read reaches the
   * device (the commit id for anyone who reaches its inventory).
   */
  async pushedConfig(principal: Principal, deviceId: string): Promise<{ commit_id: string; bundles: string[]; bundle_data: Record<string, unknown> }> {
    const out = await this.deviceRendered(deviceId);
    if (!out) return { commit_id: '', bundles: [], bundle_data: {} };
    if (!(await this.entities.mayRead(principal, { type: 'node', id: deviceId }))) return { commit_id: out.config.commit_id, bundles: [], bundle_data: {} };
    const bundle_data: Record<string, unknown> = {};
    for (const [name, data] of Object.entries(out.config.bundle_data))
      bundle_data[name] = maskSecrets(name, data as BundleData, this.secrets.key, { entity: `node:${deviceId}`, version: out.config.commit_id });
    return { commit_id: out.config.commit_id, bundles: out.config.bundles, bundle_data };
  }

  /**
   * A device's committed configuration as its agent gets it: enabled bundles only, secrets in clear,
   * and (unless `digests` is false) the sha256 of each distributed file in the manifest.
   */
  async deviceRendered(deviceId: string, digests = true): Promise<Pushable | undefined> {
    const chain = await nodeChain(this.db, deviceId);
    if (chain.length === 0 || chain[0].type !== 'device' || chain[chain.length - 1].node_id !== ROOT_NODE) return undefined;
    const { nodes, tags } = await this.levelsFor({ type: 'node', id: deviceId }, chain);
    const attributes = (await deviceAttributes(this.db, [deviceId])).get(deviceId);
    const rendered = render({ type: 'node', id: deviceId }, nodes, tags);
    return pushable(
      rendered,
      readAttributes(attributes).custom ?? {},
      digests ? await this.fileDigests(rendered, new Map()) : new Map(),
      await this.defaults(),
    );
  }

  /**
   * Every device of one read of the tree (or those of `only`) as its agent gets it, in the tree's
   * order. What a group passes down (its levels root → group, and the tags carried along) is worked
   * out once per group, not once per device: the per-device cost stays flat as the fleet grows.
   */
  async *fleet(shape: TreeShape, entityRows: EntityRow[], only?: ReadonlySet<string>): AsyncGenerator<{ deviceId: string; out: Pushable }> {
    const bundles = levelsOf(entityRows);
    const attributes = await deviceAttributes(this.db, only && only.size <= 500 ? [...only] : undefined);
    // Read once per run: a change of the defaults changes every digest, so every device gets them.
    const defaults = await this.defaults();
    const digests: DigestCache = new Map();
    const groups = new Map<number, GroupParts>();
    const partsOf = (i: number): GroupParts => {
      const known = groups.get(i);
      if (known) return known;
      const p = shape.parentIndex[i];
      const up = p >= 0 ? partsOf(p) : { nodes: [], tags: [], seen: new Set<string>() };
      const row = shape.rows[i];
      const own = [...new Set(shape.tags[i])].filter((tag) => !up.seen.has(tag));
      const parts = {
        nodes: [...up.nodes, level('node', row.node_id, row.title, bundles)],
        tags: [...up.tags, ...own.map((tag) => ({ ...level('tag', tag, tag, bundles), rank: up.nodes.length }))],
        seen: own.length === 0 ? up.seen : new Set([...up.seen, ...own]),
      };
      groups.set(i, parts);
      return parts;
    };
    for (const i of shape.order) {
      const row = shape.rows[i];
      if (row.type !== 'device' || (only && !only.has(row.node_id))) continue;
      const p = shape.parentIndex[i];
      if (p < 0) continue;
      const parts = partsOf(p);
      const ownTags = [...new Set(shape.tags[i])].filter((tag) => !parts.seen.has(tag));
      const rendered = render(
        { type: 'node', id: row.node_id },
        [...parts.nodes, level('node', row.node_id, row.title, bundles)],
        [...parts.tags, ...ownTags.map((tag) => ({ ...level('tag', tag, tag, bundles), rank: parts.nodes.length }))],
      );
      const custom = readAttributes(attributes.get(row.node_id)).custom ?? {};
      yield { deviceId: row.node_id, out: pushable(rendered, custom, await this.fileDigests(rendered, digests), defaults) };
    }
  }

  /**
   * The file store's sha256 of each file the rendered configuration distributes; `known` keeps the
   * answers across devices of one propagation (a file is looked up once).
   */
  private async fileDigests(rendered: RenderedConfig, known: DigestCache): Promise<Map<string, string | undefined>> {
    const out = new Map<string, string | undefined>();
    for (const file of distributedFiles(rendered.bundle_data)) {
      let digest = known.get(file);
      if (!digest) {
        digest = this.files.metadata(`/${file}`).then(
          (meta) => meta.sha256 ?? meta.digest,
          () => undefined,
        );
        known.set(file, digest);
      }
      out.set(file, await digest);
    }
    return out;
  }
}

/** What a group passes down to what is below it. */
interface GroupParts {
  /** its levels, root first, the group last */
  nodes: Level[];
  /** the tags carried down to it, each ranked by how far down it is first carried */
  tags: (Level & { rank: number })[];
  seen: Set<string>;
}

/** The tags a node carries or inherits, each with the depth it is first carried at from root (0). */
function tagsDown(chain: ChainRow[]): { tag: string; rank: number }[] {
  const out: { tag: string; rank: number }[] = [];
  const seen = new Set<string>();
  [...chain].reverse().forEach((row, depth) => {
    for (const tag of scopeOfChain([row]).tags) {
      if (seen.has(tag)) continue;
      seen.add(tag);
      out.push({ tag, rank: depth });
    }
  });
  return out;
}

/** The user's staged changes laid over the committed bundles, in the order staged. */
function applyStaged(bundles: Map<string, Map<string, OwnBundle>>, staged: ChangeRow[]): void {
  for (const c of staged) {
    const key = `${c.entity_type}:${c.entity_id}`;
    const data = JSON.parse(c.content) as BundleData;
    let m = bundles.get(key);
    if (!m) bundles.set(key, (m = new Map()));
    if (data.reset_to_group === true) m.delete(c.bundle);
    else m.set(c.bundle, { extend: Number(c.extend) === 1, data, commitSha: '', commitCreated: Date.parse(c.created_at), changeId: c.id });
  }
}

/**
 * The custom attributes an agent gets as parameters: one-line values only. The API refuses anything
 * else when attributes are written; a row stored before that rule (or edited by hand) may still
 * hold a newline, and such a value is left out here (its key in `dropped`, which the caller logs).
 */
export function parameterAttributes(custom: Record<string, string>): { attributes: Record<string, string>; dropped: string[] } {
  const attributes: Record<string, string> = {};
  const dropped: string[] = [];
  for (const [key, value] of Object.entries(custom)) {
    if (isSingleLine(key) && isSingleLine(value)) attributes[key] = value;
    else dropped.push(key);
  }
  return { attributes, dropped };
}

/**
 * What an agent gets: enabled bundles, without the broker's inheritance notes, file_distribution's
 * files with their sha256 (a plain field of the configuration); its digest decides whether to push,
 * so a new upload of a distributed file reaches the devices that use it.
 */
function pushable(rendered: RenderedConfig, custom: Record<string, string>, fileDigests: ReadonlyMap<string, string | undefined>, defaults: AgentDefaults) {
  const { attributes, dropped } = parameterAttributes(custom);
  const bundle_data: Record<string, unknown> = {};
  const bundles: string[] = [];
  for (const name of rendered.bundles) {
    const data = rendered.bundle_data[name];
    if (data.enabled === false) continue;
    const { inherited_from: _f, inherits: _i, inherited: _d, ...rest } = data;
    bundle_data[name] = rest;
    bundles.push(name);
  }
  const config: CommittedConfig = { commit_id: rendered.commit_id, bundles, bundle_data: withFileDigests(bundle_data, fileDigests) };
  const text = JSON.stringify({ config, attributes, defaults });
  const digest = crypto.createHash('sha256').update(text).digest('hex');
  return { config, attributes, defaults, dropped, files: referencedFiles(bundle_data), digest, size: Buffer.byteLength(text) };
}
