import { z } from 'zod';
import type { DeviceStatus } from '../../shared/api-types.js';
import { DEVICE_ID_PATTERN } from '../devices/scope.js';
import { listPage, pagingQuery } from '../http/paging.js';
import { inventoryItemReport, inventoryListItem as listItem, inventoryRecord as oneReport } from '../../shared/api-types/inventory.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { subjectRecords } from '../audit/subjects.js';
import { MAX_SEARCH_LENGTH } from '../http/search.js';
import { nodeParams } from '../devices/schema.js';
import { INVENTORY_REPORT_TYPES } from '../../shared/inventory.js';
import { edgeHost } from '../qbee/edge.js';
import type { AgentHub } from '../agents/hub.js';
import type { ConfigService } from '../config/service.js';
import type { Db } from '../db/database.js';
import type { EnrolService } from '../enrol/service.js';
import type { Config } from '../environment.js';
import type { InventoryService } from './service.js';

const deviceId = z.string().regex(DEVICE_ID_PATTERN, 'must be a device id: 64 lowercase hexadecimal characters').describe('The device id.');
const listQuery = z.object({
  search: z
    .string()
    .max(MAX_SEARCH_LENGTH)
    .optional()
    .describe(
      'qbee\'s JSON search, e.g. `{"title":"edge","tags":["prod"],"ancestor_ids":["lab"]}` (fields: node_id, uuid, title, flavor, arch, ip, mac, description, ' +
        'latitude, longitude, country, city, zip, address, device_attribute, unassigned, ancestor_ids, tags, commit_sha (part of the commit the agent last applied), and beyond qbee’s: package, package_version, container_image; ' +
        'every filter given must hold; any other field is a 400), ' +
        'or plain text: part of the device title or the start of its id.',
    ),
  sort_field: z
    .enum(['title', 'device_name', 'last_reported_time', 'last_policy_update', 'commit_sha'])
    .optional()
    .describe('Default title; last_policy_update: when the agent last applied its configuration; commit_sha: the commit it applied'),
  sort_direction: z.enum(['asc', 'desc']).optional().describe('Default asc'),
  report_type: z.enum(['short', 'detailed']).optional().describe('Accepted for qbee clients: both answer the detailed record'),
  ...pagingQuery.shape,
});

/** qbee's config.Settings at its zero values: what `settings` is without a settings bundle. */
const NO_SETTINGS = {
  enabled: false,
  metrics: false,
  reports: false,
  remoteconsole: false,
  software_inventory: false,
  process_inventory: false,
  agentinterval: 0,
};

const SCOPE =
  'inventory:read does not accept resources: it reads the inventory of the devices the caller’s device:read resources match, and of none without device:read (nothing is inferred from a permission’s absence).';

const LIST_DESCRIPTION =
  'Devices whose inventory you reach that pass `search`, sorted by `sort_field` (title, device_name, last_reported_time) in `sort_direction`, `{items, total}`; ' +
  'each with `title`, `connected`, `last_seen`, its last inventory report (fields as in GET /inventory/{device_id}; `received_at` is null before the first) ' +
  "and qbee's InventoryListItem fields (`node_id`, `uuid`, `system`, `last_reported_time`, `ancestors`, `attributes`, `status`, `tags`). " +
  '`commit_sha` finds part of the configuration commit the agent last applied; `last_policy_update` orders by when it applied it, `commit_sha` by that commit. ' +
  'Fleet search over the typed inventory: `{"package":"openssl","package_version":"<3.0.13"}` finds the devices with that package installed at a version below 3.0.13 ' +
  "in dpkg's ordering (epoch, upstream, revision; `~` before anything), each result listing its `packages` of that name; " +
  '`{"container_image":"nginx"}` the devices running or holding such an image. ' +
  SCOPE;

/**
 * What the inventory routes use: the inventory, the agent's connection facts and pushed configuration
 * for a device's status, enrolment for removing a device, and `db` for the audit subject.
 */
export interface InventoryRouteDeps {
  inventory: InventoryService;
  agents: Pick<AgentHub, 'status' | 'lastHeard'>;
  configuration: Pick<ConfigService, 'pushedConfig'>;
  enrol: Pick<EnrolService, 'removeApproved'>;
  config: Pick<Config, 'agentHeartbeatMs' | 'publicUrl'>;
  db: Db;
}

export const inventoryRoutes: RouteSpec<InventoryRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/inventory/{device_id}',
    tag: 'inventory',
    summary: "A device's inventory",
    description:
      'The last report of the device agent (sent when it connects and every 10 minutes): host name, OS, kernel, arch, CPU, memory, disks, network interfaces, agent version, uptime; ' +
      'with `received_at`; and qbee’s DeviceInventory fields: `system`, `last_reported`, `exp_soft`, `exp_hard`, `device_commit_sha` (the configuration commit the agent last applied), ' +
      '`config_propagated` (it is the commit the device should run) and `pushed_config` (that configuration, for a caller whose configuration:read reaches the device). ' +
      '404 `no_inventory` before the first report. ' +
      SCOPE,
    access: 'inventory:read',
    params: z.object({ device_id: deviceId }),
    response: oneReport,
    handler: async ({ params, deps, principal }) => {
      const inventory = await deps.inventory.get(principal, params.device_id);
      const pushed = await deps.configuration.pushedConfig(principal, params.device_id);
      const heartbeat = Math.ceil(deps.config.agentHeartbeatMs / 1000);
      const last = Number(inventory.last_reported) || 0;
      return {
        ...inventory,
        exp_soft: last ? last + heartbeat : 0,
        exp_hard: last ? last + 3 * heartbeat : 0,
        pushed_config: pushed,
        settings: pushed.bundle_data.settings ?? NO_SETTINGS,
      };
    },
  }),
  // The same list under two paths: /inventorylist, and /inventory as an alias of it.
  ...(['/inventorylist', '/inventory'] as const).map((path): RouteSpec<InventoryRouteDeps> =>
    defineRoute({
      method: 'get',
      path,
      tag: 'inventory',
      summary: path === '/inventorylist' ? 'List device inventories' : 'List device inventories (same as /inventorylist)',
      description: LIST_DESCRIPTION,
      access: 'inventory:read',
      query: listQuery,
      response: listPage(listItem),
      handler: async ({ query, deps, principal }) => deps.inventory.list(principal, query),
    }),
  ),
  defineRoute({
    method: 'get',
    path: '/inventoryonlinestats',
    tag: 'inventory',
    summary: 'How many devices are online',
    description: `Among the devices whose inventory you reach: \`online\` (agent connected now), \`offline\`, \`total\`. ${SCOPE}`,
    access: 'inventory:read',
    response: z.object({ online: z.number(), offline: z.number(), total: z.number() }),
    handler: async ({ deps, principal }) => deps.inventory.onlineStats(principal),
  }),
  defineRoute({
    method: 'get',
    path: '/inventoryreport/{device_id}',
    tag: 'inventory',
    summary: 'One item type of a device inventory',
    description:
      "What the device agent reported for `item_type`: `system` (qbee's SystemInfo), `software` (installed packages: name, version, arch, with `pkg_manager`), " +
      "`docker_containers`, `docker_images`, `podman_containers`, `podman_images` (qbee's container and image fields), `users` (user, uid, gid, gecos, home, shell, has_pwd, pwd_alg, pwd_age), " +
      '`groups` (group, gid, members), `ports` (listening: proto, socket, proc_info) or `processes` (the top by CPU and by memory: pid, user, cpu, mem, cmdline). ' +
      'Items as `{items, total}` filtered by `search` (part of any field, case-insensitive) and paged; `received_at` is when the broker stored them. ' +
      'Agents send a type when they connect and then only when it changed, so `received_at` is the time of the last change. ' +
      '404 `no_inventory` before the device reported that type (a device without docker never reports docker). ' +
      SCOPE,
    access: 'inventory:read',
    params: z.object({ device_id: deviceId }),
    query: z.object({
      item_type: z.enum(INVENTORY_REPORT_TYPES).default('system').describe('Default system'),
      search: z.string().max(256).optional().describe('Part of any field of an item (case-insensitive)'),
      ...pagingQuery.shape,
    }),
    response: inventoryItemReport,
    handler: async ({ params, query, deps, principal }) => deps.inventory.report(principal, params.device_id, query),
  }),
  defineRoute({
    method: 'get',
    path: '/inventoryreport/docker/{device_id}',
    tag: 'inventory',
    summary: 'Containers and images of a device',
    description:
      'The docker and podman containers and images the device agent reported, each `{received_at, items}`, or null when the agent never reported it (no such engine, or its daemon does not answer). ' +
      SCOPE,
    access: 'inventory:read',
    params: z.object({ device_id: deviceId }),
    response: z.object({
      node_id: z.string(),
      ...Object.fromEntries(
        (['docker_containers', 'docker_images', 'podman_containers', 'podman_images'] as const).map((t) => [
          t,
          z.object({ received_at: z.string(), items: z.array(z.record(z.string(), z.unknown())) }).nullable(),
        ]),
      ),
    }),
    handler: async ({ params, deps, principal }) => deps.inventory.containersReport(principal, params.device_id),
  }),
  defineRoute({
    method: 'get',
    path: '/inventorysummarybytype/{node_id}',
    tag: 'inventory',
    summary: 'What runs where below a group',
    description:
      'The items of `item_type` across the devices at or below `node_id` (a group or a device) whose inventory you reach, grouped, each with `devices`: how many of those devices have it. ' +
      'Groups: software by name, version and arch; containers by image; images by repository and tag; users by user; groups by group; ports by port and proto; ' +
      'processes by program; system by flavor and arch. Sorted by `devices` (most first); `search` matches the first field (package name, image, repository, user, …). ' +
      '`devices_total` counts the devices reached below the node, `devices_reported` those that reported the type. ' +
      '404 for an unknown node, and for a group you reach no device below and your resources do not cover. ' +
      SCOPE,
    access: 'inventory:read',
    params: nodeParams,
    query: z.object({
      item_type: z.enum(INVENTORY_REPORT_TYPES).default('software').describe('Default software'),
      search: z.string().max(256).optional().describe('Part of the first field of a group (case-insensitive)'),
      ...pagingQuery.shape,
    }),
    response: z.object({
      node_id: z.string(),
      item_type: z.enum(INVENTORY_REPORT_TYPES),
      devices_total: z.number(),
      devices_reported: z.number(),
      items: z.array(z.record(z.string(), z.union([z.string(), z.number()]))).describe('The group’s fields and `devices`'),
      total: z.number(),
    }),
    handler: async ({ params, query, deps, principal }) => deps.inventory.summaryByType(principal, params.node_id, query),
  }),
  defineRoute({
    method: 'delete',
    path: '/inventory/{device_id}',
    tag: 'inventory',
    summary: 'Remove a device',
    description:
      'Removes the device like DELETE /removeapprovedhost/{node_id}: its node, record and inventory go, its agent connection is cut at once and its key is revoked. Answers 204.',
    access: 'device:manage',
    device: ({ params }) => params.device_id,
    audit: 'device.remove',
    subject: ({ params }, s) => subjectRecords.device(s.db, params.device_id),
    params: z.object({ device_id: deviceId }),
    handler: async ({ params, deps }) => {
      await deps.enrol.removeApproved(params.device_id);
    },
  }),
  defineRoute({
    method: 'get',
    path: '/device/{device_id}/status',
    tag: 'devices',
    summary: 'Connection status of a device',
    description:
      '`{uuid, remote_access, connected, last_seen, edge, edge_version}`: `connected` is true while the device agent holds its connection to the broker; `remote_access` is true when remote ' +
      'sessions (console, tunnel, copy, reload) can be opened now; `last_seen` is the last contact (ISO 8601): while the agent is connected to this broker, its last heartbeat (kept in memory; the stored value is written on connect, at most once a minute while connected, and on disconnect). ' +
      "While `remote_access` is true, `edge` names where qbee-cli dials (https) for remote sessions — this broker: `host[:port]` of PUBLIC_URL (an http one with its port written out), else the host this request came to; a loopback host is written `localhost` — and `edge_version` is 1 (qbee's DeviceStatus).",
    access: 'device:read',
    device: ({ params }) => params.device_id,
    params: z.object({ device_id: deviceId }),
    response: z.object({
      uuid: z.string(),
      remote_access: z.boolean(),
      connected: z.boolean(),
      last_seen: z.string().nullable(),
      edge: z.string().optional().describe("host[:port] of this broker (PUBLIC_URL, else the request's host), while remote_access is true"),
      edge_version: z.literal(1).optional().describe('1 while remote_access is true'),
    }) satisfies z.ZodType<DeviceStatus>,
    handler: async ({ params, deps, host }) => {
      const stored = await deps.agents.status(params.device_id);
      // A connected agent's last heartbeat (kept in memory); the stored last contact otherwise.
      const heard = deps.agents.lastHeard(params.device_id);
      const status = heard ? { ...stored, last_seen: heard } : stored;
      const edge = edgeHost(deps.config.publicUrl, host);
      return status.remote_access && edge ? { ...status, edge, edge_version: 1 as const } : status;
    },
  }),
];
