/**
 * End to end: a real agent process samples this machine's metrics every second and sends them every
 * second; they show in GET /device/{id}/metrics/latest, in the device's series and in the analysis, and a
 * committed settings bundle with `metrics: false` turns the sampling off.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let agent: TestAgent | undefined;
let device: string;

beforeAll(async () => {
  t = await startTestBroker();
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  agent = startAgent({
    broker: t.url,
    bootstrapKey: Object.keys(key.body)[0],
    args: ['--metrics-interval-ms', '1000', '--metrics-flush-ms', '1000'],
  });
  device = await agent.waitConnected(t, 60_000);
});
afterAll(async () => {
  await agent?.close();
  await t?.close();
});

describe('metrics from a real agent', () => {
  it('show up in /metrics/latest: CPU, memory, load and the root filesystem of this machine', async () => {
    const latest = await eventually(
      async () => {
        const r = await t.api('GET', `/api/v2/device/${device}/metrics/latest`, { token: t.adminToken });
        return r.status === 200 && r.body.cpu.reported > 0 && r.body.memory.reported > 0 ? r.body : undefined;
      },
      60_000,
      'metrics from the agent',
    );
    const now = Math.floor(Date.now() / 1000);
    expect(latest.cpu.reported).toBeGreaterThan(now - 120);
    expect(latest.cpu.user + latest.cpu.system + latest.cpu.io).toBeLessThanOrEqual(100);
    expect(latest.memory.used).toBeGreaterThan(0);
    expect(latest.memory.available).toBeGreaterThan(0);
    expect(latest.load.reported).toBeGreaterThan(0);
    expect(latest.filesystem.mounts.map((m: { path: string }) => m.path)).toContain('/');

    const series = await t.api('GET', `/api/v2/device/${device}/metrics?label=network`, { token: t.adminToken });
    expect(series.status).toBe(200);
    expect(series.body.items.map((m: { id: string }) => m.id)).toContain('lo');

    const analysis = await t.api('POST', '/api/v2/analysis', { token: t.adminToken, body: { metric: 'memory.memutil' } });
    expect(analysis.body.items.map((i: { device_id: string }) => i.device_id)).toEqual([device]);
  });

  it("stop when a committed settings bundle says metrics: false (qbee's settings.metrics)", async () => {
    const from = agent!.logs.length;
    const committed = await t.api('POST', '/api/v2/commit', {
      token: t.adminToken,
      body: {
        action: 'commit',
        message: 'metrics off',
        changes: [{ node_id: device, formtype: 'settings', extend: true, config: { metrics: false, reports: true, agentinterval: 5 } }],
      },
    });
    expect(committed.status, JSON.stringify(committed.body)).toBeLessThan(300);
    await agent!.waitForLog((l) => l.msg === 'metrics sampling off (settings.metrics)', 60_000, from);
    const reports = await eventually(
      async () => {
        const r = await t.api('GET', `/api/v2/reportlist?node_id=${device}&search=metrics%20off`, { token: t.adminToken });
        return r.status === 200 && r.body.items.length > 0 ? r.body.items : undefined;
      },
      60_000,
      'the settings report',
    );
    expect(reports[0].text).toContain('metrics off');
  });
});
