import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_METRICS_BATCH, type MetricSample } from '../../shared/metrics.js';
import { connectDevice, enrolDevice, eventually, type FakeConnection } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

const H = 3600;
/** Samples one device's agent may have stored per clock hour in this test broker. */
const BUDGET = 60;

let t: TestBroker;
let labDevice: string; // in group "lab" (tag x)
let rootDevice: string;
let online: { id: string; conn: FakeConnection };
let now: number;
let base: number; // the start of the hour two hours ago
let tagReader: string; // metrics:read + analysis:read + device:read on tag:x
let metricsOnly: string; // metrics:read + analysis:read, no device:read
let nobody: string;

const admin = () => ({ token: t.adminToken });
const cpu = (ts: number, user: number): MetricSample => ({ label: 'cpu', ts, values: { user, system: 1, iowait: 0 } });

beforeAll(async () => {
  t = await startTestBroker({ env: { METRICS_MAX_PER_DEVICE_HOUR: String(BUDGET) } });
  await t.addGroup({ id: 'lab', tags: ['x'] });
  labDevice = await t.addDevice({ parent: 'lab', name: 'lab-1' });
  rootDevice = await t.addDevice({ name: 'root-1' });
  now = Math.floor(Date.now() / 1000);
  // Two whole hours that end at least a minute before now: the newest samples (now - 30) stay out of
  // the window even in the first half-minute of a clock hour (they fell into its last hour then).
  base = Math.floor((now - 60) / H) * H - 2 * H;
  const metrics = t.broker.services.metrics;
  await metrics.ingest(labDevice, [
    cpu(base + 60, 10),
    cpu(base + 120, 30),
    cpu(base + H + 60, 50),
    { label: 'filesystem', ts: base + 60, id: '/', values: { avail: 1000, use: 40 } },
    { label: 'filesystem', ts: base + 60, id: '/data', values: { avail: 9000, use: 10 } },
    // the newest values, for /metrics/latest
    cpu(now - 30, 5),
    { label: 'memory', ts: now - 30, values: { memfree: 4096, memutil: 60.4, swaputil: 2 } },
    { label: 'loadavg_weighted', ts: now - 30, values: { '1min': 0.5, '5min': 0.4, '15min': 0.3 } },
    { label: 'filesystem', ts: now - 30, id: '/', values: { avail: 900, use: 45.6 } },
    { label: 'temperature', ts: now - 30, id: 'cpu_temp', values: { temperature: 51.5 } },
  ]);
  await metrics.ingest(rootDevice, [cpu(base + 60, 80)]);
  const created = await t.api('POST', '/api/v2/bootstrapkey', { ...admin(), body: { group_id: 'root', auto_accept: true } });
  const { device } = await enrolDevice(t, Object.keys(created.body)[0], undefined, 'wire');
  online = { id: device.id, conn: await connectDevice(t.url, device) };
  await eventually(() => t.broker.services.agents.isConnected(device.id));
  tagReader = await t.tokenWith([{ permission: 'metrics:read' }, { permission: 'analysis:read' }, { permission: 'device:read', resources: ['tag:x'] }]);
  metricsOnly = await t.tokenWith([{ permission: 'metrics:read' }, { permission: 'analysis:read' }]);
  nobody = await t.tokenWith([{ permission: 'device:read' }]);
});
afterAll(async () => {
  online?.conn.ws.close();
  await t?.close();
});

describe('GET /device/{id}/metrics', () => {
  it('answers raw qbee Metrics in the range, filtered by label and id', async () => {
    const r = await t.api('GET', `/api/v2/device/${labDevice}/metrics?from=${base}&to=${base + 2 * H}&label=cpu`, admin());
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ resolution: 'raw', total: 3, from: base, to: base + 2 * H });
    expect(r.body.items.map((m: MetricSample) => [m.label, m.ts, m.values.user])).toEqual([
      ['cpu', base + 60, 10],
      ['cpu', base + 120, 30],
      ['cpu', base + H + 60, 50],
    ]);
    const fs = await t.api('GET', `/api/v2/device/${labDevice}/metrics?from=${base}&to=${base + 2 * H}&label=filesystem&id=/data`, admin());
    expect(fs.body.items).toEqual([{ label: 'filesystem', ts: base + 60, id: '/data', values: { avail: 9000, use: 10 } }]);
  });

  it('answers hourly averages at resolution=hour', async () => {
    const r = await t.api('GET', `/api/v2/device/${labDevice}/metrics?from=${base}&to=${base + 2 * H}&label=cpu&resolution=hour`, admin());
    expect(r.status).toBe(200);
    expect(r.body.resolution).toBe('hour');
    expect(r.body.items.map((m: MetricSample) => [m.ts, m.values.user])).toEqual([
      [base, 20],
      [base + H, 50],
    ]);
  });

  it('refuses bad ranges, labels and ids, and unknown devices', async () => {
    const bad = async (q: string, field?: string) => {
      const r = await t.api('GET', `/api/v2/device/${labDevice}/metrics?${q}`, admin());
      expect(r.status, q).toBe(400);
      if (field) expect(JSON.stringify(r.body), q).toContain(field);
    };
    await bad(`from=${base + 10}&to=${base}`, 'from');
    await bad('label=gpu', 'label');
    await bad('from=yesterday', 'from');
    await bad('resolution=minute', 'resolution');
    await bad('colour=blue', 'colour');
    await bad(`from=0&to=${now}`, 'from');
    expect((await t.api('GET', `/api/v2/device/${'e'.repeat(64)}/metrics`, admin())).status).toBe(404);
    expect((await t.api('GET', '/api/v2/device/not-an-id/metrics', admin())).status).toBe(400);
  });
});

describe('GET /device/{id}/metrics/latest', () => {
  it("answers qbee's MetricsSummary from the last hour", async () => {
    const r = await t.api('GET', `/api/v2/device/${labDevice}/metrics/latest`, admin());
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      filesystem: { reported: now - 30, mounts: [{ path: '/', used: 46, available: 900 }] },
      cpu: { reported: now - 30, user: 5, system: 1, io: 0 },
      load: { reported: now - 30, '1min': 0.5, '5min': 0.4, '15min': 0.3 },
      memory: { reported: now - 30, used: 60, swap_used: 2, available: 4096 },
    });
  });

  it('is zero with reported 0 for a device without samples in the last hour', async () => {
    const r = await t.api('GET', `/api/v2/device/${rootDevice}/metrics/latest`, admin());
    expect(r.status).toBe(200);
    expect(r.body.cpu).toEqual({ reported: 0, user: 0, system: 0, io: 0 });
    expect(r.body.filesystem).toEqual({ reported: 0, mounts: [] });
  });
});

describe('who reaches which device', () => {
  it('a caller whose device:read is limited reaches those devices only; metrics:read without device:read reaches none; without it none', async () => {
    for (const path of ['metrics', 'metrics/latest']) {
      expect((await t.api('GET', `/api/v2/device/${labDevice}/${path}`, { token: tagReader })).status).toBe(200);
      const outside = await t.api('GET', `/api/v2/device/${rootDevice}/${path}`, { token: tagReader });
      expect(outside.status).toBe(403);
      expect(outside.body).toMatchObject({ code: 403, error: 'forbidden' });
      expect((await t.api('GET', `/api/v2/device/${rootDevice}/${path}`, { token: metricsOnly })).status).toBe(403);
      expect((await t.api('GET', `/api/v2/device/${labDevice}/${path}`, { token: nobody })).status).toBe(403);
      expect((await t.api('GET', `/api/v2/device/${labDevice}/${path}`)).status).toBe(401);
    }
  });
});

describe('/analysis', () => {
  const window = () => ({ from: base, to: base + 2 * H });

  it('POST: top devices by average CPU, with limit, order and aggregate', async () => {
    const r = await t.api('POST', '/api/v2/analysis', { ...admin(), body: { metric: 'cpu.user', ...window() } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ metric: 'cpu.user', aggregate: 'avg', group_by: 'device', total: 2 });
    expect(r.body.items).toEqual([
      { device_id: rootDevice, title: 'root-1', value: 80, samples: 1 },
      { device_id: labDevice, title: 'lab-1', value: 30, samples: 3 },
    ]);
    const top1 = await t.api('POST', '/api/v2/analysis', { ...admin(), body: { ...window(), limit: 1 } });
    expect(top1.body.items.map((i: { device_id: string }) => i.device_id)).toEqual([rootDevice]);
    expect(top1.body.total).toBe(2);
    const asc = await t.api('POST', '/api/v2/analysis', { ...admin(), body: { ...window(), order: 'asc', aggregate: 'max' } });
    expect(asc.body.items.map((i: { value: number }) => i.value)).toEqual([50, 80]);
    const fs = await t.api('POST', '/api/v2/analysis', { ...admin(), body: { ...window(), metric: 'filesystem.use', id: '/data' } });
    expect(fs.body.items).toEqual([{ device_id: labDevice, title: 'lab-1', value: 10, samples: 1 }]);
  });

  it('GET takes the same query as a query string; below a node; per hour', async () => {
    const r = await t.api('GET', `/api/v2/analysis?from=${base}&to=${base + 2 * H}&node_id=lab`, admin());
    expect(r.status).toBe(200);
    expect(r.body.items.map((i: { device_id: string }) => i.device_id)).toEqual([labDevice]);
    const hourly = await t.api('GET', `/api/v2/analysis?from=${base}&to=${base + 2 * H}&group_by=hour&order=asc`, admin());
    expect(hourly.body.items).toEqual([
      { ts: base, value: 40, samples: 3, devices: 2 },
      { ts: base + H, value: 50, samples: 1, devices: 1 },
    ]);
  });

  it('aggregates only over the devices a restricted caller reaches', async () => {
    const r = await t.api('POST', '/api/v2/analysis', { token: tagReader, body: window() });
    expect(r.body.items.map((i: { device_id: string }) => i.device_id)).toEqual([labDevice]);
    const hourly = await t.api('POST', '/api/v2/analysis', { token: tagReader, body: { ...window(), group_by: 'hour', order: 'asc' } });
    expect(hourly.body.items.map((i: { value: number }) => i.value)).toEqual([20, 50]);
    expect((await t.api('POST', '/api/v2/analysis', { token: nobody, body: {} })).status).toBe(403);
    expect((await t.api('GET', '/api/v2/analysis', { token: nobody })).status).toBe(403);
  });

  it('refuses unknown metrics, fields and out-of-range limits with 400', async () => {
    for (const body of [{ metric: 'gpu.load' }, { colour: 'blue' }, { limit: 0 }, { limit: 1001 }, { from: 'today' }, { aggregate: 'sum' }]) {
      const r = await t.api('POST', '/api/v2/analysis', { ...admin(), body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.code).toBe(400);
    }
    expect((await t.api('POST', '/api/v2/analysis', { ...admin(), body: { from: base + 10, to: base } })).status).toBe(400);
    expect((await t.api('GET', '/api/v2/analysis?limit=x', admin())).status).toBe(400);
  });
});

describe('GET /analysis/orgstats', () => {
  it('counts devices, online, OS, arch, agent versions and reports by severity over the devices reached', async () => {
    const report = (sev: 'INFO' | 'ERR', text: string) => ({
      bundle: 'users',
      bundle_commit_id: 'c1',
      commit_id: 'c1',
      labels: 'users',
      sev,
      text,
      ts: now - 60,
    });
    const stored = await t.broker.services.reports.record(labDevice, [report('ERR', 'useradd failed'), report('ERR', 'again'), report('INFO', 'done')]);
    expect(stored.stored).toBe(3);
    await t.broker.services.inventory.record(labDevice, {
      os: { name: 'Debian GNU/Linux', version: '12', pretty_name: 'Debian GNU/Linux 12 (bookworm)' },
      arch: 'aarch64',
    });
    const r = await t.api('GET', '/api/v2/analysis/orgstats', admin());
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ devices: 3, online: 1, offline: 2, reports: { available: true } });
    // lab's reports, and the connection report the broker records for the connected device
    expect(r.body.reports.by_severity.ERR).toBe(2);
    expect(r.body.reports.by_severity.INFO).toBeGreaterThanOrEqual(1);
    expect(r.body.by_os).toEqual({ 'Debian GNU/Linux 12 (bookworm)': 1, unknown: 2 });
    expect(r.body.by_arch).toEqual({ aarch64: 1, unknown: 2 });
    expect(r.body.by_agent_version).toEqual({ '9.9.9-test': 1, unknown: 2 });
    const limited = await t.api('GET', '/api/v2/analysis/orgstats', { token: tagReader });
    expect(limited.body).toMatchObject({ devices: 1, online: 0, by_arch: { aarch64: 1 } });
    expect(limited.body.reports.by_severity).toEqual({ INFO: 1, WARN: 0, ERR: 2, CRIT: 0 });
    expect((await t.api('GET', '/api/v2/analysis/orgstats', { token: nobody })).status).toBe(403);
  });
});

describe('retention', () => {
  it('drops raw samples past METRICS_RAW_RETENTION_HOURS (the hourly roll-up stays) and roll-ups past METRICS_ROLLUP_RETENTION_DAYS', async () => {
    const device = await t.addDevice({ name: 'old-1' });
    const old = Math.floor((now - 30 * H) / H) * H; // 30 h ago: past the default 24 h of raw samples
    // Two batches into one hour: the second is folded into the stored roll-up (sum, count, min, max).
    await t.broker.services.metrics.ingest(device, [cpu(old + 60, 60)]);
    await t.broker.services.metrics.ingest(device, [cpu(old + 120, 20)]);
    for (const [aggregate, value] of [
      ['avg', 40],
      ['min', 20],
      ['max', 60],
    ] as const) {
      const r = await t.api('POST', '/api/v2/analysis', { ...admin(), body: { node_id: device, from: old, to: old + H, aggregate } });
      expect(r.body.items, aggregate).toEqual([{ device_id: device, title: 'old-1', value, samples: 2 }]);
    }
    const db = t.broker.services.store.db;
    const ancient = Math.floor(now / H) * H - 500 * 86400; // past the default 400 days
    await db
      .insertInto('metric_rollups')
      .values({ device_id: device, label: 'cpu', mid: '', field: 'user', bucket: ancient, n: 1, v_sum: 1, v_min: 1, v_max: 1 })
      .execute();
    const raw = () => t.api('GET', `/api/v2/device/${device}/metrics?from=${old}&to=${old + H}&resolution=raw`, admin());
    expect((await raw()).body.total).toBe(2);

    const removed = await t.broker.services.metrics.pruneNow();
    expect(removed.raw).toBeGreaterThanOrEqual(1);
    expect(removed.rollups).toBeGreaterThanOrEqual(1);
    expect((await raw()).body.total).toBe(0);
    const hourly = await t.api('GET', `/api/v2/device/${device}/metrics?from=${old}&to=${old + H}`, admin());
    expect(hourly.body).toMatchObject({ resolution: 'hour', items: [{ label: 'cpu', ts: old, values: { user: 40 } }] });
    const left = await db.selectFrom('metric_rollups').select('bucket').where('device_id', '=', device).where('field', '=', 'user').execute();
    expect(left.map((r) => Number(r.bucket))).toEqual([old]);
  });

  it("a removed device's samples and roll-ups go with it", async () => {
    const device = await t.addDevice({ name: 'gone-1' });
    await t.broker.services.metrics.ingest(device, [cpu(now - 60, 10)]);
    const db = t.broker.services.store.db;
    const count = async () =>
      (await db.selectFrom('metric_samples').select('device_id').where('device_id', '=', device).execute()).length +
      (await db.selectFrom('metric_rollups').select('device_id').where('device_id', '=', device).execute()).length;
    expect(await count()).toBe(4);
    expect((await t.api('DELETE', `/api/v2/inventory/${device}`, admin())).status).toBe(204);
    expect(await count()).toBe(0);
  });
});

describe('what a hostile agent sends', () => {
  const series = async () =>
    (await t.api('GET', `/api/v2/device/${online.id}/metrics?from=${now - H}&to=${now + 600}&label=cpu`, admin())).body.items as MetricSample[];
  /** Sends a message, then a marker sample, and waits for the marker: what came before is handled by then. */
  const sendThenSettle = async (msg: Record<string, unknown>, marker: number) => {
    online.conn.send(msg);
    online.conn.send({ t: 'metrics', samples: [cpu(now - 1000 + marker, marker)] });
    await eventually(async () => (await series()).some((s) => s.values.user === marker));
  };

  it('stores the well-formed samples of a batch and drops the rest; an oversized or shapeless batch stores nothing', async () => {
    await sendThenSettle({ t: 'metrics', samples: Array.from({ length: MAX_METRICS_BATCH + 1 }, () => cpu(now - 10, 99)) }, 1);
    await sendThenSettle({ t: 'metrics', samples: { 0: cpu(now - 10, 98) } }, 2);
    await sendThenSettle({ t: 'metrics' }, 3);
    await sendThenSettle(
      {
        t: 'metrics',
        samples: [
          cpu(now - 10, 42),
          cpu(now + 86400, 97),
          { ...cpu(now - 10, 96), label: 'gpu' },
          { ...cpu(now - 10, 95), values: { user: 1e9, system: 0, iowait: 0 } },
          { label: 'network', ts: now - 10, id: 'x'.repeat(10_000), values: { rx_bytes: 1, tx_bytes: 1 } },
        ],
      },
      4,
    );
    const users = (await series()).map((s) => s.values.user).sort((a, b) => a - b);
    expect(users).toEqual([1, 2, 3, 4, 42]);
    // The connection stays up: bad samples are dropped, not punished.
    expect(t.broker.services.agents.isConnected(online.id)).toBe(true);
  });

  it('a flood stores at most the hourly budget per device', async () => {
    const before = (await series()).length;
    const flood = Array.from({ length: BUDGET }, (_, i) => cpu(now - 2000 + i, 7));
    online.conn.send({ t: 'metrics', samples: flood });
    online.conn.send({ t: 'metrics', samples: flood });
    await eventually(async () => (await series()).length >= BUDGET);
    // The budget is spent for this hour: whatever comes next is dropped, the second flood included.
    expect(await t.broker.services.metrics.ingest(online.id, [cpu(now - 5, 77)])).toEqual({ stored: 0, dropped: 1 });
    const after = await series();
    expect(after.length).toBe(BUDGET);
    expect(after.length - before).toBeLessThan(BUDGET);
    expect(after.some((s) => s.values.user === 77)).toBe(false);
  });
});
