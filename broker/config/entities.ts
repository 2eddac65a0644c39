/**
 * The entities a configuration is committed on (a node of the tree or a tag) and who may reach
 * them: an entity named by a request, checked to exist, and the caller's configuration permission on
 * it and on the file-store files a change names. The access service decides; this asks it.
 */
import { TAG_PATTERN, TAG_RULE } from '../../shared/resources.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { Db } from '../db/database.js';
import { nodeChain, ROOT_NODE, type ChainRow } from '../devices/scope.js';
import { DomainError, invalid, notFound } from '../errors.js';
import { bundleFiles, type BundleData } from './bundles.js';
import type { Entity } from './deps.js';

export class EntityAccess {
  constructor(
    private readonly db: Db,
    private readonly access: AccessService,
  ) {}

  /** The node's chain (node first, root last); 404 for an unknown node. */
  async chainOf(nodeId: string): Promise<ChainRow[]> {
    const chain = await nodeChain(this.db, nodeId);
    if (chain.length === 0 || chain[chain.length - 1].node_id !== ROOT_NODE) throw notFound(`Node ${nodeId}`);
    return chain;
  }

  /** The entity a change names: exactly one of a node and a tag. */
  entityOf(req: { node_id?: string; tag?: string }): Entity {
    const hasNode = typeof req.node_id === 'string' && req.node_id !== '';
    const hasTag = typeof req.tag === 'string' && req.tag !== '';
    if (hasNode === hasTag) throw invalid('Name exactly one of node_id and tag: the entity the change configures.', { field: 'node_id' });
    if (hasTag) {
      if (!TAG_PATTERN.test(req.tag!)) throw invalid(`tag must be a tag: ${TAG_RULE}.`, { field: 'tag' });
      return { type: 'tag', id: req.tag! };
    }
    return { type: 'node', id: req.node_id! };
  }

  async requireEntity(principal: Principal, permission: 'configuration:read' | 'configuration:manage', entity: Entity): Promise<void> {
    if (entity.type === 'node') await this.chainOf(entity.id);
    await this.access.requireConfigEntity(principal, permission, entity);
  }

  /** Whether the caller's configuration:read reaches the entity (answers leave out what it does not). */
  mayRead(principal: Principal, entity: Entity): Promise<boolean> {
    return this.access.mayConfigure(principal, 'configuration:read', entity);
  }

  /**
   * A change naming files of the file store (FILE_FIELDS) sends them to devices, where whoever
   * configures them reads them: it needs files:read, the permission to read those files (it accepts
   * no resources, so it covers every path of the store). 403 `files_not_readable` otherwise. A
   * change that resets the bundle to the inherited one sends nothing.
   */
  async requireFiles(principal: Principal, bundle: string, data: BundleData): Promise<void> {
    if (data.reset_to_group === true) return;
    const files = bundleFiles(bundle, data);
    if (files.length === 0) return;
    if ((await this.access.decide(principal, 'files:read')).allowed) return;
    const shown = files.slice(0, 3).map((f) => `"${f.slice(0, 200)}"`);
    throw new DomainError(
      'forbidden',
      'files_not_readable',
      `Not allowed: ${bundle} names ${shown.join(', ')}${files.length > 3 ? ', …' : ''} of the file store, which devices are sent and you would read through them; that needs files:read.`,
      { permission: 'files:read', files: files.slice(0, 20).map((f) => f.slice(0, 1024)) },
    );
  }
}
