/**
 * Changes to the group tree (POST /grouptree's create, rename, move, update of tags and delete),
 * applied in order inside the caller's transaction, all or none: each checked against the caller's
 * device:manage resources, the tree's depth and shape, and the system groups; a refusal names the
 * change and field it concerns. The service (service.ts) opens the transaction and answers the
 * access questions through a TreeEditor.
 */
import crypto from 'node:crypto';
import { holdsSentence } from '../../shared/group-holds.js';
import type { Db } from '../db/database.js';
import { conflict, DomainError, forbidden, invalid } from '../errors.js';
import { readAttributes, storedForm } from './attributes.js';
import { DEVICE_ID_PATTERN, MAX_TREE_DEPTH, SYSTEM_NODES, type ChainRow } from './scope.js';
import type { DevicesStore } from './store.js';
import type { TreeChange, TreeChangeResult } from './types.js';

/** What applying changes asks of the service, for one caller inside one transaction. */
export interface TreeEditor {
  trx: Db;
  store: DevicesStore;
  /** Is the node known to the caller: in their view of the tree, or within their device:manage resources? */
  knows(chain: ChainRow[]): Promise<boolean>;
  canManageGroup(chain: ChainRow[]): boolean;
  /** device:manage on a device, or on a group as canManageGroup. */
  canManageNode(chain: ChainRow[]): boolean;
  canManageTag(tag: string): boolean;
  /** Replaces a node's own tags; a restricted manager may add or remove only tags within their resources. */
  writeTags(chain: ChainRow[], wanted: string[]): Promise<void>;
}

/** Applies the changes in order; the first refusal throws, naming the change and its field (the caller's transaction then rolls back). */
export async function applyTreeChanges(ed: TreeEditor, changes: TreeChange[]): Promise<TreeChangeResult> {
  const results: TreeChangeResult['results'] = [];
  for (const [index, change] of changes.entries()) {
    try {
      results.push({ action: change.action, node_id: await applyChange(ed, change) });
    } catch (err) {
      if (err instanceof DomainError) {
        const field = typeof err.details.field === 'string' ? `changes.${index}.data.${err.details.field}` : `changes.${index}`;
        // One change needs no number: its message is the refusal itself.
        const message = changes.length === 1 ? err.message : `Change ${index} (${change.action}): ${err.message} No change was applied.`;
        throw err.rephrased(message, {
          ...err.details,
          change: index,
          field,
        });
      }
      throw err;
    }
  }
  return { applied: results.length, results };
}

/** One change: the node it made or changed, or a DomainError saying why not. */
async function applyChange(ed: TreeEditor, change: TreeChange): Promise<string> {
  const { trx, store } = ed;
  const denied = (what: string) =>
    forbidden(`Not allowed: ${what} needs device:manage on "*" or on a node: resource at or above it (devices may also be matched by tag:).`, {
      permission: 'device:manage',
    });
  const unknown = (nodeId: string, field: string) => invalid(`There is no node "${nodeId}".`, { field }, 'unknown_node');
  const existing = async (nodeId: string, field: string) => {
    const chain = await store.chain(trx, nodeId);
    if (chain.length === 0) throw unknown(nodeId, field);
    return chain;
  };
  // A refusal on a node the caller may not even see answers as for a node that does not exist.
  const refuse = async (chain: ChainRow[], field: string, what: string) => ((await ed.knows(chain)) ? denied(what) : unknown(chain[0].node_id, field));
  const group = async (nodeId: string, field: string) => {
    const chain = await existing(nodeId, field);
    if (chain[0].type !== 'group') {
      if (!(await ed.knows(chain))) throw unknown(nodeId, field);
      throw invalid(`Node "${nodeId}" is a device, not a group.`, { field }, 'not_a_group');
    }
    return chain;
  };
  const notSystem = (nodeId: string, verb: string) => {
    if (SYSTEM_NODES.includes(nodeId)) throw invalid(`The system group "${nodeId}" cannot be ${verb}.`, { field: 'node_id' }, 'system_node');
  };

  switch (change.action) {
    case 'create': {
      const { data } = change;
      const nodeId = data.node_id || `group-${crypto.randomBytes(6).toString('hex')}`;
      if (DEVICE_ID_PATTERN.test(nodeId)) {
        throw invalid('Ids of 64 hexadecimal characters are reserved for devices; choose another group id.', { field: 'node_id' });
      }
      if (await store.node(trx, nodeId)) throw conflict('node_exists', `A node with id "${nodeId}" exists already.`, { field: 'node_id' });
      const parent = await group(data.parent_id, 'parent_id');
      if (!ed.canManageGroup(parent)) throw await refuse(parent, 'parent_id', `creating a group in "${data.parent_id}"`);
      if (parent.length + 1 > MAX_TREE_DEPTH) throw invalid(`The tree may be at most ${MAX_TREE_DEPTH} levels deep.`, { field: 'parent_id' });
      const tags = [...new Set(data.tags ?? [])];
      const refused = tags.find((tag) => !ed.canManageTag(tag));
      if (refused !== undefined) throw forbidden(`Not allowed: tag "${refused}" is outside your device:manage resources.`, { field: 'tags', tag: refused });
      await store.insertNode(trx, { node_id: nodeId, parent_id: data.parent_id, type: 'group', title: data.title, tags: JSON.stringify(tags) });
      return nodeId;
    }
    case 'rename': {
      const { data } = change;
      const chain = await existing(data.node_id, 'node_id');
      if (!ed.canManageNode(chain)) throw await refuse(chain, 'node_id', `renaming "${data.node_id}"`);
      if (chain[0].type === 'device') {
        // The device's name and its title in the tree are one value. The device row is locked
        // before its node, in the same order as an attribute change, so the two cannot deadlock.
        const row = await store.device(trx, data.node_id, { lock: true });
        if (row) {
          const attributes = { ...readAttributes(row.attributes), device_name: data.title };
          await store.setAttributes(trx, data.node_id, JSON.stringify(storedForm(attributes)));
        }
      }
      await store.updateNode(trx, data.node_id, { title: data.title });
      return data.node_id;
    }
    case 'move': {
      const { data } = change;
      notSystem(data.node_id, 'moved');
      const chain = await existing(data.node_id, 'node_id');
      const parent = await group(data.parent_id, 'parent_id');
      if (!ed.canManageNode(chain)) throw await refuse(chain, 'node_id', `moving "${data.node_id}"`);
      if (!ed.canManageGroup(parent)) throw await refuse(parent, 'parent_id', `moving a node into "${data.parent_id}"`);
      if (parent.some((r) => r.node_id === data.node_id)) {
        throw invalid(`Moving "${data.node_id}" into "${data.parent_id}" would put it inside itself.`, { field: 'parent_id' }, 'tree_cycle');
      }
      const height = chain[0].type === 'group' ? await store.subtreeHeight(trx, data.node_id, MAX_TREE_DEPTH) : 0;
      if (parent.length + 1 + height > MAX_TREE_DEPTH) throw invalid(`The tree may be at most ${MAX_TREE_DEPTH} levels deep.`, { field: 'parent_id' });
      await store.updateNode(trx, data.node_id, { parent_id: data.parent_id });
      return data.node_id;
    }
    case 'update': {
      const { data } = change;
      const chain = await existing(data.node_id, 'node_id');
      if (!ed.canManageNode(chain)) throw denied(`changing the tags of "${data.node_id}"`);
      await ed.writeTags(chain, [...new Set(data.tags)]);
      return data.node_id;
    }
    case 'delete': {
      const { data } = change;
      notSystem(data.node_id, 'deleted');
      const chain = await existing(data.node_id, 'node_id');
      if (chain[0].type !== 'group') {
        throw invalid(`"${data.node_id}" is a device; remove devices with DELETE /removeapprovedhost/{node_id}.`, { field: 'node_id' }, 'not_a_group');
      }
      if (!ed.canManageGroup(chain)) throw await refuse(chain, 'node_id', `deleting "${data.node_id}"`);
      const holds = await store.childCounts(trx, data.node_id);
      if (holds.devices + holds.groups > 0) {
        throw conflict('group_not_empty', `Group "${chain[0].title || data.node_id}" ${holdsSentence(holds)}: move or remove them before deleting it.`, {
          field: 'node_id',
          holds,
        });
      }
      await store.deleteNode(trx, data.node_id);
      return data.node_id;
    }
  }
}
