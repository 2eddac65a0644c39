import { z } from 'zod';
import type { AnalysisAnswer, MetricsSummary, SeriesAnswer } from '../../shared/api-types.js';
import { MAX_METRIC_ID_LENGTH, METRIC_LABELS, METRIC_NAMES } from '../../shared/metrics.js';
import { DEVICE_ID_PATTERN } from '../devices/scope.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { MAX_SERIES_POINTS, type MetricsService } from './service.js';

const deviceId = z.string().regex(DEVICE_ID_PATTERN, 'must be a device id: 64 lowercase hexadecimal characters').describe('The device id.');
const unixSeconds = z.coerce.number().int().min(0).max(4_102_444_800);

const SCOPE =
  'The permission does not accept resources: it reaches the devices the caller’s device:read resources match, and none without device:read (nothing is inferred from a permission’s absence).';

const metric = z
  .object({
    label: z.enum(METRIC_LABELS),
    ts: z.number().int().describe('Unix seconds: the sample time, or the start of the hour at hourly resolution'),
    id: z.string().optional().describe('Mount point (filesystem), interface (network) or cpu_temp (temperature)'),
    values: z.record(z.string(), z.number()),
  })
  .describe("qbee's Metric");

const summary = z
  .object({
    filesystem: z.object({
      reported: z.number().int(),
      mounts: z.array(z.object({ path: z.string(), used: z.number().describe('percent'), available: z.number().describe('KiB') })),
    }),
    cpu: z.object({ reported: z.number().int(), user: z.number(), system: z.number(), io: z.number() }),
    load: z.object({ reported: z.number().int(), '1min': z.number(), '5min': z.number(), '15min': z.number() }),
    memory: z.object({
      reported: z.number().int(),
      used: z.number().int().describe('memory used, percent'),
      swap_used: z.number().int().describe('swap used, percent'),
      available: z.number().int().describe('memory available, KiB'),
    }),
  })
  .describe("qbee's MetricsSummary") satisfies z.ZodType<MetricsSummary>;

/** The analysis query: a GET's query string or a POST's body (the same fields). */
function analysisQuery(coerce: boolean) {
  const int = (min: number, max: number) => (coerce ? z.coerce.number() : z.number()).int().min(min).max(max);
  return z.strictObject({
    metric: z
      .enum(METRIC_NAMES as [string, ...string[]])
      .default('cpu.user')
      .describe(`The value to aggregate, \`label.field\`: ${METRIC_NAMES.join(', ')}. Default cpu.user.`),
    aggregate: z.enum(['avg', 'min', 'max']).default('avg').describe('Over time (and devices, per hour): average, minimum or maximum. Default avg.'),
    id: z.string().max(MAX_METRIC_ID_LENGTH).optional().describe('Only this mount point or interface; every one when absent.'),
    node_id: z.string().min(1).max(128).optional().describe('Only devices at or below this node (a group or a device); every device you reach when absent.'),
    from: int(0, 4_102_444_800).optional().describe('Unix seconds; default `to` minus 24 hours.'),
    to: int(0, 4_102_444_800).optional().describe('Unix seconds; default now.'),
    group_by: z
      .enum(['device', 'hour'])
      .default('device')
      .describe('`device`: one value per device; `hour`: one value per hour over the devices. Default device.'),
    order: z.enum(['asc', 'desc']).default('desc').describe('By value (group_by device) or by hour (group_by hour). Default desc.'),
    limit: int(1, 1000).default(10).describe('How many groups to answer (1..1000). Default 10.'),
  });
}

const analysisAnswer = z.object({
  metric: z.string(),
  aggregate: z.enum(['avg', 'min', 'max']),
  group_by: z.enum(['device', 'hour']),
  from: z.number().int(),
  to: z.number().int(),
  items: z.array(
    z.object({
      device_id: z.string().optional(),
      title: z.string().optional(),
      ts: z.number().int().optional().describe('Start of the hour (group_by hour)'),
      value: z.number(),
      samples: z.number().int().describe('Samples folded into the value'),
      devices: z.number().int().optional().describe('Devices with data in the hour (group_by hour)'),
    }),
  ),
  total: z.number().int().describe('Groups with data, before limit'),
}) satisfies z.ZodType<AnalysisAnswer>;

const ANALYSIS_DESCRIPTION =
  'One metric value aggregated over the devices you reach and a time range, from the hourly roll-ups (an hour counts when it starts in [from - from mod 3600, to)). ' +
  '`group_by: "device"` answers one item per device with data `{device_id, title, value, samples}`, ordered by value (top 10 devices by CPU in the last 24 h: the defaults); ' +
  '`group_by: "hour"` one item per hour `{ts, value, samples, devices}`. `node_id` keeps devices at or below a node; a node you do not reach answers no items. ' +
  SCOPE;

/** What the metrics routes use. */
export interface MetricsRouteDeps {
  metrics: MetricsService;
}

export const metricsRoutes: RouteSpec<MetricsRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/device/{device_id}/metrics',
    tag: 'metrics',
    summary: "A device's metrics over time",
    description:
      "qbee's Metric records `{label, ts, id, values}` of the device with `from <= ts < to` (Unix seconds; default the last hour), optionally of one `label` and one `id`, " +
      '`{items, total, resolution, from, to}`. Raw samples while `from` is within METRICS_RAW_RETENTION_HOURS, else hourly averages (`ts` the start of the hour); ' +
      `\`resolution=raw|hour\` forces one; a raw range holding more than ${MAX_SERIES_POINTS} samples answers hourly (400 \`too_many_points\` when raw was asked for). ` +
      '404 for a device that is not in the tree. ' +
      SCOPE,
    access: 'metrics:read',
    params: z.object({ device_id: deviceId }),
    query: z.strictObject({
      from: unixSeconds.optional(),
      to: unixSeconds.optional(),
      label: z.enum(METRIC_LABELS).optional(),
      id: z.string().max(MAX_METRIC_ID_LENGTH).optional(),
      resolution: z.enum(['auto', 'raw', 'hour']).optional().describe('Default auto'),
    }),
    response: z.object({
      items: z.array(metric),
      total: z.number().int(),
      resolution: z.enum(['raw', 'hour']),
      from: z.number().int(),
      to: z.number().int(),
    }) satisfies z.ZodType<SeriesAnswer>,
    handler: async ({ params, query, deps, principal }) => deps.metrics.series(principal, params.device_id, query),
  }),
  defineRoute({
    method: 'get',
    path: '/device/{device_id}/metrics/latest',
    tag: 'metrics',
    summary: 'Latest metrics of a device',
    description:
      "qbee's MetricsSummary: the newest filesystem (per mount: `used` percent, `available` KiB), CPU (`user`, `system`, `io` percent), load and memory (`used` and `swap_used` percent, `available` KiB) " +
      'values of the last hour, each with `reported` (Unix seconds); a part with no sample in the last hour is zero with `reported` 0. 404 for a device that is not in the tree. ' +
      SCOPE,
    access: 'metrics:read',
    params: z.object({ device_id: deviceId }),
    response: summary,
    handler: async ({ params, deps, principal }) => deps.metrics.latest(principal, params.device_id),
  }),
  defineRoute({
    method: 'get',
    path: '/analysis',
    tag: 'analysis',
    summary: 'Fleet analysis (query string)',
    description: `The query of POST /analysis as a query string. ${ANALYSIS_DESCRIPTION}`,
    access: 'analysis:read',
    query: analysisQuery(true),
    response: analysisAnswer,
    handler: async ({ query, deps, principal }) => deps.metrics.analyse(principal, query),
  }),
  defineRoute({
    method: 'post',
    path: '/analysis',
    tag: 'analysis',
    summary: 'Fleet analysis',
    description: `Body \`{metric, aggregate, id, node_id, from, to, group_by, order, limit}\`, every field optional. ${ANALYSIS_DESCRIPTION}`,
    access: 'analysis:read',
    body: analysisQuery(false),
    audit: false,
    status: 200,
    response: analysisAnswer,
    handler: async ({ body, deps, principal }) => deps.metrics.analyse(principal, body),
  }),
  defineRoute({
    method: 'get',
    path: '/analysis/orgstats',
    tag: 'analysis',
    summary: 'Fleet counts',
    description:
      'Over the devices you reach: `devices`, `online`, `offline`, and counts `by_os`, `by_arch` and `by_agent_version` (from the last inventory report and the agent connection; ' +
      '"unknown" where not reported). `reports` is `{available: true, by_severity}`: the stored agent reports of those devices by severity. ' +
      SCOPE,
    access: 'analysis:read',
    response: z.object({
      devices: z.number().int(),
      online: z.number().int(),
      offline: z.number().int(),
      by_os: z.record(z.string(), z.number()),
      by_arch: z.record(z.string(), z.number()),
      by_agent_version: z.record(z.string(), z.number()),
      reports: z.union([
        z.object({ available: z.literal(true), by_severity: z.record(z.string(), z.number()) }),
        z.object({ available: z.literal(false), by_severity: z.null() }),
      ]),
    }),
    handler: async ({ deps, principal }) => deps.metrics.orgstats(principal),
  }),
];
