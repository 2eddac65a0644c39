import { z } from 'zod';
import type { ReportCounts, ReportItem, ReportSeverity } from '../../shared/api-types.js';
import { deviceId, deviceOfNode, nodeId, nodeParams } from '../devices/schema.js';
import { listPage, pagingQuery } from '../http/paging.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { MAX_SEARCH_LENGTH } from '../http/search.js';
import { SEVERITIES } from './validate.js';
import type { ReportsService } from './service.js';

/** Ids one mark-read call may name. */
export const MAX_MARK_IDS = 1000;

const severity = z.enum(SEVERITIES as [ReportSeverity, ...ReportSeverity[]]);
const severityCounts = z.object({ INFO: z.number(), WARN: z.number(), ERR: z.number(), CRIT: z.number() });
const counts = z.object({
  total: z.number().describe('Reports kept'),
  unread: z.number().describe('Reports the caller has not marked read'),
  severity: severityCounts.describe('Reports by severity'),
  unread_severity: severityCounts.describe('Unread reports by severity'),
  last_ts: z.number().describe('Unix seconds of the newest report; 0 when none'),
});

const reportItem = z.object({
  id: z.number().describe('Report id (for PATCH /reportmarkread)'),
  node_id: z.string().describe('The device id'),
  device_id: z.string(),
  title: z.string().describe("The device's title in the group tree"),
  bundle: z.string().describe('The configuration bundle, a watcher, or `agent_internal` for the agent’s own events'),
  bundle_commit_id: z.string(),
  commit_id: z.string().describe('The configuration commit the agent ran'),
  labels: z.string(),
  sev: severity,
  text: z.string(),
  log: z.string().describe('base64 of the operation log (its tail, at most 16 KiB); "" when none'),
  ts: z.number().describe('Unix seconds, as the agent stamped it'),
  received: z.number().describe('Unix seconds, when the broker stored it'),
  read: z.boolean().describe('Whether the caller has marked it read'),
}) satisfies z.ZodType<ReportItem>;

const unixSeconds = z.coerce.number().int().min(0).max(1e11);

const listQuery = z
  .object({
    search: z.string().max(MAX_SEARCH_LENGTH).optional().describe('Part of the text, bundle or labels (case-insensitive)'),
    node_id: nodeId.optional().describe('Only reports of this device, or of the devices below this group'),
    severity: z
      .string()
      .max(64)
      .transform((s, ctx) => {
        const list = s.split(',').map((v) => v.trim().toUpperCase());
        const bad = list.find((v) => !SEVERITIES.includes(v as never));
        if (bad !== undefined) {
          ctx.addIssue({ code: 'custom', message: `unknown severity "${bad}": use INFO, WARN, ERR, CRIT (comma-separated)` });
          return z.NEVER;
        }
        return list as Array<(typeof SEVERITIES)[number]>;
      })
      .optional()
      .describe('Comma-separated severities, e.g. `ERR,CRIT`'),
    bundle: z.string().max(128).optional().describe('Only this bundle (`agent_internal`: the agent’s own events)'),
    commit_id: z.string().max(128).optional().describe('Only reports of this configuration commit'),
    read: z
      .enum(['true', 'false'])
      .transform((v) => v === 'true')
      .optional()
      .describe('`false`: unread only; `true`: read only'),
    from: unixSeconds.optional().describe('Reports stamped at or after (Unix seconds)'),
    to: unixSeconds.optional().describe('Reports stamped at or before (Unix seconds)'),
    sort_field: z.enum(['ts', 'sev', 'received', 'bundle']).optional().describe('Default ts'),
    sort_direction: z.enum(['asc', 'desc']).optional().describe('Default desc (newest first)'),
    ...pagingQuery.shape,
  })
  .strict();

const markBody = z.object({
  ids: z.array(z.number().int().min(1)).max(MAX_MARK_IDS).optional().describe(`Report ids (at most ${MAX_MARK_IDS})`),
  node_id: nodeId.optional().describe('Every report of this device, or of the devices below this group'),
  all: z.literal(true).optional().describe('Every report you read'),
  read: z.boolean().optional().describe('`false` marks unread again; default true'),
});

const SCOPE_READ =
  'Only reports of devices the caller’s reports:read resources match (`*`, `tag:`, `node:`) appear; a device outside them is 403 where named by id.';

/** What the report routes use. */
export interface ReportsRouteDeps {
  reports: ReportsService;
}

export const reportsRoutes: RouteSpec<ReportsRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/reportlist',
    tag: 'reports',
    summary: 'List agent reports (the Logs)',
    description:
      'Reports of configuration runs, watchers and the agent’s own events (bundle `agent_internal`: connections), newest first, `{items, total}`, filtered by `search`, `node_id`, `severity`, `bundle`, `commit_id`, ' +
      '`read` (per caller), `from`/`to` (Unix seconds), sorted by `sort_field` (ts, sev, received, bundle). An unknown parameter or severity is a 400. ' +
      'Reports are kept REPORT_RETENTION_DAYS (default 30) days, at most REPORT_MAX_PER_DEVICE per device and REPORT_MAX_TOTAL in all. ' +
      SCOPE_READ,
    access: 'reports:read',
    query: listQuery,
    response: listPage(reportItem),
    handler: async ({ query, principal, deps }) => deps.reports.list(principal, query),
  }),
  defineRoute({
    method: 'get',
    path: '/reportsummary/{device_id}',
    tag: 'reports',
    summary: "A device's report counts",
    description:
      '`{node_id, total, unread, severity, unread_severity, last_ts}`: counts by severity (INFO, WARN, ERR, CRIT), unread for the caller. Unknown device: 404. ' +
      SCOPE_READ,
    access: 'reports:read',
    device: ({ params }) => params.device_id,
    params: z.object({ device_id: deviceId }),
    response: counts.extend({ node_id: z.string() }) satisfies z.ZodType<ReportCounts>,
    handler: async ({ params, principal, deps }) => deps.reports.deviceSummary(principal, params.device_id),
  }),
  defineRoute({
    method: 'get',
    path: '/groupreportssummary/{group_id}',
    tag: 'reports',
    summary: 'Report counts of the devices below a group',
    description:
      'The counts of GET /reportsummary/{device_id} summed over the devices below the group (or the device itself) that the caller’s device:read resources match, `devices` being how many, ' +
      'and `items`: those with reports, worst first (unread critical, errors, warnings). Unknown node, or a group the caller may not see: 404; a device id outside the caller’s device:read: 403.',
    access: 'device:read',
    device: ({ params }) => deviceOfNode({ params: { node_id: params.group_id } }),
    params: z.object({ group_id: nodeParams.shape.node_id }),
    response: counts.extend({
      node_id: z.string(),
      devices: z.number(),
      items: z.array(counts.extend({ node_id: z.string(), title: z.string() })),
    }),
    handler: async ({ params, principal, deps }) => deps.reports.groupSummary(principal, params.group_id),
  }),
  defineRoute({
    method: 'patch',
    path: '/reportmarkread',
    tag: 'reports',
    summary: 'Mark reports read (or unread)',
    description:
      'Exactly one of `ids` (report ids), `node_id` (every report of the device or of the devices below the group) or `all: true`, among the reports the caller reads (reports:read resources); ' +
      '`read: false` marks them unread again. Read state is per user. Answers `{changed}`: how many reports changed state (ids of reports the caller cannot read change nothing). ' +
      'Holders of reports:markread without reports:acknowledge use PATCH /reportmarkread/{device_id}.',
    access: 'reports:acknowledge',
    body: markBody.strict().refine((b) => [b.ids !== undefined, b.node_id !== undefined, b.all === true].filter(Boolean).length === 1, {
      message: 'give exactly one of ids, node_id or all',
      path: ['ids'],
    }),
    response: z.object({ changed: z.number() }),
    audit: false,
    handler: async ({ body, principal, deps }) => deps.reports.markRead(principal, body),
  }),
  defineRoute({
    method: 'patch',
    path: '/reportmarkread/{device_id}',
    tag: 'reports',
    summary: "Mark a device's reports read (or unread)",
    description:
      'Under reports:markread, whose resources (`*`, `tag:`, `node:`) name the devices whose reports one may mark: every report of the device, or the given `ids` among them; ' +
      '`read: false` marks unread again. Answers `{changed}`. A device outside the caller’s reports:markread resources: 403; unknown: 404.',
    access: 'reports:markread',
    device: ({ params }) => params.device_id,
    params: z.object({ device_id: deviceId }),
    body: markBody.pick({ ids: true, read: true }).strict(),
    response: z.object({ changed: z.number() }),
    audit: false,
    handler: async ({ params, body, principal, deps }) => deps.reports.markRead(principal, body, params.device_id),
  }),
];
