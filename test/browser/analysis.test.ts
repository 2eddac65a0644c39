/**
 * The Analysis area (analysis:read and device:read) and the device page's Metrics panel
 * (metrics:read): charts drawn with data, the top 10 below a group, a tag-restricted user seeing
 * only their devices, and users without the permissions seeing neither (the API refusing them).
 * Data: samples of three devices over 30 days ingested through the broker's metrics service, and a
 * real agent sampling this machine every second.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { MetricSample } from '../../shared/metrics.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite({ env: { METRICS_MAX_PER_DEVICE_HOUR: '100000' } });
let press1: string;
let press2: string;
let office: string;
let agent: TestAgent | undefined;
let agentDevice: string;

/** A day's shape: busier in the afternoon; `base` sets the device's level. */
function samplesOf(base: number, from: number, to: number, step: number): MetricSample[] {
  const out: MetricSample[] = [];
  for (let ts = from; ts < to; ts += step) {
    const wave = Math.sin((ts / 86400) * 2 * Math.PI) * 0.5 + 0.5;
    const user = Math.min(100, Math.round((base + 25 * wave) * 10) / 10);
    out.push(
      { label: 'cpu', ts, values: { user, system: Math.round(user / 3), iowait: 1 } },
      { label: 'memory', ts, values: { memfree: 2_000_000, memutil: Math.min(100, base + 20), swaputil: 3 } },
      { label: 'loadavg_weighted', ts, values: { '1min': base / 20 + wave, '5min': base / 20, '15min': base / 25 } },
      { label: 'filesystem', ts, id: '/', values: { avail: 8_000_000, use: Math.min(100, base + 30) } },
      { label: 'filesystem', ts, id: '/data', values: { avail: 50_000_000, use: Math.min(100, base + 5) } },
      // bytes since the previous sample of an agent sampling every 10 minutes
      { label: 'network', ts, id: 'eth0', values: { rx_bytes: Math.round(600 * (40_000 + 60_000 * wave)), tx_bytes: 600 * 15_000 } },
      { label: 'temperature', ts, id: 'cpu_temp', values: { temperature: 40 + base / 4 + 8 * wave } },
    );
  }
  return out;
}

async function ingest(device: string, base: number): Promise<void> {
  const now = Math.floor(Date.now() / 1000);
  const metrics = suite.t.broker.services.metrics;
  // 30 days hourly (the roll-ups), then the last day every 10 minutes (raw samples)
  const samples = [...samplesOf(base, now - 30 * 86400, now - 86400, 3600), ...samplesOf(base, now - 86400 + 60, now, 600)];
  for (let i = 0; i < samples.length; i += 2000) await metrics.ingest(device, samples.slice(i, i + 2000));
}

beforeAll(async () => {
  const t = suite.t;
  await t.addGroup({ id: 'plant', title: 'Plant', tags: ['plant'] });
  press1 = await t.addDevice({ parent: 'plant', name: 'press-01' });
  press2 = await t.addDevice({ parent: 'plant', name: 'press-02' });
  office = await t.addDevice({ name: 'office-01' });
  await ingest(press1, 30);
  await ingest(press2, 55);
  await ingest(office, 70);
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  agent = startAgent({
    broker: t.url,
    bootstrapKey: Object.keys(key.body)[0],
    args: ['--metrics-interval-ms', '1000', '--metrics-flush-ms', '1000'],
  });
  agentDevice = await agent.waitConnected(t, 60_000);
});
afterAll(async () => {
  await agent?.close();
});

const legendText = (page: import('playwright-core').Page, key: string) => page.getByTestId(`chart-${key}`).locator('.u-legend').innerText();

describe('Analysis', () => {
  it('shows the top 10 and hourly charts of a group, then a device over 24 hours and 30 days', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.getByRole('link', { name: 'Analysis' }).click();
    const rows = page.getByTestId('top-row');
    await expect.poll(() => rows.count()).toBeGreaterThanOrEqual(3);
    // by CPU: office-01 (70) above press-02 (55) above press-01 (30); the real agent's machine anywhere
    const byCpu = (await rows.locator('td:nth-child(2)').allInnerTexts()).map((t) => t.split(' ')[0]).filter((n) => n !== '' && !n.startsWith('host'));
    expect(byCpu.filter((n) => /^(office|press)/.test(n))).toEqual(['office-01', 'press-02', 'press-01']);
    for (const key of ['cpu', 'memory', 'filesystem', 'network', 'loadavg_weighted', 'temperature']) {
      await page.getByTestId(`chart-${key}`).locator('canvas').waitFor();
    }
    expect(await legendText(page, 'cpu')).toMatch(/user, average\s*[\d.]+ %/);
    expect(await legendText(page, 'temperature')).toMatch(/highest\s*[\d.]+ °C/);

    // the group "Plant": only its devices
    await page.getByLabel('Group').selectOption('plant');
    await expect.poll(() => rows.count()).toBe(2);
    expect(await page.locator('table.top-table').innerText()).not.toContain('office-01');
    await screenshot(page, 'analysis');

    // a device picked from the table: its own series, every sample of the last 24 hours
    await rows.nth(0).getByRole('link', { name: 'press-02' }).first().click();
    await page.getByRole('heading', { name: 'press-02' }).waitFor();
    await expect.poll(() => page.getByTestId('resolution').innerText()).toContain('Every sample');
    for (const key of ['cpu', 'memory', 'filesystem', 'network', 'loadavg_weighted', 'temperature']) {
      await page.getByTestId(`chart-${key}`).locator('canvas').waitFor();
    }
    expect(await legendText(page, 'filesystem')).toMatch(/\/data\s*60\.0 %/);
    expect(await legendText(page, 'network')).toMatch(/eth0 sent\s*15\.0 KB\/s/);
    await screenshot(page, 'analysis-device');

    await page.getByLabel('Time range').selectOption('30d');
    await expect.poll(() => page.getByTestId('resolution').innerText()).toContain('Hourly averages');
    await page.getByTestId('chart-cpu').locator('canvas').waitFor();
    expect(page.url()).toContain('range=30d');
    expect(await legendText(page, 'memory')).toMatch(/memory used\s*75\.0 %/);
    await expectNoErrorsAndClose();
  });

  it('shows a tag-restricted user only their devices, and the API refuses the others', async () => {
    const user = await suite.t.userWith([
      { permission: 'analysis:read' },
      { permission: 'metrics:read' },
      { permission: 'device:read', resources: ['tag:plant'] },
    ]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user });
    await page.getByRole('link', { name: 'Analysis' }).click();
    const rows = page.getByTestId('top-row');
    await expect.poll(() => rows.count()).toBe(2);
    const table = await page.locator('table.top-table').innerText();
    expect(table).toContain('press-02');
    expect(table).not.toContain('office-01');
    await page.getByTestId('chart-cpu').locator('canvas').waitFor();
    const answer = await suite.t.api('POST', '/api/v2/analysis', { token: user.token, body: {} });
    expect(answer.body.items.map((i: { title: string }) => i.title).sort()).toEqual(['press-01', 'press-02']);
    expect((await suite.t.api('GET', `/api/v2/device/${office}/metrics`, { token: user.token })).status).toBe(403);
    // the last hour of the group: one or two hourly points still draw
    await page.getByLabel('Time range').selectOption('1h');
    await expect.poll(() => page.url()).toContain('range=1h');
    await page.getByTestId('chart-cpu').locator('canvas').waitFor();
    expect(await legendText(page, 'cpu')).toMatch(/user, average\s*[\d.]+ %/);
    await page.goto(`/analysis?device=${office}`);
    await page.getByText('Access denied').first().waitFor();
    await expectNoErrorsAndClose();
  });

  it('hides Analysis from a user without analysis:read, and the API refuses them', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'metrics:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user });
    expect(await page.getByRole('link', { name: 'Analysis' }).count()).toBe(0);
    await page.goto('/analysis');
    await page.getByText('Access denied').waitFor();
    expect((await suite.t.api('POST', '/api/v2/analysis', { token: user.token, body: {} })).status).toBe(403);
    expect((await suite.t.api('GET', '/api/v2/analysis/orgstats', { token: user.token })).status).toBe(403);
    // metrics:read alone still gives the device page its Metrics panel, without the Analysis link
    await page.goto(`/devices/${press1}`);
    await page.getByTestId('latest-metrics').waitFor();
    expect(await page.getByRole('link', { name: 'Open in Analysis' }).count()).toBe(0);
    await expectNoErrorsAndClose();
  });

  it('hides Analysis from a user with analysis:read but not device:read (the spec asks both)', async () => {
    const user = await suite.t.userWith([{ permission: 'analysis:read' }, { permission: 'files:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user });
    expect(await page.getByRole('link', { name: 'Analysis' }).count()).toBe(0);
    await page.goto('/analysis');
    await page.getByText('Access denied').waitFor();
    await expectNoErrorsAndClose();
  });

  it('is usable at phone width: controls stacked, charts within the screen', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({
      viewport: { width: 390, height: 844 },
      touch: true,
      at: `/analysis?node=plant&device=${press1}`,
    });
    await page.getByTestId('chart-cpu').locator('canvas').waitFor();
    const widths = await page.evaluate(() => ({
      page: document.documentElement.scrollWidth,
      view: window.innerWidth,
      canvas: Math.max(...[...document.querySelectorAll('canvas')].map((c) => c.getBoundingClientRect().right)),
    }));
    expect(widths.page).toBeLessThanOrEqual(widths.view);
    expect(widths.canvas).toBeLessThanOrEqual(widths.view);
    await page.getByLabel('Time range').selectOption('7d');
    await expect.poll(() => page.getByTestId('resolution').innerText()).toContain('Hourly averages');
    await screenshot(page, 'analysis-phone');
    await expectNoErrorsAndClose();
  });
});

describe('Device page: Metrics', () => {
  it("shows a real agent's latest values and 24-hour charts to a holder of metrics:read", async () => {
    await eventually(
      async () => {
        const r = await suite.t.api('GET', `/api/v2/device/${agentDevice}/metrics/latest`, { token: suite.t.adminToken });
        return r.status === 200 && r.body.cpu.reported > 0 && r.body.filesystem.reported > 0;
      },
      60_000,
      "the agent's metrics",
    );
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${agentDevice}` });
    const latest = page.getByTestId('latest-metrics');
    await latest.waitFor();
    const text = await latest.innerText();
    expect(text).toMatch(/CPU\s*[\d.]+ % user/);
    expect(text).toMatch(/Disk \/\s*[\d.]+ % used/);
    // memory as qbee's MemorySummary names it: used and swap_used percent, available KiB.
    expect(text).toMatch(/Memory\s*[\d.]+ % used \([\d.]+ [KMGT]?i?B available\), swap [\d.]+ %/);
    const panel = page.locator('section.panel', { has: page.getByRole('heading', { name: 'Metrics' }) });
    await panel.getByTestId('chart-cpu').locator('canvas').waitFor();
    expect(await panel.getByTestId('chart-cpu').locator('.u-legend').innerText()).toMatch(/user\s*[\d.]+ %/);
    await screenshot(page, 'device-metrics');
    await panel.getByRole('link', { name: 'Open in Analysis' }).click();
    await expect.poll(() => page.getByTestId('resolution').innerText()).toContain('Every sample');
    expect(page.url()).toContain(`device=${agentDevice}`);
    await page.getByTestId('chart-memory').locator('canvas').waitFor();
    await expectNoErrorsAndClose();
  });

  it('has no Metrics panel without metrics:read, and the API refuses the calls', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user, at: `/devices/${press1}` });
    await page.getByRole('heading', { name: 'Attributes' }).waitFor();
    expect(await page.getByRole('heading', { name: 'Metrics' }).count()).toBe(0);
    expect((await suite.t.api('GET', `/api/v2/device/${press1}/metrics/latest`, { token: user.token })).status).toBe(403);
    expect((await suite.t.api('GET', `/api/v2/device/${press1}/metrics`, { token: user.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });
});
