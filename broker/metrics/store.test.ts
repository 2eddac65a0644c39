import { describe, expect, it } from 'vitest';
import type { MetricSample } from '../../shared/metrics.js';
import { decodeSamples, encodeSamples } from './store.js';

describe('raw row encoding', () => {
  it('round-trips samples through the compact JSON, about half the size of the Metric objects', () => {
    const samples: Array<Omit<MetricSample, 'ts'>> = [
      { label: 'cpu', values: { user: 12.5, system: 3.25, iowait: 0 } },
      { label: 'filesystem', id: '/data', values: { avail: 123456, use: 40 } },
      { label: 'loadavg_weighted', values: { '1min': 0.5, '5min': 0.25, '15min': 0.1 } },
    ];
    const json = encodeSamples(samples);
    expect(decodeSamples(json)).toEqual(samples);
    expect(json.length).toBeLessThan(JSON.stringify(samples).length * 0.6);
    expect(decodeSamples('not json')).toEqual([]);
    expect(decodeSamples('[["gpu","",[1]],["cpu","",[1,"x",2]]]')).toEqual([{ label: 'cpu', values: { user: 1, iowait: 2 } }]);
  });
});
