import { z } from 'zod';
import { DEVICE_ID_PATTERN } from '../devices/scope.js';
import { listPage, pagingQuery } from '../http/paging.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { subjectRecords } from '../audit/subjects.js';

const deviceId = z.string().regex(DEVICE_ID_PATTERN, 'must be a device id: 64 lowercase hexadecimal characters').describe('The device id.');
const listQuery = z.object({
  search: z.string().max(200).optional().describe('Part of the device title, or the start of its id'),
  ...pagingQuery.shape,
});

const report = z
  .object({
    device_id: z.string(),
    received_at: z.string().nullable().describe('When the broker received the report, ISO 8601; null before the first one'),
    hostname: z.string().optional(),
    os: z.object({ name: z.string(), version: z.string(), id: z.string().optional(), pretty_name: z.string().optional() }).optional(),
    kernel: z.string().optional(),
    arch: z.string().optional(),
    cpu: z.object({ model: z.string(), cores: z.number() }).optional(),
    memory: z.object({ total: z.number(), free: z.number() }).optional().describe('Bytes'),
    disks: z
      .array(z.object({ mount: z.string(), fstype: z.string().optional(), size: z.number(), free: z.number() }))
      .optional()
      .describe('Bytes'),
    network: z
      .array(
        z.object({
          name: z.string(),
          mac: z.string(),
          addresses: z.array(z.object({ address: z.string(), family: z.string(), cidr: z.string().nullable().optional() })),
        }),
      )
      .optional(),
    agent_version: z.string().optional(),
    uptime: z.number().optional().describe('Seconds since the device booted'),
  })
  .loose();

const SCOPE =
  'inventory:read does not accept resources: alone it reaches every device; a caller who also holds device:read sees only the devices their device:read resources match.';

const LIST_DESCRIPTION =
  'Devices whose inventory you reach, sorted by title, `{items, total}`; each with `title`, `connected`, `last_seen` and its last inventory report ' +
  '(fields as in GET /inventory/{device_id}; `received_at` is null for a device that has not reported yet). ' +
  SCOPE;

export const inventoryRoutes: RouteSpec[] = [
  defineRoute({
    method: 'get',
    path: '/inventory/{device_id}',
    tag: 'inventory',
    summary: "A device's inventory",
    description:
      'The last report of the device agent (sent when it connects and every 10 minutes): host name, OS, kernel, arch, CPU, memory, disks, network interfaces, agent version, uptime; ' +
      'with `received_at`. 404 `no_inventory` before the first report. ' +
      SCOPE,
    access: 'inventory:read',
    params: z.object({ device_id: deviceId }),
    response: report,
    handler: async ({ params, services, principal }) => services.inventory.get(principal, params.device_id),
  }),
  // The same list under two paths: /inventorylist, and /inventory as an alias of it.
  ...(['/inventorylist', '/inventory'] as const).map((path) =>
    defineRoute({
      method: 'get',
      path,
      tag: 'inventory',
      summary: path === '/inventorylist' ? 'List device inventories' : 'List device inventories (same as /inventorylist)',
      description: LIST_DESCRIPTION,
      access: 'inventory:read',
      query: listQuery,
      response: listPage(report),
      handler: async ({ query, services, principal }) => services.inventory.list(principal, query),
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
    handler: async ({ services, principal }) => services.inventory.onlineStats(principal),
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
    subject: ({ params }, s) => subjectRecords.device(s.store.db, params.device_id),
    params: z.object({ device_id: deviceId }),
    handler: async ({ params, services }) => {
      await services.enrol.removeApproved(params.device_id);
    },
  }),
  defineRoute({
    method: 'get',
    path: '/device/{device_id}/status',
    tag: 'devices',
    summary: 'Connection status of a device',
    description:
      '`{uuid, remote_access, connected, last_seen}`: `connected` is true while the device agent holds its connection to the broker; `remote_access` is true when remote ' +
      'sessions (console, tunnel, copy, reload) can be opened now; `last_seen` is the last contact (ISO 8601, updated on connect, at most once a minute while connected, and on disconnect).',
    access: 'device:read',
    device: ({ params }) => params.device_id,
    params: z.object({ device_id: deviceId }),
    response: z.object({ uuid: z.string(), remote_access: z.boolean(), connected: z.boolean(), last_seen: z.string().nullable() }),
    handler: async ({ params, services }) => services.agents.status(params.device_id),
  }),
];
