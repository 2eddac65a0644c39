import { describe, expect, it } from 'vitest';
import { MAX_METRICS_BATCH } from '../../shared/metrics.js';
import { checkMetricBatch, MAX_FUTURE_SECONDS } from './validate.js';

const NOW = 1_800_000_000;
const OLDEST = NOW - 86400;
const cpu = { label: 'cpu', ts: NOW - 10, values: { user: 1.5, system: 2, iowait: 0 } };

describe('checking what an agent sends', () => {
  it('keeps well-formed samples, dropping unknown value names', () => {
    const r = checkMetricBatch(
      [
        { ...cpu, values: { ...cpu.values, extra: 5 } },
        { label: 'filesystem', ts: NOW, id: '/', values: { avail: 5, use: 50 } },
      ],
      NOW,
      OLDEST,
    );
    expect(r).toEqual({
      accepted: [
        { label: 'cpu', ts: NOW - 10, values: { user: 1.5, system: 2, iowait: 0 } },
        { label: 'filesystem', ts: NOW, id: '/', values: { avail: 5, use: 50 } },
      ],
      dropped: 0,
    });
  });

  it('drops bad samples one by one: label, time, id, values out of range or missing', () => {
    const bad = [
      { ...cpu, label: 'gpu' },
      { ...cpu, label: '__proto__' },
      { ...cpu, ts: NOW + MAX_FUTURE_SECONDS + 1 },
      { ...cpu, ts: OLDEST - 1 },
      { ...cpu, ts: NOW - 0.5 },
      { ...cpu, ts: '1800000000' },
      { ...cpu, values: { user: 101, system: 0, iowait: 0 } },
      { ...cpu, values: { user: Number.NaN, system: 0, iowait: 0 } },
      { ...cpu, values: { user: 1, system: 0 } },
      { ...cpu, values: [1, 2, 3] },
      { label: 'filesystem', ts: NOW, values: { avail: 5, use: 5 } },
      { label: 'network', ts: NOW, id: 'x'.repeat(257), values: { rx_bytes: 1, tx_bytes: 1 } },
      { label: 'network', ts: NOW, id: 'eth0\n', values: { rx_bytes: 1, tx_bytes: 1 } },
      { label: 'network', ts: NOW, id: 'eth0', values: { rx_bytes: -1, tx_bytes: 1 } },
      null,
      'cpu',
      [cpu],
    ];
    const r = checkMetricBatch([...bad, cpu], NOW, OLDEST);
    expect(r.accepted).toHaveLength(1);
    expect(r.dropped).toBe(bad.length);
  });

  it('refuses a batch that is not an array or is too long, keeping nothing of it', () => {
    expect(checkMetricBatch({ 0: cpu }, NOW, OLDEST).refused).toMatch(/not an array/);
    const flood = checkMetricBatch(
      Array.from({ length: MAX_METRICS_BATCH + 1 }, () => cpu),
      NOW,
      OLDEST,
    );
    expect(flood.refused).toMatch(/more than/);
    expect(flood.accepted).toEqual([]);
  });
});
