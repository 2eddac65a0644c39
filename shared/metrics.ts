/**
 * Device metrics as qbee's agent collects them (its `Metric`: `{label, ts, id?, values}`): what the
 * agent sends in a `metrics` message and what GET /device/{id}/metrics answers. Labels and value
 * names follow qbee; `temperature` is qbee's too (CPU temperature, id `cpu_temp`).
 */

/** Each label with its value fields; the bounds are what the broker accepts from an agent. */
export const METRIC_FIELDS = {
  /** percent of CPU time between two samples */
  cpu: { user: [0, 100], system: [0, 100], iowait: [0, 100] },
  /** memfree: available memory in KiB; memutil / swaputil: percent used */
  memory: { memfree: [0, 2 ** 50], memutil: [0, 100], swaputil: [0, 100] },
  /** per mount point (`id`): avail in KiB, use in percent */
  filesystem: { avail: [0, 2 ** 53], use: [0, 100] },
  /** load averages over 1, 5 and 15 minutes */
  loadavg_weighted: { '1min': [0, 1e6], '5min': [0, 1e6], '15min': [0, 1e6] },
  /** per interface (`id`): bytes received and sent since the previous sample */
  network: { rx_bytes: [0, 2 ** 53], tx_bytes: [0, 2 ** 53] },
  /** degrees Celsius */
  temperature: { temperature: [-273, 1000] },
} as const satisfies Record<string, Record<string, readonly [number, number]>>;

export type MetricLabel = keyof typeof METRIC_FIELDS;
export const METRIC_LABELS = Object.keys(METRIC_FIELDS) as MetricLabel[];

/** One sample of one label (and, for filesystems and interfaces, one id). */
export interface MetricSample {
  label: MetricLabel;
  /** Unix seconds */
  ts: number;
  /** mount point, interface name, or `cpu_temp`; absent for cpu, memory and load */
  id?: string;
  values: Record<string, number>;
}

/** `label.field` names the analysis aggregates, e.g. `cpu.user`, `filesystem.use`. */
export const METRIC_NAMES: string[] = METRIC_LABELS.flatMap((label) => Object.keys(METRIC_FIELDS[label]).map((field) => `${label}.${field}`));

/** Most samples in one `metrics` message; the agent sends bigger queues in several messages. */
export const MAX_METRICS_BATCH = 2000;
/** Longest `id` (a mount point or an interface name). */
export const MAX_METRIC_ID_LENGTH = 256;
