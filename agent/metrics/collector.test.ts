import { describe, expect, it } from 'vitest';
import { MAX_METRICS_BATCH, type MetricSample } from '../../shared/metrics.js';
import type { ControlMessage } from '../../shared/protocol.js';
import { MetricsCollector } from './collector.js';

const log = { debug: () => {}, info: () => {}, warn: () => {} };

function collector(maxQueue = 100): MetricsCollector {
  return new MetricsCollector({ intervalMs: 60_000, flushMs: 300_000, maxQueue, log });
}

const cpu = (ts: number): MetricSample => ({ label: 'cpu', ts, values: { user: 1, system: 1, iowait: 0 } });

describe('MetricsCollector', () => {
  it('collects every label this machine has: cpu after a baseline, memory, load, the root filesystem', async () => {
    const c = collector();
    await c.start();
    try {
      // CPU use is a difference of tick counters: let some ticks pass after the baseline.
      await new Promise((r) => setTimeout(r, 200));
      const samples = await c.collect();
      const labels = new Set(samples.map((s) => s.label));
      for (const label of ['cpu', 'memory', 'loadavg_weighted', 'filesystem', 'network']) expect(labels).toContain(label);
      expect(samples.find((s) => s.label === 'filesystem' && s.id === '/')).toBeDefined();
      expect(new Set(samples.map((s) => s.ts)).size).toBe(1);
    } finally {
      c.stop();
    }
  });

  it('keeps at most maxQueue samples while offline, dropping the oldest', () => {
    const c = collector(10);
    c.enqueue(Array.from({ length: 25 }, (_, i) => cpu(1000 + i)));
    expect(c.queued).toBe(10);
    expect(c.dropped).toBe(15);
    const sent: ControlMessage[] = [];
    c.attach((m) => sent.push(m));
    expect(sent).toHaveLength(1);
    const first = sent[0] as Extract<ControlMessage, { t: 'metrics' }>;
    expect(first.samples.map((s) => s.ts)).toEqual(Array.from({ length: 10 }, (_, i) => 1015 + i));
    expect(c.queued).toBe(0);
  });

  it('sends in messages of at most MAX_METRICS_BATCH, and keeps what a closed connection refused', () => {
    const c = collector(MAX_METRICS_BATCH * 3);
    c.enqueue(Array.from({ length: MAX_METRICS_BATCH * 2 + 5 }, (_, i) => cpu(i)));
    let calls = 0;
    const detach = c.attach(() => {
      calls += 1;
      if (calls > 1) throw new Error('connection closed');
    });
    expect(calls).toBe(2);
    expect(c.queued).toBe(MAX_METRICS_BATCH + 5);
    detach();
    const sizes: number[] = [];
    c.attach((m) => sizes.push((m as Extract<ControlMessage, { t: 'metrics' }>).samples.length));
    expect(sizes).toEqual([MAX_METRICS_BATCH, 5]);
  });

  it('turned off, it neither samples nor keeps a queue', async () => {
    const c = collector();
    c.enqueue([cpu(1)]);
    c.setEnabled(false);
    await c.sampleNow();
    expect(c.queued).toBe(0);
  });
});
