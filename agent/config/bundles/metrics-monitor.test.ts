import { mkdtemp, rm, writeFile, statfs } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createSoftwareTestContext, type SoftwareTestContext } from '../test-support/test-context.js';
import { createMetricsMonitorBundle, metricsMonitorBundle } from './metrics-monitor.js';

let t: SoftwareTestContext;

beforeEach(async () => {
  t = await createSoftwareTestContext();
});

afterEach(async () => {
  await t.cleanup();
});

describe('metrics_monitor on what this machine shows now', () => {
  it('raises a warning for each monitor at or over its threshold, once', async () => {
    const data = metricsMonitorBundle.parse({
      metrics: [
        { value: 'memory:memutil', threshold: 0 },
        { value: 'filesystem:use', threshold: 0, id: '/' },
        { value: 'cpu:user', threshold: 0 },
      ],
    });
    const fsBefore = await statfs('/');
    await metricsMonitorBundle.apply(data, t.ctx);
    const texts = t.reports.map((r) => `${r.severity} ${r.text}`);
    expect(texts).toHaveLength(3);
    expect(texts[0]).toMatch(/^WARN Metrics monitor memory:memutil triggered, value \d+\.00 >= 0\.00$/);
    const fsLine = texts.find((x) => x.includes('filesystem:use:/'))!;
    const reported = Number(/value (\d+)\.00/.exec(fsLine)![1]);
    const expected = 100 - Math.floor((100 * fsBefore.bavail) / fsBefore.blocks);
    expect(Math.abs(reported - expected)).toBeLessThanOrEqual(1);
    expect(texts.some((x) => /^WARN Metrics monitor cpu:user triggered, value \d+\.\d\d >= 0\.00$/.test(x))).toBe(true);

    t.clear();
    await metricsMonitorBundle.apply(data, t.ctx);
    expect(t.reports).toEqual([]);
  });

  it('reports nothing for thresholds the device is under, or mounts it does not have', async () => {
    await metricsMonitorBundle.apply(
      metricsMonitorBundle.parse({
        metrics: [
          { value: 'memory:memutil', threshold: 101 },
          { value: 'filesystem:use', threshold: 0, id: '/no/such/mount' },
        ],
      }),
      t.ctx,
    );
    expect(t.reports).toEqual([]);
  });
});

describe('metrics_monitor with a fake /proc', () => {
  let proc: string;
  const bundle = (): ReturnType<typeof createMetricsMonitorBundle> => createMetricsMonitorBundle({ procRoot: proc, cpuSampleMs: 0 });
  const meminfo = (available: number): string =>
    `MemTotal:        1000 kB\nMemFree:          50 kB\nMemAvailable:     ${available} kB\nSwapTotal:  0 kB\nSwapFree: 0 kB\n`;

  beforeEach(async () => {
    proc = await mkdtemp(path.join(tmpdir(), 'fake-proc-'));
  });
  afterEach(async () => {
    await rm(proc, { recursive: true, force: true });
  });

  it('warns when memory use crosses the threshold, recovers with an info report, once each', async () => {
    const data = { metrics: [{ value: 'memory:memutil', threshold: 80 }] };
    await writeFile(path.join(proc, 'meminfo'), meminfo(100));
    await bundle().apply(bundle().parse(data), t.ctx);
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['WARN', 'Metrics monitor memory:memutil triggered, value 90.00 >= 80.00']]);
    t.clear();
    await bundle().apply(bundle().parse(data), t.ctx);
    expect(t.reports).toEqual([]);

    await writeFile(path.join(proc, 'meminfo'), meminfo(900));
    await bundle().apply(bundle().parse(data), t.ctx);
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['INFO', 'Metrics monitor memory:memutil recovered, value 10.00 < 80.00']]);
    t.clear();
    await bundle().apply(bundle().parse(data), t.ctx);
    expect(t.reports).toEqual([]);
  });

  it('measures CPU use between two runs from the saved sample', async () => {
    const data = { metrics: [{ value: 'cpu:user', threshold: 50 }] };
    await writeFile(path.join(proc, 'stat'), 'cpu  100 0 100 800 0 0 0 0\ncpu0 1 2 3\n');
    await bundle().apply(bundle().parse(data), t.ctx);
    expect(t.reports).toEqual([]);
    // +60 user, +40 idle: 60 % user
    await writeFile(path.join(proc, 'stat'), 'cpu  160 0 100 840 0 0 0 0\n');
    await bundle().apply(bundle().parse(data), t.ctx);
    expect(t.reports.map((r) => r.text)).toEqual(['Metrics monitor cpu:user triggered, value 60.00 >= 50.00']);
  });

  it('a changed threshold starts the monitor afresh', async () => {
    await writeFile(path.join(proc, 'meminfo'), meminfo(100));
    await bundle().apply(bundle().parse({ metrics: [{ value: 'memory:memutil', threshold: 80 }] }), t.ctx);
    t.clear();
    await bundle().apply(bundle().parse({ metrics: [{ value: 'memory:memutil', threshold: 85 }] }), t.ctx);
    expect(t.reports.map((r) => r.text)).toEqual(['Metrics monitor memory:memutil triggered, value 90.00 >= 85.00']);
  });

  it('reports an error when the metrics cannot be read', async () => {
    await bundle().apply(bundle().parse({ metrics: [{ value: 'memory:swaputil', threshold: 10 }] }), t.ctx);
    expect(t.reports.map((r) => [r.severity, r.text])).toEqual([['ERR', 'Metrics monitor cannot read the device metrics.']]);
    expect(t.reports[0]!.log).toMatch(/meminfo/);
  });
});

describe('metrics_monitor data', () => {
  it('rejects unknown metrics, bad thresholds and filesystem monitors without a mount point', () => {
    expect(() => metricsMonitorBundle.parse({ metrics: [{ value: 'cpu:steal', threshold: 1 }] })).toThrow(/metrics\.0\.value: must be one of cpu:user/);
    expect(() => metricsMonitorBundle.parse({ metrics: [{ value: 'cpu:user', threshold: -1 }] })).toThrow(/threshold/);
    expect(() => metricsMonitorBundle.parse({ metrics: [{ value: 'cpu:user', threshold: '20' }] })).toThrow(/threshold/);
    expect(() => metricsMonitorBundle.parse({ metrics: [{ value: 'filesystem:use', threshold: 80 }] })).toThrow(
      /metrics\.0\.id: filesystem monitors need the mount point/,
    );
  });
});
