import { z } from 'zod';
import { NODE_ID_PATTERN } from '../../shared/resources.js';
import { DEVICE_ID_PATTERN } from '../devices/scope.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { auditableChangeBody, BUNDLES } from './bundles.js';
import { MAX_INLINE_CHANGES } from './deps.js';
import { singleLine } from '../../shared/text.js';
import type { ConfigService } from './service.js';
import { configChange as change, configCommit as commit, entityConfig as configResponse } from '../../shared/api-types/config.js';

const sha = z
  .string()
  .regex(/^[0-9a-f]{64}$/, 'must be a sha: 64 lowercase hexadecimal characters')
  .describe('The sha.');
const nodeId = z.string().regex(NODE_ID_PATTERN, 'must be a node id').describe('A node: root, a group or a device.');

const SCOPE =
  'configuration:read and configuration:manage accept resources (an extension of qbee’s list; none means `*`) and reach what their own resources cover, nothing inferred from other permissions: ' +
  'a node: `*`, a `node:` resource at or above it, or a tag it carries; a tag: `*` or `tag:<that tag>`. So a user limited to some devices can neither read nor change the configuration of others, ' +
  'of groups reaching beyond theirs, or of root. A change naming files of the file store (file_distribution sources, software_management templates, container env files, rauc bundles) also needs files:read, at staging and again at commit (403 `files_not_readable`).';

/** qbee's ChangeRequest. */
const changeRequest = z
  .object({
    node_id: z.string().max(64).optional().describe('The node (root, a group or a device) the change configures; or `tag`'),
    tag: z.string().max(64).optional().describe('The tag the change configures; or `node_id`'),
    formtype: z
      .string()
      .max(64)
      .describe(`The bundle: ${BUNDLES.join(', ')}`),
    extend: z
      .boolean()
      .optional()
      .describe(
        'Merge with the inherited bundle (true) or replace it (false, default) when `config` leaves out its own `extend`; `config.extend` (where qbee’s clients put it) decides otherwise',
      ),
    config: z
      .unknown()
      .describe(
        'The bundle configuration under qbee’s field names, with `enabled`, `version` and `reset_to_group` (true: drop this entity’s own bundle so the inherited one applies)',
      ),
  })
  .strict();

const RENDER =
  'A node’s configuration is rendered per bundle along root → groups → the node, with the configuration of each of its tags (own and inherited from groups; ordered by commit time) ' +
  'before the node’s own: a level that `extend`s merges into what it inherits (objects field by field, lists inherited items first, an item with the same key/name/username replaced), one that does not replaces it. ' +
  "Each bundle carries qbee's metadata (`enabled`, `extend`, `version`, `bundle_commit_id`, `inherited`, `inherits`: node id → title from where it is inherited down to the node) and `inherited_from`: " +
  'the entities it comes from, in order ({type, id, title}). Credential fields (parameters’ secrets, container registry passwords, password hashes) are answered as references. ';

const scopeQuery = z.object({
  scope: z.enum(['all', 'own']).optional().describe('all (default): rendered with what it inherits; own: the entity’s own bundles only'),
});

/** What the configuration routes use. */
export interface ConfigRouteDeps {
  configuration: ConfigService;
}

export const configRoutes: RouteSpec<ConfigRouteDeps>[] = [
  defineRoute({
    method: 'post',
    path: '/change',
    tag: 'configuration',
    summary: 'Stage a configuration change',
    description:
      'qbee’s ChangeRequest `{node_id | tag, formtype, extend, config}`: one bundle of one entity, staged for the caller (status `new`) until they commit. ' +
      'A staged change of the same entity and bundle is replaced. The bundle configuration is checked (known bundle; qbee’s field names where known; at most 256 KiB; bounded depth and sizes); ' +
      'a secret sent back as the reference the broker answered keeps its value. Answers the Change. ' +
      SCOPE,
    access: 'configuration:manage',
    body: changeRequest,
    response: change,
    audit: 'config.change',
    auditBody: auditableChangeBody,
    handler: async ({ body, deps, principal }) => deps.configuration.createChange(principal, body),
  }),
  defineRoute({
    method: 'get',
    path: '/change/{sha}',
    tag: 'configuration',
    summary: 'One of your configuration changes',
    description: 'A change the caller made (staged or committed); other users’ changes are not found (404).',
    access: 'configuration:read',
    params: z.object({ sha }),
    response: change,
    handler: async ({ params, deps, principal }) => deps.configuration.getChange(principal, params.sha),
  }),
  defineRoute({
    method: 'delete',
    path: '/change/{sha}',
    tag: 'configuration',
    summary: 'Discard one staged change',
    description: 'Discards a change the caller staged. 404 for other users’ changes, 409 `change_committed` for a committed one.',
    access: 'configuration:manage',
    params: z.object({ sha }),
    audit: 'config.discard',
    handler: async ({ params, deps, principal }) => deps.configuration.deleteChange(principal, params.sha),
  }),
  defineRoute({
    method: 'delete',
    path: '/changes',
    tag: 'configuration',
    summary: 'Discard all your staged changes',
    description: 'Discards every change the caller staged; other users’ staged changes stay.',
    access: 'configuration:manage',
    audit: 'config.discard',
    handler: async ({ deps, principal }) => deps.configuration.deleteChanges(principal),
  }),
  defineRoute({
    method: 'get',
    path: '/changelist',
    tag: 'configuration',
    summary: 'Your configuration changes',
    description:
      'The caller’s changes as a JSON array (qbee-cli decodes an array): staged ones (`status` new) unless `search` asks for committed. `search` is qbee’s JSON `{user_id, group_id (node), status (new|committed), form_type (bundle), type (config)}` (exact matches; any other field is a 400); ' +
      '`created_start` (inclusive) and `created_end` (exclusive) are UTC `YYYY-MM-DD hh:mm:ss`; `sort` id|created (default created), `sort_direction` (default desc), `limit` (default 3000, at most 10000), `offset`. ' +
      'Other users’ changes are never listed.',
    access: 'configuration:read',
    query: z.object({
      search: z.string().max(2000).optional(),
      created_start: z.string().max(32).optional(),
      created_end: z.string().max(32).optional(),
      sort: z.enum(['id', 'created']).optional(),
      sort_direction: z.enum(['asc', 'desc']).optional(),
      limit: z.coerce.number().int().min(1).max(10000).default(3000),
      offset: z.coerce.number().int().min(0).default(0),
    }),
    response: z.array(change),
    handler: async ({ query, deps, principal }) => deps.configuration.listChanges(principal, query),
  }),
  defineRoute({
    method: 'post',
    path: '/commit',
    tag: 'configuration',
    summary: 'Commit your staged changes',
    description:
      '`{action?: "commit", message, changes?}`: with `changes` (qbee ChangeRequests, at most ' +
      MAX_INLINE_CHANGES +
      ') the commit applies those and only those (the caller’s staged changes stay staged); without them (or with an empty list) every change the caller has staged. ' +
      'In one transaction, with a sha. 400 `nothing_to_commit` without changes to commit. ' +
      'The commit is an entry of the audit trail (GET /commitlist, event `config.commit`, its sha the commit’s, `message`, `changes`); connected agents whose rendered configuration changed get it at once, others when they connect. ' +
      'Every entity is checked again at commit. ' +
      SCOPE,
    access: 'configuration:manage',
    body: z
      .object({
        action: z.literal('commit').optional(),
        message: singleLine(z.string().min(1).max(1000)).describe('One line: no control characters nor bidirectional formatting characters'),
        changes: z.array(changeRequest).max(MAX_INLINE_CHANGES).optional(),
      })
      .strict(),
    response: commit,
    // The commit writes its own audit entry (whose sha it takes) in its own transaction; refusals are audited by the router.
    audit: false,
    auditBody: auditableChangeBody,
    handler: async ({ body, deps, principal, ip }) => deps.configuration.commit(principal, body, ip),
  }),
  defineRoute({
    method: 'get',
    path: '/commit/{sha}',
    tag: 'configuration',
    summary: 'A configuration commit with its changes',
    description: 'qbee’s CommitExtended; changes on entities outside the caller’s reach are left out. ' + SCOPE,
    access: 'configuration:read',
    params: z.object({ sha }),
    response: commit,
    handler: async ({ params, deps, principal }) => deps.configuration.getCommit(principal, params.sha),
  }),
  ...(['config', 'configpreview'] as const).map((base): RouteSpec<ConfigRouteDeps> =>
    defineRoute({
      method: 'get',
      path: `/${base}/{type}/{item_id}`,
      tag: 'configuration',
      summary: base === 'config' ? 'The committed configuration of a node or tag' : 'The configuration of a node or tag with your staged changes',
      description:
        (base === 'config' ? 'Committed configuration. ' : 'As GET /config/{type}/{item_id}, with the caller’s staged changes applied. ') +
        '`type` node|tag; `scope` all (default) or own. A tag’s configuration is its own. ' +
        RENDER +
        SCOPE,
      access: 'configuration:read',
      params: z.object({ type: z.enum(['node', 'tag']), item_id: z.string().min(1).max(64) }),
      query: scopeQuery,
      response: configResponse,
      handler: async ({ params, query, deps, principal }) =>
        deps.configuration.entityConfig(principal, params.type, params.item_id, query.scope ?? 'all', base === 'configpreview'),
    }),
  ),
  defineRoute({
    method: 'get',
    path: '/config/{device_id}',
    tag: 'configuration',
    summary: 'The committed configuration of a device',
    description: 'The device’s rendered configuration (as GET /config/node/{device_id}). ' + RENDER + SCOPE,
    access: 'configuration:read',
    device: ({ params }) => params.device_id,
    params: z.object({ device_id: z.string().regex(DEVICE_ID_PATTERN, 'must be a device id: 64 lowercase hexadecimal characters') }),
    response: configResponse,
    handler: async ({ params, deps, principal }) => deps.configuration.nodeConfig(principal, params.device_id, false, true),
  }),
  defineRoute({
    method: 'get',
    path: '/configpreview/{node_id}',
    tag: 'configuration',
    summary: 'The configuration of a node with your staged changes',
    description: 'As GET /configpreview/node/{node_id}. ' + RENDER + SCOPE,
    access: 'configuration:read',
    params: z.object({ node_id: nodeId }),
    response: configResponse,
    handler: async ({ params, deps, principal }) => deps.configuration.nodeConfig(principal, params.node_id, true, false),
  }),
];
