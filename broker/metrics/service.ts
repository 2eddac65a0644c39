import type { Logger } from 'pino';
import type { AnalysisAnswer, MetricsAggregate, MetricsResolution, MetricsSummary, SeriesAnswer } from '../../shared/api-types.js';
import { METRIC_FIELDS, METRIC_LABELS, type MetricLabel, type MetricSample } from '../../shared/metrics.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { DevicesService } from '../devices/service.js';
import { DomainError, invalid, notFound } from '../errors.js';
import { fleetCounts, type FleetFacts, type OrgStats, type ReportCounts } from './orgstats.js';
import { ROLLUP_SECONDS, rollUp } from './rollup.js';
import type { MetricsStore } from './store.js';
import { checkMetricBatch } from './validate.js';

export interface MetricsLimits {
  /** Raw samples are kept this long (hours); older ones only live on in the hourly roll-ups. */
  rawRetentionHours: number;
  /** Hourly roll-ups are kept this long (days). */
  rollupRetentionDays: number;
  /** Samples (one label of one time) stored per device and clock hour at most; more are dropped. */
  maxPerDeviceHour: number;
}

/** Most points one series answer carries; a raw range holding more answers hourly (or 400 when raw is asked for). */
export const MAX_SERIES_POINTS = 20_000;
/** Raw rows read for /metrics/latest (the last hour of one device). */
const LATEST_ROWS = 400;
/** How often retention runs. */
const PRUNE_EVERY_MS = 10 * 60_000;

/** The metrics answers as the API shows them: declared once for the broker and the console. */
export type { AnalysisAnswer, MetricsSummary, SeriesAnswer } from '../../shared/api-types.js';
export type Resolution = MetricsResolution;

export interface SeriesQuery {
  from?: number;
  to?: number;
  label?: MetricLabel;
  id?: string;
  resolution?: 'auto' | Resolution;
}

export type Aggregate = MetricsAggregate;

export interface AnalysisQuery {
  metric: string;
  aggregate: Aggregate;
  id?: string;
  node_id?: string;
  from?: number;
  to?: number;
  group_by: 'device' | 'hour';
  order: 'asc' | 'desc';
  limit: number;
}

export interface MetricsDeps {
  store: MetricsStore;
  limits: MetricsLimits;
  logger: Logger;
  access: Pick<AccessService, 'require' | 'fleetScope'>;
  devices: Pick<DevicesService, 'getDevice' | 'listVisibleDevices'>;
  /** Facts of devices for /analysis/orgstats (OS, arch, agent version, online). */
  fleet: FleetFacts;
  /** Reports by severity, once a reports domain exists; without it orgstats says reports are not available. */
  reports?: ReportCounts;
  /** Unix seconds now (tests move it). */
  now?: () => number;
}

function fold(a: Aggregate, x: { n: number; sum: number; min: number; max: number }): number {
  const v = a === 'avg' ? x.sum / x.n : a === 'min' ? x.min : x.max;
  return Math.round(v * 100) / 100;
}

/**
 * Device metrics: what agents send (checked, rate-limited per device, stored raw and rolled up per
 * hour), a device's series and latest values in qbee's shapes, fleet analysis over the devices a
 * caller reaches, and retention.
 */
export class MetricsService {
  private readonly now: () => number;
  /** device → [clock hour, samples stored in it]: the per-device flood bound. */
  private readonly budget = new Map<string, [number, number]>();
  /** device → the clock hour it was last warned about: one warning per device and hour, the rest at debug. */
  private readonly warned = new Map<string, number>();
  private pruneTimer?: NodeJS.Timeout;
  private pruning?: Promise<unknown>;

  constructor(private readonly deps: MetricsDeps) {
    this.now = deps.now ?? (() => Math.floor(Date.now() / 1000));
  }

  async init(): Promise<void> {
    this.pruneTimer = setInterval(() => void this.pruneNow(), PRUNE_EVERY_MS);
    this.pruneTimer.unref();
    await this.pruneNow();
  }

  async close(): Promise<void> {
    clearInterval(this.pruneTimer);
    await this.pruning;
  }

  /** Drops what retention no longer keeps, and the flood counters of past hours. */
  async pruneNow(): Promise<{ raw: number; rollups: number }> {
    const now = this.now();
    const hour = Math.floor(now / 3600);
    for (const [device, [h]] of this.budget) if (h !== hour) this.budget.delete(device);
    for (const [device, h] of this.warned) if (h !== hour) this.warned.delete(device);
    const run = this.deps.store.prune(now - this.deps.limits.rawRetentionHours * 3600, now - this.deps.limits.rollupRetentionDays * 86400);
    this.pruning = run.catch(() => undefined);
    try {
      return await run;
    } catch (err) {
      this.deps.logger.error({ err }, 'metrics retention failed');
      return { raw: 0, rollups: 0 };
    }
  }

  /**
   * A `metrics` message of a device's agent: checked (see validate.ts), bounded by the device's
   * hourly budget, stored only for approved devices in the tree. Returns what was stored and dropped.
   */
  async ingest(deviceId: string, samples: unknown): Promise<{ stored: number; dropped: number }> {
    const now = this.now();
    const check = checkMetricBatch(samples, now, now - this.deps.limits.rollupRetentionDays * 86400);
    const hour = Math.floor(now / 3600);
    if (check.refused) {
      this.warn(deviceId, hour, { reason: check.refused }, 'metrics batch refused');
      return { stored: 0, dropped: check.dropped };
    }
    let accepted = check.accepted;
    const spent = this.budget.get(deviceId);
    const used = spent && spent[0] === hour ? spent[1] : 0;
    const room = Math.max(0, this.deps.limits.maxPerDeviceHour - used);
    let dropped = check.dropped;
    if (accepted.length > room) {
      dropped += accepted.length - room;
      accepted = accepted.slice(0, room);
    }
    if (dropped > 0) this.warn(deviceId, hour, { dropped, stored: accepted.length }, 'metrics samples dropped');
    if (accepted.length === 0) return { stored: 0, dropped };
    // Spent before the first await: messages handled concurrently cannot both use the same room.
    this.budget.set(deviceId, [hour, used + accepted.length]);
    const device = await this.deps.devices.getDevice(deviceId);
    if (device?.state !== 'approved' || !device.node) return { stored: 0, dropped: dropped + accepted.length };
    await this.deps.store.insert(deviceId, accepted, rollUp(accepted));
    return { stored: accepted.length, dropped };
  }

  /** A device's misbehaviour is logged once an hour at warn (a hostile agent cannot fill the log), else at debug. */
  private warn(deviceId: string, hour: number, detail: Record<string, unknown>, msg: string): void {
    if (this.warned.get(deviceId) === hour) {
      this.deps.logger.debug({ deviceId, ...detail }, msg);
      return;
    }
    this.warned.set(deviceId, hour);
    this.deps.logger.warn({ deviceId, ...detail }, `${msg} (further ones this hour at debug level)`);
  }

  /** The caller must reach the device through device:read's resources (AccessService.fleetScope: none without device:read). */
  private async requireDevice(principal: Principal, deviceId: string): Promise<void> {
    if (this.deps.access.fleetScope(principal, 'metrics:read') === 'device:read') {
      await this.deps.access.require(principal, 'device:read', deviceId);
      return;
    }
    if (!(await this.deps.devices.getDevice(deviceId))?.node) throw notFound(`Device ${deviceId}`);
  }

  /** A device's samples in [from, to): raw while the range is within raw retention, else hourly averages. */
  async series(principal: Principal, deviceId: string, q: SeriesQuery): Promise<SeriesAnswer> {
    await this.requireDevice(principal, deviceId);
    const now = this.now();
    const to = q.to ?? now + 1;
    const from = q.from ?? to - 3600;
    if (from >= to) throw invalid('from must be before to.', { field: 'from' });
    if (to - from > this.deps.limits.rollupRetentionDays * 86400 + 86400) {
      throw invalid(`The range may span at most METRICS_ROLLUP_RETENTION_DAYS (${this.deps.limits.rollupRetentionDays}) days.`, { field: 'from' });
    }
    const keep = (s: { label: string; id?: string }) => (!q.label || s.label === q.label) && (q.id === undefined || (s.id ?? '') === q.id);
    const rawCovers = from >= now - this.deps.limits.rawRetentionHours * 3600;
    if (q.resolution === 'raw' || (q.resolution !== 'hour' && rawCovers)) {
      const rows = await this.deps.store.raw(deviceId, from, to, MAX_SERIES_POINTS + 1);
      const items: MetricSample[] = [];
      for (const row of rows)
        for (const s of row.samples) if (keep(s)) items.push({ label: s.label, ts: row.ts, ...(s.id ? { id: s.id } : {}), values: s.values });
      if (rows.length <= MAX_SERIES_POINTS && items.length <= MAX_SERIES_POINTS) return { items, total: items.length, resolution: 'raw', from, to };
      if (q.resolution === 'raw') {
        throw new DomainError(
          'invalid',
          'too_many_points',
          `More than ${MAX_SERIES_POINTS} raw samples in this range: narrow it, name a label, or ask resolution=hour.`,
          {
            field: 'resolution',
          },
        );
      }
    }
    // Hourly: each bucket overlapping the range, values averaged.
    const cells = await this.deps.store.rollups(deviceId, from - (from % ROLLUP_SECONDS), to, q.label, MAX_SERIES_POINTS * 8);
    const points = new Map<string, MetricSample>();
    for (const c of cells) {
      if (!keep({ label: c.label, id: c.mid })) continue;
      const key = `${c.bucket}\u0000${c.label}\u0000${c.mid}`;
      let p = points.get(key);
      if (!p) {
        p = { label: c.label as MetricLabel, ts: c.bucket, ...(c.mid ? { id: c.mid } : {}), values: {} };
        points.set(key, p);
      }
      p.values[c.field] = Math.round((c.sum / c.n) * 100) / 100;
    }
    const items = [...points.values()].slice(0, MAX_SERIES_POINTS);
    return { items, total: items.length, resolution: 'hour', from, to };
  }

  /** qbee's latest metrics: the newest value of each label (each mount) of the last hour; `reported` 0 where none. */
  async latest(principal: Principal, deviceId: string): Promise<MetricsSummary> {
    await this.requireDevice(principal, deviceId);
    const rows = await this.deps.store.recent(deviceId, this.now() - 3600, LATEST_ROWS);
    const out: MetricsSummary = {
      filesystem: { reported: 0, mounts: [] },
      cpu: { reported: 0, user: 0, system: 0, io: 0 },
      load: { reported: 0, '1min': 0, '5min': 0, '15min': 0 },
      memory: { reported: 0, used: 0, swap_used: 0, available: 0 },
    };
    const mounts = new Set<string>();
    // Newest first: the first value seen of each label (and mount) wins.
    for (const row of rows) {
      for (const s of row.samples) {
        const v = s.values;
        if (s.label === 'cpu' && !out.cpu.reported) out.cpu = { reported: row.ts, user: v.user ?? 0, system: v.system ?? 0, io: v.iowait ?? 0 };
        else if (s.label === 'loadavg_weighted' && !out.load.reported)
          out.load = { reported: row.ts, '1min': v['1min'] ?? 0, '5min': v['5min'] ?? 0, '15min': v['15min'] ?? 0 };
        else if (s.label === 'memory' && !out.memory.reported)
          out.memory = { reported: row.ts, used: Math.round(v.memutil ?? 0), swap_used: Math.round(v.swaputil ?? 0), available: Math.round(v.memfree ?? 0) };
        else if (s.label === 'filesystem' && s.id && !mounts.has(s.id)) {
          // Mounts come from the newest sample time that has filesystems.
          if (out.filesystem.reported && out.filesystem.reported !== row.ts) continue;
          out.filesystem.reported = row.ts;
          mounts.add(s.id);
          out.filesystem.mounts.push({ path: s.id, used: Math.round(v.use ?? 0), available: Math.round(v.avail ?? 0) });
        }
      }
    }
    out.filesystem.mounts.sort((a, b) => (a.path < b.path ? -1 : 1));
    return out;
  }

  /** Aggregation of one value over the devices the caller reaches (below `node_id`), per device or per hour. */
  async analyse(principal: Principal, q: AnalysisQuery): Promise<AnalysisAnswer> {
    const [label, field] = q.metric.split('.') as [string, string];
    if (!METRIC_LABELS.includes(label as MetricLabel) || !(field in METRIC_FIELDS[label as MetricLabel])) {
      throw invalid(`Unknown metric "${q.metric}".`, { field: 'metric' });
    }
    const now = this.now();
    const to = q.to ?? now + 1;
    const from = q.from ?? to - 86400;
    if (from >= to) throw invalid('from must be before to.', { field: 'from' });
    const visible = await this.deps.devices.listVisibleDevices(principal, this.deps.access.fleetScope(principal, 'analysis:read'));
    const reach = new Map(visible.filter((d) => !q.node_id || d.nodeIds.includes(q.node_id)).map((d) => [d.deviceId, d.title]));
    const selector = { label, field, ...(q.id !== undefined ? { mid: q.id } : {}), from: from - (from % ROLLUP_SECONDS), to };
    const direction = q.order === 'asc' ? 1 : -1;
    if (q.group_by === 'device') {
      const rows = (await this.deps.store.byDevice(selector)).filter((r) => reach.has(r.device_id) && r.n > 0);
      const items = rows
        .map((r) => ({ device_id: r.device_id, title: reach.get(r.device_id) ?? '', value: fold(q.aggregate, r), samples: r.n }))
        .sort((a, b) => (a.value - b.value) * direction || (a.device_id < b.device_id ? -1 : 1));
      return { metric: q.metric, aggregate: q.aggregate, group_by: 'device', from, to, items: items.slice(0, q.limit), total: items.length };
    }
    const buckets = new Map<number, { n: number; sum: number; min: number; max: number; devices: number }>();
    for (const r of await this.deps.store.byDeviceAndBucket(selector)) {
      if (!reach.has(r.device_id) || r.n === 0) continue;
      const b = buckets.get(r.bucket);
      if (!b) buckets.set(r.bucket, { n: r.n, sum: r.sum, min: r.min, max: r.max, devices: 1 });
      else Object.assign(b, { n: b.n + r.n, sum: b.sum + r.sum, min: Math.min(b.min, r.min), max: Math.max(b.max, r.max), devices: b.devices + 1 });
    }
    const items = [...buckets]
      .map(([ts, b]) => ({ ts, value: fold(q.aggregate, b), samples: b.n, devices: b.devices }))
      .sort((a, b) => (a.ts - b.ts) * direction);
    return { metric: q.metric, aggregate: q.aggregate, group_by: 'hour', from, to, items: items.slice(0, q.limit), total: items.length };
  }

  /** Fleet counts over the devices the caller reaches. */
  async orgstats(principal: Principal): Promise<OrgStats> {
    const visible = await this.deps.devices.listVisibleDevices(principal, this.deps.access.fleetScope(principal, 'analysis:read'));
    return fleetCounts(
      visible.map((d) => d.deviceId),
      this.deps.fleet,
      this.deps.reports,
    );
  }
}
