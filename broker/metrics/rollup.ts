/**
 * Downsampling: samples folded into fixed time buckets (an hour by default), per device, label, id
 * and value name, as count, sum, minimum and maximum. Folding is associative, so a bucket is built
 * up batch by batch (the store adds a batch's fold to what it holds) and averages stay exact.
 */
import type { MetricSample } from '../../shared/metrics.js';

export const ROLLUP_SECONDS = 3600;

export interface RollupCell {
  label: string;
  /** '' when the sample has no id */
  mid: string;
  field: string;
  /** start of the bucket, Unix seconds */
  bucket: number;
  n: number;
  sum: number;
  min: number;
  max: number;
}

export function bucketOf(ts: number, seconds = ROLLUP_SECONDS): number {
  return Math.floor(ts / seconds) * seconds;
}

/** One cell per (label, id, value name, bucket) of the samples. */
export function rollUp(samples: MetricSample[], seconds = ROLLUP_SECONDS): RollupCell[] {
  const cells = new Map<string, RollupCell>();
  for (const s of samples) {
    const bucket = bucketOf(s.ts, seconds);
    const mid = s.id ?? '';
    for (const [field, value] of Object.entries(s.values)) {
      const key = `${s.label}\u0000${mid}\u0000${field}\u0000${bucket}`;
      const cell = cells.get(key);
      if (!cell) cells.set(key, { label: s.label, mid, field, bucket, n: 1, sum: value, min: value, max: value });
      else {
        cell.n += 1;
        cell.sum += value;
        if (value < cell.min) cell.min = value;
        if (value > cell.max) cell.max = value;
      }
    }
  }
  return [...cells.values()];
}

/** Two folds of the same cell combined (what the store's upsert does in SQL). */
export function mergeCells(a: RollupCell, b: RollupCell): RollupCell {
  return { ...a, n: a.n + b.n, sum: a.sum + b.sum, min: Math.min(a.min, b.min), max: Math.max(a.max, b.max) };
}
