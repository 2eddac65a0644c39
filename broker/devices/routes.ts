import { z } from 'zod';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { MAX_SEARCH_LENGTH, parseJsonSearch } from '../http/search.js';
import type { TreeChange, DevicesService } from './service.js';
import { subjectRecords } from '../audit/subjects.js';
import { TAG_RULE } from '../../shared/resources.js';
import {
  attributesPatch,
  attributesRecord,
  deviceOfNode,
  deviceParams,
  groupTreeResponse,
  MAX_CHANGES_PER_REQUEST,
  MAX_TAGS_PER_NODE,
  nodeParams,
  nodeView,
  subtreeResponse,
  tagList,
  tagsQuery,
  tagsResponse,
  treeChangesBody,
  treeChangesResponse,
} from './schema.js';
import type { Db } from '../db/database.js';

/** The nodes a tree change names (moved, renamed, deleted, and the groups it moves into). */
function treeChangeNodes(changes: Array<{ data?: unknown }>): unknown[] {
  return changes.flatMap((c) => {
    const data = (c.data ?? {}) as { node_id?: unknown; parent_id?: unknown };
    return [data.node_id, data.parent_id];
  });
}

/** qbee's GroupListSearch: both fields omitted when empty. */
const groupsSearch = z.object({
  parent_id: z.string().max(64).optional(),
  tags: z.array(z.string().max(64)).max(50).optional(),
});

const VISIBILITY =
  'Only devices the caller may read appear (device:read resources: `*`, `tag:<tag>` matching the device’s own or inherited tags, `node:<id>` naming the device or a group above it). ' +
  'A group appears when such a resource covers it (`*`, a `node:` resource at or above it, a `tag:` resource matching its own or inherited tags) or when something below it appears; ' +
  'so a caller holding `*` sees every group, empty ones included.';

/** What the device routes use; `db` is read by the audit subjects. */
export interface DevicesRouteDeps {
  devices: DevicesService;
  db: Db;
}

export const devicesRoutes: RouteSpec<DevicesRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/deviceattribute/{device_id}',
    tag: 'devices',
    summary: 'Read a device’s attributes',
    description:
      'Every legacy field as a string ("" when unset): device_name, description, latitude, longitude, country, city, zip, address; `custom` (key → value); and `custom_max`, the most custom attributes a device may hold, for a "used / max" counter. Unknown device: 404.',
    access: 'device:read',
    device: ({ params }) => params.device_id,
    params: deviceParams,
    response: attributesRecord,
    handler: async ({ params, deps }) => deps.devices.getAttributes(params.device_id),
  }),
  defineRoute({
    method: 'patch',
    path: '/deviceattribute/{device_id}',
    tag: 'devices',
    summary: 'Change some of a device’s attributes',
    description:
      'Only the fields in the body change; legacy and custom fields may be combined. "" clears a legacy field and removes a custom key. ' +
      'latitude -90..90 and longitude -180..180 as decimal strings (JSON numbers are accepted and stored as strings). ' +
      `Legacy fields hold at most 1024 characters; custom keys 1-64 characters (no control characters), values at most 4096. ` +
      'A device holds at most MAX_CUSTOM_ATTRIBUTES custom keys (default 100; see custom_max). ' +
      'All or nothing: any invalid field (400 naming it) leaves the record unchanged. Setting device_name also renames the device in the group tree. Answers the whole record after the change.',
    access: 'device:manage',
    device: ({ params }) => params.device_id,
    params: deviceParams,
    body: attributesPatch,
    response: attributesRecord,
    audit: 'device.attributes.update',
    subject: ({ params }, s) => subjectRecords.device(s.db, params.device_id),
    handler: async ({ params, body, deps }) => deps.devices.patchAttributes(params.device_id, body),
  }),
  defineRoute({
    method: 'get',
    path: '/grouptree',
    tag: 'devices',
    summary: 'The group tree with the devices the caller may read',
    description:
      'Answers {total_devices, tree}. A node is {id, node_id, title, type: group|device, tags (its own), nodes}; a device adds status (online|offline), last_reported (Unix seconds or null; for a device connected to this broker its last heartbeat) and attributes. ' +
      'Children are listed groups first, then by title. System groups: `root` and `unassigned_group` (approved devices without a group). ' +
      VISIBILITY,
    access: 'device:read',
    query: z.object({
      _format: z.enum(['json']).optional().describe('Only JSON is served; accepted for compatibility'),
      skip_unassigned: z.enum(['true', 'false', '1', '0']).optional().describe('"true": leave `unassigned_group` (and its devices) out (qbee-cli).'),
      manage_hints: z
        .enum(['true', 'false', '1', '0'])
        .optional()
        .describe(
          '"true" (the web console): for a holder of device:manage, each node carries `can_manage` and the answer `manageable_tags`, so controls the caller cannot use are not offered. The changes themselves are still decided per call.',
        ),
    }),
    response: groupTreeResponse,
    handler: async ({ principal, deps, query }) => {
      const options = { manageHints: query.manage_hints === 'true' || query.manage_hints === '1' };
      return query.skip_unassigned === 'true' || query.skip_unassigned === '1'
        ? deps.devices.treeWithoutUnassigned(principal, options)
        : deps.devices.tree(principal, options);
    },
  }),
  defineRoute({
    method: 'get',
    path: '/groups',
    tag: 'devices',
    summary: 'Groups of the tree, as a flat list',
    description:
      'A JSON array of `{node_id, parent_id, tags, type: "group", title, ancestors, updated}` (qbee\'s GroupNode): every group the caller sees in GET /grouptree. ' +
      '`search` is JSON `{"parent_id": "<group>", "tags": ["t", ...]}`: only the direct children of that group, only groups carrying every tag among their own. ' +
      'Any other search field answers 400. `updated` is 0 (not tracked). ' +
      VISIBILITY,
    access: 'device:read',
    query: z.object({ search: z.string().max(MAX_SEARCH_LENGTH).optional().describe('JSON: `{"parent_id"?, "tags"?}`') }),
    response: z.array(
      z.object({
        node_id: z.string(),
        parent_id: z.string(),
        tags: z.array(z.string()),
        type: z.literal('group'),
        title: z.string(),
        ancestors: z.array(z.string()),
        updated: z.number().int(),
      }),
    ),
    handler: async ({ principal, deps, query }) => deps.devices.groups(principal, parseJsonSearch(query.search, groupsSearch)),
  }),
  defineRoute({
    method: 'get',
    path: '/grouptree/{node_id}',
    tag: 'devices',
    summary: 'A subtree of the group tree',
    description:
      'The node’s own fields at the top level (as in GET /grouptree), with `ancestors` (node ids from root down to the node itself) and `total_devices` (devices shown below). ' +
      'Unknown node: 404; a node the caller may not see: 403. ' +
      VISIBILITY,
    access: 'device:read',
    device: deviceOfNode,
    params: nodeParams,
    query: z.object({ _format: z.enum(['json']).optional() }),
    response: subtreeResponse,
    handler: async ({ params, principal, deps }) => deps.devices.subtree(principal, params.node_id),
  }),
  defineRoute({
    method: 'put',
    path: '/grouptree',
    tag: 'devices',
    summary: 'Change the group tree: create, rename, move and delete nodes',
    description:
      '`{"changes":[{"action":"create|rename|move|delete","data":{...}}]}`, applied in order in one transaction: all or none. ' +
      'create {node_id?, title, parent_id, tags?} makes a group (node_id generated when left out; 64-hex ids are reserved for devices; an existing id is 409 node_exists). ' +
      'rename {node_id, title} renames a group or a device (a device’s device_name follows). move {node_id, parent_id} moves a group or a device into a group; a move into itself or below itself is refused. ' +
      `delete {node_id} deletes an empty group (otherwise 409 group_not_empty, its message naming what the group holds, e.g. "Group \"Lab\" holds 3 devices and 1 group: …", and \`holds: {devices, groups}\` counting its direct children; devices are removed with DELETE /removeapprovedhost/{node_id}). root and unassigned_group cannot be moved or deleted. The tree is at most 32 levels deep; at most ${MAX_CHANGES_PER_REQUEST} changes per call. ` +
      'position, type and oldParentId (sent by some clients) are accepted and ignored. Errors name the change: {change: <index>, field: "changes.<index>.data.<field>"}; the message starts "Change <index> (<action>): " when the call has several changes. ' +
      'A caller whose device:manage is restricted may only touch groups at or below one of their `node:` resources (tags do not grant group management) and devices their resources match, and may only give a new group tags named by their own `tag:` resources.',
    access: 'device:manage',
    body: treeChangesBody,
    response: treeChangesResponse,
    audit: 'device.tree.change',
    subject: ({ body }, s) => subjectRecords.nodes(s.db, treeChangeNodes(body.changes)),
    handler: async ({ body, principal, deps }) => deps.devices.changeTree(principal, body.changes as TreeChange[]),
  }),
  defineRoute({
    method: 'patch',
    path: '/grouptree/{node_id}',
    tag: 'devices',
    summary: 'Set the tags of a group or a device',
    description:
      `Body {"tags":[...]} replaces the node’s own tags (at most ${MAX_TAGS_PER_NODE}; ${TAG_RULE}). Devices below a group inherit its tags. ` +
      'A group needs device:manage on `*` or on a `node:` resource at or above it; a device needs device:manage on it. ' +
      'A restricted manager may only add or remove tags named by their own device:manage `tag:` resources (otherwise tagging could widen what other permissions reach). Answers the node as GET /node/{node_id}.',
    access: 'device:manage',
    device: deviceOfNode,
    params: nodeParams,
    body: z.object({ tags: tagList }),
    response: nodeView,
    audit: 'device.tags.update',
    subject: ({ params }, s) => subjectRecords.node(s.db, params.node_id),
    handler: async ({ params, body, principal, deps }) => deps.devices.setTags(principal, params.node_id, body.tags),
  }),
  defineRoute({
    method: 'get',
    path: '/node/{node_id}',
    tag: 'devices',
    summary: 'One node of the tree with its path and effective tags',
    description:
      '{id, node_id, title, type, parent_id, tags (own), effective_tags (own and inherited), ancestors (node ids from root down to the node), path [{node_id, title}]}; a device adds status, last_reported and attributes. ' +
      'Unknown node: 404; a node the caller may not see: 403.',
    access: 'device:read',
    device: deviceOfNode,
    params: nodeParams,
    response: nodeView,
    handler: async ({ params, principal, deps }) => deps.devices.node(principal, params.node_id),
  }),
  defineRoute({
    method: 'get',
    path: '/tagslist',
    tag: 'devices',
    summary: 'Tags in use, with how many nodes carry each',
    description:
      'Over the groups and devices the caller’s device:read resources match (groups shown in the tree only as the way to a visible device are not counted); `count` is how many of them carry the tag themselves. Sorted by tag; `search` filters by substring.',
    access: 'device:read',
    query: tagsQuery,
    response: tagsResponse,
    handler: async ({ query, principal, deps }) => deps.devices.tagsList(principal, query),
  }),
];
