/**
 * Turning the broker's metrics answers into chart data: a device's qbee Metric records
 * (GET /device/{id}/metrics) into one chart per label, and hourly analysis answers
 * (POST /analysis, group_by hour) into charts over a group. No drawing here (see time-chart.tsx).
 */
import type { AnalysisItem, MetricsResolution } from '../../shared/api-types.js';
import type { MetricLabel, MetricSample } from '../../shared/metrics.js';

export type Unit = 'percent' | 'bytesPerSecond' | 'bytesPerSample' | 'load' | 'celsius';

export interface ChartSeries {
  name: string;
  /** one value per x; null where the series has no sample at that time */
  values: (number | null)[];
}

export interface ChartData {
  /** a stable key (label) */
  key: string;
  title: string;
  unit: Unit;
  /** Unix seconds, ascending */
  xs: number[];
  series: ChartSeries[];
  /** The chosen time range (Unix seconds): the x axis spans it, not just the samples (see xAxisRange). */
  span?: { from: number; to: number };
}

export type Resolution = MetricsResolution;

/** The ranges the screens offer, seconds. */
export const RANGES = [
  { key: '1h', label: '1 hour', seconds: 3600 },
  { key: '24h', label: '24 hours', seconds: 86400 },
  { key: '7d', label: '7 days', seconds: 7 * 86400 },
  { key: '30d', label: '30 days', seconds: 30 * 86400 },
] as const;
export type RangeKey = (typeof RANGES)[number]['key'];

export function rangeSeconds(key: string | null | undefined): number {
  return (RANGES.find((r) => r.key === key) ?? RANGES[1]).seconds;
}

/**
 * The x axis of a chart over a chosen range: the whole range, so a single sample is a dot at its
 * time within the last 24 hours (not alone in an axis a charting library stretched around it);
 * widened to a sample outside it (the hourly bucket that began before `from`).
 */
export function xAxisRange(xs: readonly number[], span: { from: number; to: number }): [number, number] {
  let min = span.from;
  let max = span.to;
  for (const x of xs) {
    if (x < min) min = x;
    if (x > max) max = x;
  }
  if (!(max > min)) max = min + 1;
  return [min, max];
}

/** The charts with the range they were asked for. */
export function withSpan(charts: ChartData[], from: number, to: number): ChartData[] {
  return charts.map((c) => ({ ...c, span: { from, to } }));
}

/** Points (x, value) of named series joined on the union of their times. */
export function joinSeries(named: { name: string; points: [number, number][] }[]): { xs: number[]; series: ChartSeries[] } {
  const xs = [...new Set(named.flatMap((n) => n.points.map(([x]) => x)))].sort((a, b) => a - b);
  const index = new Map(xs.map((x, i) => [x, i]));
  const series = named.map((n) => {
    const values: (number | null)[] = new Array<number | null>(xs.length).fill(null);
    for (const [x, v] of n.points) values[index.get(x)!] = v;
    return { name: n.name, values };
  });
  return { xs, series };
}

const FIELDS: Record<Exclude<MetricLabel, 'filesystem' | 'network' | 'temperature'>, [string, string][]> = {
  cpu: [
    ['user', 'user'],
    ['system', 'system'],
    ['iowait', 'I/O wait'],
  ],
  memory: [
    ['memutil', 'memory used'],
    ['swaputil', 'swap used'],
  ],
  loadavg_weighted: [
    ['1min', '1 min'],
    ['5min', '5 min'],
    ['15min', '15 min'],
  ],
};

function byId(items: MetricSample[], label: MetricLabel): Map<string, MetricSample[]> {
  const out = new Map<string, MetricSample[]>();
  for (const s of items) {
    if (s.label !== label) continue;
    const id = s.id ?? '';
    let list = out.get(id);
    if (!list) out.set(id, (list = []));
    list.push(s);
  }
  for (const list of out.values()) list.sort((a, b) => a.ts - b.ts);
  return new Map([...out].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/**
 * Network values are bytes since the interface's previous sample. Raw samples become bytes per
 * second over the time since that sample; hourly averages stay bytes per sample (the agent's
 * interval is not in them).
 */
function networkPoints(list: MetricSample[], field: string, resolution: Resolution): [number, number][] {
  const points: [number, number][] = [];
  for (let i = 0; i < list.length; i++) {
    const v = list[i].values[field];
    if (v === undefined) continue;
    if (resolution === 'hour') {
      points.push([list[i].ts, v]);
      continue;
    }
    const gap = i > 0 ? list[i].ts - list[i - 1].ts : 0;
    if (gap > 0) points.push([list[i].ts, v / gap]);
  }
  return points;
}

/** One chart per label the device reported: CPU, memory, disks, network, load, temperature. */
export function deviceCharts(items: MetricSample[], resolution: Resolution): ChartData[] {
  const charts: ChartData[] = [];
  const fixed = (label: keyof typeof FIELDS, title: string, unit: Unit) => {
    const list = byId(items, label).get('') ?? [];
    if (list.length === 0) return;
    const named = FIELDS[label].map(([field, name]) => ({
      name,
      points: list.filter((s) => s.values[field] !== undefined).map((s) => [s.ts, s.values[field]] as [number, number]),
    }));
    charts.push({ key: label, title, unit, ...joinSeries(named.filter((n) => n.points.length > 0)) });
  };
  fixed('cpu', 'CPU', 'percent');
  fixed('memory', 'Memory', 'percent');
  const disks = byId(items, 'filesystem');
  if (disks.size > 0) {
    const named = [...disks].map(([id, list]) => ({ name: id, points: list.map((s) => [s.ts, s.values.use ?? 0] as [number, number]) }));
    charts.push({ key: 'filesystem', title: 'Disk used, per filesystem', unit: 'percent', ...joinSeries(named) });
  }
  const nets = byId(items, 'network');
  if (nets.size > 0) {
    const named = [...nets].flatMap(([id, list]) => [
      { name: `${id} received`, points: networkPoints(list, 'rx_bytes', resolution) },
      { name: `${id} sent`, points: networkPoints(list, 'tx_bytes', resolution) },
    ]);
    charts.push({
      key: 'network',
      title: resolution === 'raw' ? 'Network, per interface' : 'Network, per interface (bytes per sample, hourly average)',
      unit: resolution === 'raw' ? 'bytesPerSecond' : 'bytesPerSample',
      ...joinSeries(named),
    });
  }
  fixed('loadavg_weighted', 'Load average', 'load');
  const temps = byId(items, 'temperature');
  if (temps.size > 0) {
    const named = [...temps].map(([id, list]) => ({
      name: id === 'cpu_temp' ? 'CPU' : id,
      points: list.map((s) => [s.ts, s.values.temperature ?? 0] as [number, number]),
    }));
    charts.push({ key: 'temperature', title: 'Temperature', unit: 'celsius', ...joinSeries(named) });
  }
  return charts;
}

/** One hourly value of an analysis answer (group_by hour). */
export type HourItem = AnalysisItem;

/** What the group view asks POST /analysis for: per chart, the series (metric and aggregate over devices). */
export const GROUP_CHARTS: { key: string; title: string; unit: Unit; series: { name: string; metric: string; aggregate: 'avg' | 'max' }[] }[] = [
  {
    key: 'cpu',
    title: 'CPU',
    unit: 'percent',
    series: [
      { name: 'user, average', metric: 'cpu.user', aggregate: 'avg' },
      { name: 'user, highest', metric: 'cpu.user', aggregate: 'max' },
      { name: 'system, average', metric: 'cpu.system', aggregate: 'avg' },
    ],
  },
  {
    key: 'memory',
    title: 'Memory',
    unit: 'percent',
    series: [
      { name: 'used, average', metric: 'memory.memutil', aggregate: 'avg' },
      { name: 'used, highest', metric: 'memory.memutil', aggregate: 'max' },
      { name: 'swap, average', metric: 'memory.swaputil', aggregate: 'avg' },
    ],
  },
  {
    key: 'filesystem',
    title: 'Disk used (every filesystem)',
    unit: 'percent',
    series: [
      { name: 'average', metric: 'filesystem.use', aggregate: 'avg' },
      { name: 'highest', metric: 'filesystem.use', aggregate: 'max' },
    ],
  },
  {
    key: 'network',
    title: 'Network (every interface, bytes per sample)',
    unit: 'bytesPerSample',
    series: [
      { name: 'received, average', metric: 'network.rx_bytes', aggregate: 'avg' },
      { name: 'sent, average', metric: 'network.tx_bytes', aggregate: 'avg' },
    ],
  },
  {
    key: 'loadavg_weighted',
    title: 'Load average (1 min)',
    unit: 'load',
    series: [
      { name: 'average', metric: 'loadavg_weighted.1min', aggregate: 'avg' },
      { name: 'highest', metric: 'loadavg_weighted.1min', aggregate: 'max' },
    ],
  },
  {
    key: 'temperature',
    title: 'Temperature',
    unit: 'celsius',
    series: [
      { name: 'average', metric: 'temperature.temperature', aggregate: 'avg' },
      { name: 'highest', metric: 'temperature.temperature', aggregate: 'max' },
    ],
  },
];

/** A group chart from its series' hourly answers (same order as the definition's series); null when none has data. */
export function groupChart(def: (typeof GROUP_CHARTS)[number], answers: HourItem[][]): ChartData | null {
  const named = def.series
    .map((s, i) => ({ name: s.name, points: (answers[i] ?? []).filter((h) => h.ts !== undefined).map((h) => [h.ts!, h.value] as [number, number]) }))
    .filter((n) => n.points.length > 0);
  if (named.length === 0) return null;
  return { key: def.key, title: def.title, unit: def.unit, ...joinSeries(named) };
}

/** A value with its unit, for legends and tables. */
export function formatValue(v: number | null | undefined, unit: Unit): string {
  if (v === null || v === undefined || !Number.isFinite(v)) return '—';
  switch (unit) {
    case 'percent':
      return `${v.toFixed(1)} %`;
    case 'celsius':
      return `${v.toFixed(1)} °C`;
    case 'load':
      return v.toFixed(2);
    case 'bytesPerSecond':
      return `${bytes(v)}/s`;
    case 'bytesPerSample':
      return bytes(v);
  }
}

function bytes(v: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (Math.abs(v) >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return `${i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}

/** The newest value of a series (what the legend shows while the pointer is not over the chart). */
export function latest(values: (number | null)[]): number | null {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null) return values[i];
  return null;
}
