import { describe, expect, it } from 'vitest';
import type { MetricSample } from '../../shared/metrics.js';
import { deviceCharts, formatValue, GROUP_CHARTS, groupChart, joinSeries, latest, withSpan, xAxisRange } from './metrics-charts.js';

describe('metrics charts', () => {
  it('joins series on the union of their times, with gaps as null', () => {
    expect(
      joinSeries([
        {
          name: 'a',
          points: [
            [20, 2],
            [10, 1],
          ],
        },
        { name: 'b', points: [[30, 3]] },
      ]),
    ).toEqual({
      xs: [10, 20, 30],
      series: [
        { name: 'a', values: [1, 2, null] },
        { name: 'b', values: [null, null, 3] },
      ],
    });
  });

  it('makes one chart per label; disks and interfaces one series each; raw network as bytes per second', () => {
    const items: MetricSample[] = [
      { label: 'cpu', ts: 100, values: { user: 10, system: 5, iowait: 0 } },
      { label: 'filesystem', ts: 100, id: '/data', values: { avail: 1, use: 40 } },
      { label: 'filesystem', ts: 100, id: '/', values: { avail: 1, use: 70 } },
      { label: 'network', ts: 100, id: 'eth0', values: { rx_bytes: 6000, tx_bytes: 600 } },
      { label: 'network', ts: 160, id: 'eth0', values: { rx_bytes: 1200, tx_bytes: 60 } },
      { label: 'temperature', ts: 100, id: 'cpu_temp', values: { temperature: 50 } },
    ];
    const charts = deviceCharts(items, 'raw');
    expect(charts.map((c) => c.key)).toEqual(['cpu', 'filesystem', 'network', 'temperature']);
    expect(charts[1].series.map((s) => [s.name, s.values])).toEqual([
      ['/', [70]],
      ['/data', [40]],
    ]);
    // the first sample has no previous one: no rate
    expect(charts[2]).toMatchObject({
      unit: 'bytesPerSecond',
      xs: [160],
      series: [
        { name: 'eth0 received', values: [20] },
        { name: 'eth0 sent', values: [1] },
      ],
    });
    expect(charts[3].series[0].name).toBe('CPU');
    // hourly: bytes per sample as they are
    expect(deviceCharts(items, 'hour').find((c) => c.key === 'network')).toMatchObject({ unit: 'bytesPerSample', xs: [100, 160] });
  });

  it('builds a group chart from hourly answers, or none without data', () => {
    const cpu = GROUP_CHARTS[0];
    expect(groupChart(cpu, [[], [], []])).toBeNull();
    const chart = groupChart(cpu, [[{ ts: 3600, value: 10, samples: 2 }], [{ ts: 3600, value: 30, samples: 2 }], []]);
    expect(chart?.series.map((s) => s.name)).toEqual(['user, average', 'user, highest']);
  });

  it('formats values with their unit and finds the newest', () => {
    expect(formatValue(12.345, 'percent')).toBe('12.3 %');
    expect(formatValue(15_000, 'bytesPerSecond')).toBe('15.0 KB/s');
    expect(formatValue(null, 'load')).toBe('—');
    expect(latest([1, 2, null])).toBe(2);
  });
});

describe('xAxisRange', () => {
  const day = { from: 1_800_000_000 - 86400, to: 1_800_000_000 };

  it('spans the chosen range with one sample in it (a dot at its time, not an axis stretched around it)', () => {
    expect(xAxisRange([1_800_000_000 - 3600], day)).toEqual([day.from, day.to]);
  });

  it('spans the chosen range with no sample, and with samples inside it', () => {
    expect(xAxisRange([], day)).toEqual([day.from, day.to]);
    expect(xAxisRange([day.from + 10, day.from + 20, day.to - 5], day)).toEqual([day.from, day.to]);
  });

  it('widens to a sample outside the range (the hourly bucket that began before it)', () => {
    const bucket = day.from - (day.from % 3600);
    expect(xAxisRange([bucket, day.to - 60], day)).toEqual([bucket, day.to]);
    expect(xAxisRange([day.to + 30], day)).toEqual([day.from, day.to + 30]);
  });

  it('never answers an empty axis', () => {
    expect(xAxisRange([], { from: 100, to: 100 })).toEqual([100, 101]);
    expect(xAxisRange([], { from: 100, to: 50 })).toEqual([100, 101]);
  });

  it('is what withSpan attaches to each chart', () => {
    const [chart] = withSpan([{ key: 'cpu', title: 'CPU', unit: 'percent', xs: [day.to - 60], series: [] }], day.from, day.to);
    expect(chart.span).toEqual(day);
    expect(xAxisRange(chart.xs, chart.span!)).toEqual([day.from, day.to]);
  });
});
