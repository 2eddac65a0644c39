/**
 * Persistence of metrics (SQLite and PostgreSQL): raw samples grouped by device and time, hourly
 * roll-ups upserted batch by batch, the range reads the API needs and retention.
 */
import { sql } from 'kysely';
import { METRIC_FIELDS, type MetricLabel, type MetricSample } from '../../shared/metrics.js';
import type { Db, Dialect } from '../db/database.js';
import type { RollupCell } from './rollup.js';

/** Rows per INSERT: well under SQLite's and PostgreSQL's parameter limits. */
const INSERT_BATCH = 500;

export interface RawRow {
  ts: number;
  samples: Array<Omit<MetricSample, 'ts'>>;
}

export interface DeviceAggregate {
  device_id: string;
  n: number;
  sum: number;
  min: number;
  max: number;
}

export interface BucketAggregate extends DeviceAggregate {
  bucket: number;
}

export interface ValueSelector {
  label: string;
  field: string;
  /** only this id (mount point, interface); all ids when absent */
  mid?: string;
  from: number;
  to: number;
}

/** Ids per `IN (...)` query. */
const ID_BATCH = 500;

/** Removes the samples and roll-ups of these devices (a device being removed), in the caller's transaction. */
export async function deleteDeviceMetrics(trx: Db, deviceIds: string[]): Promise<void> {
  for (let i = 0; i < deviceIds.length; i += ID_BATCH) {
    const ids = deviceIds.slice(i, i + ID_BATCH);
    await trx.deleteFrom('metric_samples').where('device_id', 'in', ids).execute();
    await trx.deleteFrom('metric_rollups').where('device_id', 'in', ids).execute();
  }
}

/**
 * A raw row's samples as compact JSON — `[[label, id, [values in METRIC_FIELDS order]], …]` — about
 * half the size of the Metric objects: raw rows are most of what metrics cost on disk.
 */
export function encodeSamples(samples: Array<Omit<MetricSample, 'ts'>>): string {
  return JSON.stringify(samples.map((s) => [s.label, s.id ?? '', Object.keys(METRIC_FIELDS[s.label]).map((f) => s.values[f] ?? null)]));
}

export function decodeSamples(json: string): Array<Omit<MetricSample, 'ts'>> {
  let rows: unknown;
  try {
    rows = JSON.parse(json);
  } catch {
    return [];
  }
  if (!Array.isArray(rows)) return [];
  const out: Array<Omit<MetricSample, 'ts'>> = [];
  for (const row of rows) {
    if (!Array.isArray(row) || typeof row[0] !== 'string' || !Object.prototype.hasOwnProperty.call(METRIC_FIELDS, row[0]) || !Array.isArray(row[2])) continue;
    const label = row[0] as MetricLabel;
    const values: Record<string, number> = {};
    Object.keys(METRIC_FIELDS[label]).forEach((field, i) => {
      const v: unknown = (row[2] as unknown[])[i];
      if (typeof v === 'number') values[field] = v;
    });
    out.push({ label, ...(typeof row[1] === 'string' && row[1] ? { id: row[1] } : {}), values });
  }
  return out;
}

export class MetricsStore {
  constructor(
    private readonly db: Db,
    private readonly dialect: Dialect,
  ) {}

  /** Stores a device's checked samples: one raw row per sample time, and their fold into the roll-ups. */
  async insert(deviceId: string, samples: MetricSample[], cells: RollupCell[]): Promise<void> {
    const byTs = new Map<number, Array<Omit<MetricSample, 'ts'>>>();
    for (const { ts, ...rest } of samples) {
      const list = byTs.get(ts);
      if (list) list.push(rest);
      else byTs.set(ts, [rest]);
    }
    const raw = [...byTs].map(([ts, list]) => ({ device_id: deviceId, ts, data: encodeSamples(list) }));
    const least = this.dialect === 'postgres' ? 'least' : 'min';
    const greatest = this.dialect === 'postgres' ? 'greatest' : 'max';
    await this.db.transaction().execute(async (trx) => {
      for (let i = 0; i < raw.length; i += INSERT_BATCH)
        await trx
          .insertInto('metric_samples')
          .values(raw.slice(i, i + INSERT_BATCH))
          .execute();
      for (let i = 0; i < cells.length; i += INSERT_BATCH) {
        const rows = cells.slice(i, i + INSERT_BATCH).map((c) => ({
          device_id: deviceId,
          label: c.label,
          mid: c.mid,
          field: c.field,
          bucket: c.bucket,
          n: c.n,
          v_sum: c.sum,
          v_min: c.min,
          v_max: c.max,
        }));
        await trx
          .insertInto('metric_rollups')
          .values(rows)
          .onConflict((oc) =>
            oc.columns(['device_id', 'label', 'mid', 'field', 'bucket']).doUpdateSet({
              n: sql`metric_rollups.n + excluded.n`,
              v_sum: sql`metric_rollups.v_sum + excluded.v_sum`,
              v_min: sql`${sql.raw(least)}(metric_rollups.v_min, excluded.v_min)`,
              v_max: sql`${sql.raw(greatest)}(metric_rollups.v_max, excluded.v_max)`,
            }),
          )
          .execute();
      }
    });
  }

  /** Raw rows of a device with from <= ts < to, oldest first, at most `limit`. */
  async raw(deviceId: string, from: number, to: number, limit: number): Promise<RawRow[]> {
    const rows = await this.db
      .selectFrom('metric_samples')
      .select(['ts', 'data'])
      .where('device_id', '=', deviceId)
      .where('ts', '>=', from)
      .where('ts', '<', to)
      .orderBy('ts')
      .limit(limit)
      .execute();
    return rows.map((r) => ({ ts: Number(r.ts), samples: decodeSamples(r.data) }));
  }

  /** Raw rows of a device since `since`, newest first, at most `limit`. */
  async recent(deviceId: string, since: number, limit: number): Promise<RawRow[]> {
    const rows = await this.db
      .selectFrom('metric_samples')
      .select(['ts', 'data'])
      .where('device_id', '=', deviceId)
      .where('ts', '>=', since)
      .orderBy('ts', 'desc')
      .limit(limit)
      .execute();
    return rows.map((r) => ({ ts: Number(r.ts), samples: decodeSamples(r.data) }));
  }

  /** Roll-up cells of a device in [from, to) (buckets starting in the range), optionally one label. */
  async rollups(deviceId: string, from: number, to: number, label: string | undefined, limit: number): Promise<RollupCell[]> {
    let q = this.db
      .selectFrom('metric_rollups')
      .select(['label', 'mid', 'field', 'bucket', 'n', 'v_sum', 'v_min', 'v_max'])
      .where('device_id', '=', deviceId)
      .where('bucket', '>=', from)
      .where('bucket', '<', to);
    if (label) q = q.where('label', '=', label);
    const rows = await q.orderBy('bucket').orderBy('label').orderBy('mid').orderBy('field').limit(limit).execute();
    return rows.map((r) => ({
      label: r.label,
      mid: r.mid,
      field: r.field,
      bucket: Number(r.bucket),
      n: Number(r.n),
      sum: Number(r.v_sum),
      min: Number(r.v_min),
      max: Number(r.v_max),
    }));
  }

  /** One value folded per device over the buckets in [from, to) (every device with data). */
  async byDevice(v: ValueSelector): Promise<DeviceAggregate[]> {
    let q = this.db
      .selectFrom('metric_rollups')
      .select((eb) => [
        'device_id',
        eb.fn.sum<number | string>('n').as('n'),
        eb.fn.sum<number | string>('v_sum').as('sum'),
        eb.fn.min<number | string>('v_min').as('min'),
        eb.fn.max<number | string>('v_max').as('max'),
      ])
      .where('label', '=', v.label)
      .where('field', '=', v.field)
      .where('bucket', '>=', v.from)
      .where('bucket', '<', v.to);
    if (v.mid !== undefined) q = q.where('mid', '=', v.mid);
    const rows = await q.groupBy('device_id').execute();
    return rows.map((r) => ({ device_id: r.device_id, n: Number(r.n), sum: Number(r.sum), min: Number(r.min), max: Number(r.max) }));
  }

  /** One value folded per device and bucket in [from, to). */
  async byDeviceAndBucket(v: ValueSelector): Promise<BucketAggregate[]> {
    let q = this.db
      .selectFrom('metric_rollups')
      .select((eb) => [
        'device_id',
        'bucket',
        eb.fn.sum<number | string>('n').as('n'),
        eb.fn.sum<number | string>('v_sum').as('sum'),
        eb.fn.min<number | string>('v_min').as('min'),
        eb.fn.max<number | string>('v_max').as('max'),
      ])
      .where('label', '=', v.label)
      .where('field', '=', v.field)
      .where('bucket', '>=', v.from)
      .where('bucket', '<', v.to);
    if (v.mid !== undefined) q = q.where('mid', '=', v.mid);
    const rows = await q.groupBy(['device_id', 'bucket']).execute();
    return rows.map((r) => ({
      device_id: r.device_id,
      bucket: Number(r.bucket),
      n: Number(r.n),
      sum: Number(r.sum),
      min: Number(r.min),
      max: Number(r.max),
    }));
  }

  /** Removes raw samples older than `rawBefore` and roll-ups of buckets older than `rollupBefore` (Unix seconds). */
  async prune(rawBefore: number, rollupBefore: number): Promise<{ raw: number; rollups: number }> {
    const raw = await this.db.deleteFrom('metric_samples').where('ts', '<', rawBefore).executeTakeFirst();
    const rollups = await this.db.deleteFrom('metric_rollups').where('bucket', '<', rollupBefore).executeTakeFirst();
    return { raw: Number(raw.numDeletedRows), rollups: Number(rollups.numDeletedRows) };
  }

  /** Everything of one device (it was removed). */
  async forget(deviceId: string): Promise<void> {
    await this.db.deleteFrom('metric_samples').where('device_id', '=', deviceId).execute();
    await this.db.deleteFrom('metric_rollups').where('device_id', '=', deviceId).execute();
  }
}
