import { describe, expect, it } from 'vitest';
import type { MetricSample } from '../../shared/metrics.js';
import { bucketOf, mergeCells, rollUp } from './rollup.js';

const H = 3600;

describe('downsampling into hourly cells', () => {
  const samples: MetricSample[] = [
    { label: 'cpu', ts: 10 * H + 5, values: { user: 10, system: 1, iowait: 0 } },
    { label: 'cpu', ts: 10 * H + 65, values: { user: 30, system: 3, iowait: 0 } },
    { label: 'cpu', ts: 11 * H, values: { user: 50, system: 5, iowait: 2 } },
    { label: 'filesystem', ts: 10 * H + 5, id: '/', values: { avail: 100, use: 40 } },
    { label: 'filesystem', ts: 10 * H + 5, id: '/data', values: { avail: 900, use: 10 } },
  ];

  it('folds count, sum, min and max per label, id, value and hour', () => {
    const cells = rollUp(samples);
    const user10 = cells.find((c) => c.label === 'cpu' && c.field === 'user' && c.bucket === 10 * H);
    expect(user10).toEqual({ label: 'cpu', mid: '', field: 'user', bucket: 10 * H, n: 2, sum: 40, min: 10, max: 30 });
    expect(cells.find((c) => c.field === 'user' && c.bucket === 11 * H)).toMatchObject({ n: 1, sum: 50 });
    expect(cells.filter((c) => c.label === 'filesystem' && c.field === 'use').map((c) => [c.mid, c.sum])).toEqual([
      ['/', 40],
      ['/data', 10],
    ]);
    expect(cells).toHaveLength(3 * 2 + 2 * 2);
  });

  it('is associative: folding two batches then merging equals folding them at once (exact averages)', () => {
    const whole = rollUp(samples);
    const a = rollUp(samples.slice(0, 2));
    const b = rollUp(samples.slice(1, 2));
    const c = rollUp(samples.slice(0, 1));
    const merged = mergeCells(
      c.find((x) => x.field === 'user')!,
      b.find((x) => x.field === 'user')!,
    );
    expect(merged).toEqual(a.find((x) => x.field === 'user'));
    expect(merged).toEqual(whole.find((x) => x.field === 'user' && x.bucket === 10 * H));
  });

  it('buckets start on the hour', () => {
    expect(bucketOf(10 * H + 3599)).toBe(10 * H);
    expect(bucketOf(10 * H)).toBe(10 * H);
    expect(bucketOf(125, 60)).toBe(120);
  });
});
