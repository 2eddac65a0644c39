/** The Configure area's records and links: entities, rendered bundles, staged changes. */
import type { ConfigChange, ConfigSource, EntityConfig, GroupTreeNode } from '../../../shared/api-types.js';
import { BUNDLES } from '../../../shared/config-bundles.js';
import { api } from '../api.js';
import { type JsonObject } from '../config-forms.js';
import { withQuery } from '../router.js';

/** qbee's bundles, in the broker's listing order. */
export const BUNDLE_NAMES: readonly string[] = BUNDLES;

export type EntityType = 'node' | 'tag';

export type Source = ConfigSource;

/**
 * The broker's records (shared/api-types/config.ts), with the bundle configurations they leave open
 * read as the JSON objects the broker keeps: a rendered bundle also carries where it comes from.
 */
export type RenderedBundle = JsonObject & { inherited_from?: Source[]; extend?: boolean };
export type RenderedConfig = Omit<EntityConfig, 'config'> & {
  config: Omit<EntityConfig['config'], 'bundle_data'> & { bundle_data: Record<string, RenderedBundle> };
};
export type Change = Omit<ConfigChange, 'content'> & { content: Omit<ConfigChange['content'], 'config'> & { config: JsonObject } };

export const configPath = (base: 'config' | 'configpreview', type: EntityType, id: string) => `/${base}/${type}/${encodeURIComponent(id)}`;

export function loadConfig(base: 'config' | 'configpreview', type: EntityType, id: string, scope: 'all' | 'own') {
  return api.get<RenderedConfig>(configPath(base, type, id), { scope });
}

/** Titles of the tree's nodes by id, to name the entities of changes. */
export function titles(node: GroupTreeNode | undefined, out = new Map<string, string>()): Map<string, string> {
  if (!node) return out;
  out.set(node.node_id, node.title || node.node_id);
  for (const c of node.nodes ?? []) titles(c, out);
  return out;
}

/** The device ids of the tree. */
export function deviceIds(node: GroupTreeNode | undefined, out = new Set<string>()): Set<string> {
  if (!node) return out;
  if (node.type === 'device') out.add(node.node_id);
  for (const c of node.nodes ?? []) deviceIds(c, out);
  return out;
}

export function entityHref(type: EntityType, id: string, bundle?: string) {
  return withQuery('/configure', { type, id, bundle });
}
