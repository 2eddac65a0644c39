import type { Logger } from 'pino';
import { describe, expect, it } from 'vitest';
import type { MetricSample } from '../../shared/metrics.js';
import type { RollupCell } from './rollup.js';
import { MetricsService, type MetricsDeps } from './service.js';
import type { MetricsStore } from './store.js';

const H = 3600;

function setup(state: 'approved' | 'pending' = 'approved') {
  let now = 1_800_000_000 + 1800; // mid-hour
  const inserted: Array<{ deviceId: string; samples: MetricSample[]; cells: RollupCell[] }> = [];
  const logs: Array<[string, string]> = [];
  const logger = {
    warn: (_o: unknown, msg: string) => logs.push(['warn', msg]),
    debug: (_o: unknown, msg: string) => logs.push(['debug', msg]),
    error: (_o: unknown, msg: string) => logs.push(['error', msg]),
  } as unknown as Logger;
  const store = {
    insert: async (deviceId: string, samples: MetricSample[], cells: RollupCell[]) => void inserted.push({ deviceId, samples, cells }),
    prune: async () => ({ raw: 0, rollups: 0 }),
  } as unknown as MetricsStore;
  const deps: MetricsDeps = {
    store,
    limits: { rawRetentionHours: 24, rollupRetentionDays: 30, maxPerDeviceHour: 5 },
    logger,
    access: { require: async () => {}, fleetScope: () => 'device:read' },
    devices: {
      getDevice: async () => ({ state, node: state === 'approved' ? { parent_id: 'root', title: 'd', tags: [] } : null }) as never,
      listVisibleDevices: async () => [],
    },
    fleet: { isOnline: () => false, describe: async () => new Map() },
    now: () => now,
  };
  return { service: new MetricsService(deps), inserted, logs, advance: (s: number) => (now += s), now: () => now };
}

const cpu = (ts: number): MetricSample => ({ label: 'cpu', ts, values: { user: 1, system: 1, iowait: 0 } });

describe('MetricsService.ingest', () => {
  it('stores at most maxPerDeviceHour samples per device and clock hour, then again in the next hour', async () => {
    const s = setup();
    const batch = (n: number) => Array.from({ length: n }, (_, i) => cpu(s.now() - i));
    expect(await s.service.ingest('a', batch(3))).toEqual({ stored: 3, dropped: 0 });
    expect(await s.service.ingest('a', batch(3))).toEqual({ stored: 2, dropped: 1 });
    expect(await s.service.ingest('a', batch(1))).toEqual({ stored: 0, dropped: 1 });
    expect(await s.service.ingest('b', batch(1))).toEqual({ stored: 1, dropped: 0 });
    s.advance(H);
    expect(await s.service.ingest('a', batch(1))).toEqual({ stored: 1, dropped: 0 });
    expect(s.inserted.map((i) => [i.deviceId, i.samples.length])).toEqual([
      ['a', 3],
      ['a', 2],
      ['b', 1],
      ['a', 1],
    ]);
    // Each stored batch carries its hourly fold.
    expect(s.inserted[0]!.cells.find((c) => c.field === 'user')).toMatchObject({ n: 3, sum: 3 });
  });

  it('logs a misbehaving device once an hour at warn, the rest at debug', async () => {
    const s = setup();
    await s.service.ingest('a', 'not a list');
    await s.service.ingest('a', [{ label: 'gpu' }]);
    await s.service.ingest('b', 'not a list');
    expect(s.logs.map(([level]) => level)).toEqual(['warn', 'debug', 'warn']);
    s.advance(H);
    await s.service.pruneNow();
    await s.service.ingest('a', 'not a list');
    expect(s.logs.at(-1)![0]).toBe('warn');
  });

  it('stores nothing for a device that is not approved in the tree', async () => {
    const s = setup('pending');
    expect(await s.service.ingest('a', [cpu(s.now())])).toEqual({ stored: 0, dropped: 1 });
    expect(s.inserted).toEqual([]);
  });
});
