/**
 * The Dashboard and the Map, and the Devices area's rows of the spec's UI permission table: each
 * element shown to holders of its permissions, hidden from others, and the API refusing them too.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();
const DASHBOARD = ['analysis:read', 'device:read', 'inventory:read', 'metrics:read', 'reports:read'].map((permission) => ({ permission }));
let oslo: string;
let lima: string;
let shed: string;

beforeAll(async () => {
  oslo = await suite.t.addDevice({ name: 'oslo-gw' });
  lima = await suite.t.addDevice({ name: 'lima-gw' });
  shed = await suite.t.addDevice({ name: 'shed-sensor' });
  for (const [id, latitude, longitude] of [
    [oslo, '59.91', '10.75'],
    [lima, '-12.05', '-77.04'],
  ]) {
    const res = await suite.t.api('PATCH', `/api/v2/deviceattribute/${id}`, { token: suite.t.adminToken, body: { latitude, longitude } });
    expect(res.status).toBe(200);
  }
  const ts = Math.floor(Date.now() / 1000);
  const base = { bundle_commit_id: 'b1', commit_id: 'c0ffee0123456789', labels: '', log: '' };
  await suite.t.broker.services.reports.record(oslo, [
    { ...base, bundle: 'package_management', sev: 'ERR', text: 'Package nginx failed to install', ts: ts - 60 },
    { ...base, bundle: 'proc_watch', sev: 'WARN', text: 'Process sshd restarted', ts: ts - 30 },
  ]);
  // lima's agent applied an older commit than its configuration's.
  await suite.t.broker.services.store.db
    .insertInto('device_config')
    .values({ device_id: lima, commit_sha: 'b'.repeat(40), digest: null, device_commit_sha: 'a'.repeat(40), applied_at: new Date().toISOString() })
    .execute();
});

describe('Dashboard', () => {
  it('is the landing screen: live online/offline counts, unread reports into the Logs, configuration failures', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.waitForURL('**/dashboard');
    const devices = page.getByTestId('card-devices');
    await expect.poll(() => devices.getByTestId('offline-count').textContent()).toBe('3 offline');
    expect(await devices.getByTestId('online-count').textContent()).toBe('0 online');
    await expect.poll(() => suite.t.broker.services.events.size).toBe(1);
    suite.t.broker.services.agents.emit('connected', oslo);
    await expect.poll(() => devices.getByTestId('online-count').textContent()).toBe('1 online');
    expect(await devices.getByTestId('offline-count').textContent()).toBe('2 offline');

    const config = page.getByTestId('config-failing');
    await config.waitFor();
    expect(await config.locator('li').allTextContents()).toEqual(['oslo-gw  1 error', 'lima-gw not applied ']);

    const reports = page.getByTestId('card-reports');
    await expect.poll(() => reports.getByTestId('unread-ERR').textContent()).toBe('1 ERR');
    expect(await reports.getByTestId('unread-WARN').textContent()).toBe('1 WARN');
    expect(await reports.getByTestId('unread-CRIT').textContent()).toBe('0 CRIT');
    expect(await reports.getByTestId('recent-errors').textContent()).toContain('Package nginx failed to install');

    // Refresh reads every card again.
    await suite.t.broker.services.reports.record(shed, [
      {
        bundle_commit_id: 'b1',
        commit_id: 'c0ffee0123456789',
        labels: '',
        log: '',
        bundle: 'file_distribution',
        sev: 'CRIT',
        text: 'Disk full',
        ts: Math.floor(Date.now() / 1000),
      },
    ]);
    await page.getByRole('button', { name: 'Refresh' }).click();
    await expect.poll(() => page.getByTestId('card-reports').getByTestId('unread-CRIT').textContent()).toBe('1 CRIT');
    await expect.poll(() => page.getByTestId('config-failing').locator('li').allTextContents()).toContain('shed-sensor  1 error');

    // CVE and analysis: real data when the broker answers, "not available" while it answers 501.
    for (const [card, call, list] of [
      ['card-cves', '/api/v2/cvelist', 'top-cves'],
      ['card-hottest', '/api/v2/analysis?limit=5', 'hottest'],
    ] as const) {
      const status = (await suite.t.api('GET', call, { token: suite.t.adminToken })).status;
      const shown = page.getByTestId(card);
      if (status === 501) await expect.poll(() => shown.getByTestId('not-available').textContent()).toContain('is not available on this broker');
      else await shown.locator(`[data-testid="${list}"], p`).first().waitFor();
    }
    await screenshot(page, 'dashboard');

    await reports.getByTestId('unread-ERR').click();
    await page.waitForURL('**/logs?severity=ERR&read=false');
    await expect.poll(() => page.getByTestId('report-row').count()).toBe(1);
    await expectNoErrorsAndClose();
  });

  it('shows each card only with the permission of its data: no CVE card without cve:read, and the API refuses', async () => {
    const user = await suite.t.userWith(DASHBOARD);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user });
    await page.waitForURL('**/dashboard');
    for (const card of ['card-devices', 'card-reports', 'card-configuration', 'card-hottest']) await page.getByTestId(card).waitFor();
    expect(await page.getByTestId('card-cves').count()).toBe(0);
    expect((await suite.t.api('GET', '/api/v2/cvelist', { token: user.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it('is not offered without every permission the spec lists for it (here metrics:read and analysis:read), and the API refuses', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'inventory:read' }, { permission: 'reports:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user });
    await page.waitForURL('**/devices');
    expect(await page.getByRole('link', { name: 'Dashboard' }).count()).toBe(0);
    await page.goto('/dashboard');
    await page.getByText('Access denied').waitFor();
    expect((await suite.t.api('GET', '/api/v2/analysis', { token: user.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });
});

/** Requests the page made to anywhere but the broker. */
function watchForeign(page: import('playwright-core').Page, origin: string): string[] {
  const foreign: string[] = [];
  page.on('request', (r) => {
    const url = r.url();
    if (!url.startsWith(origin) && !url.startsWith('data:') && !url.startsWith('blob:')) foreign.push(url);
  });
  return foreign;
}

describe('Map', () => {
  it('places devices by their coordinates on the bundled outline, lists the others, loads nothing from elsewhere, follows status live; a click opens the device', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    const foreign = watchForeign(page, suite.t.url);
    await page.getByRole('link', { name: 'Map' }).click();
    const map = page.getByTestId('map');
    await map.waitFor();
    expect(await map.getAttribute('data-fallback')).toBe('outline');
    await expect.poll(() => map.locator('path.device-marker').count()).toBe(2);
    expect(await map.locator('.leaflet-tile').count()).toBe(0);
    const placed = page.getByTestId('placed-devices');
    expect(await placed.getByRole('link').allTextContents()).toEqual(['lima-gw', 'oslo-gw']);
    expect((await placed.locator('li').allTextContents()).map((t) => t.replace(/^(online|offline) /, ''))).toEqual([
      'lima-gw -12.050, -77.040',
      'oslo-gw 59.910, 10.750',
    ]);
    expect(await page.getByTestId('unplaced-devices').textContent()).toContain('shed-sensor');
    await screenshot(page, 'map');
    expect(foreign).toEqual([]);

    // Live: a device coming online turns its marker and its dot green, without a reload.
    await expect.poll(() => suite.t.broker.services.events.size).toBe(1);
    suite.t.broker.services.agents.emit('connected', lima);
    await expect.poll(() => map.locator(`path.device-marker.online[data-node-id="${lima}"]`).count()).toBe(1);
    expect(await placed.locator('li', { hasText: 'lima-gw' }).locator('.status.online').count()).toBe(1);
    suite.t.broker.services.agents.emit('disconnected', lima);
    await expect.poll(() => map.locator(`path.device-marker.offline[data-node-id="${lima}"]`).count()).toBe(1);

    await map.locator(`path.device-marker[data-node-id="${oslo}"]`).click({ force: true });
    await page.getByRole('heading', { level: 1, name: 'oslo-gw' }).waitFor();
    await expectNoErrorsAndClose();
  });

  it('is shown with inventory:read alone, without devices: device:read says which devices inventory:read reaches', async () => {
    const user = await suite.t.userWith([{ permission: 'inventory:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user });
    await page.getByRole('link', { name: 'Map' }).click();
    await page.getByTestId('map').waitFor();
    expect((await suite.t.api('GET', '/api/v2/inventory', { token: user.token })).body.total).toBe(0);
    expect(await page.getByTestId('map').locator('path.device-marker').count()).toBe(0);
    expect(await page.getByTestId('placed-devices').getByRole('link').count()).toBe(0);
    await expectNoErrorsAndClose();
  });

  it('is hidden from a user without inventory:read, and the API refuses them', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user });
    await page.waitForURL('**/devices');
    expect(await page.getByRole('link', { name: 'Map' }).count()).toBe(0);
    await page.goto('/map');
    await page.getByText('Access denied').waitFor();
    expect((await suite.t.api('GET', '/api/v2/inventory', { token: user.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  describe('with MAP_TILE_URL', () => {
    // One 1×1 PNG for every tile.
    const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==', 'base64');
    let tiles: http.Server;
    let tileRequests = 0;
    let withTiles: TestBroker;
    let badTiles: TestBroker;

    beforeAll(async () => {
      tiles = http.createServer((req, res) => {
        tileRequests += 1;
        res.writeHead(200, { 'content-type': 'image/png' }).end(PNG);
      });
      await new Promise<void>((resolve) => tiles.listen(0, '127.0.0.1', resolve));
      const port = (tiles.address() as AddressInfo).port;
      withTiles = await startTestBroker({
        env: { MAP_TILE_URL: `http://127.0.0.1:${port}/tiles/{z}/{x}/{y}.png`, MAP_TILE_ATTRIBUTION: 'Test tiles <b>bold</b>' },
      });
      // A name that would be markup if put in as HTML.
      const odd = await withTiles.addDevice({ name: '<img src=x class=injected>' });
      await withTiles.api('PATCH', `/api/v2/deviceattribute/${odd}`, { token: withTiles.adminToken, body: { latitude: '1', longitude: '2' } });
      // A port nothing listens on: the tiles fail.
      const closed = http.createServer();
      await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
      const deadPort = (closed.address() as AddressInfo).port;
      await new Promise<void>((resolve) => closed.close(() => resolve()));
      badTiles = await startTestBroker({ env: { MAP_TILE_URL: `http://127.0.0.1:${deadPort}/{z}/{x}/{y}.png` } });
    });

    afterAll(async () => {
      await withTiles?.close();
      await badTiles?.close();
      await new Promise<void>((resolve) => tiles?.close(() => resolve()));
    });

    it('loads the tiles from there (the console is told through GET /webconsole/settings and its policy allows that origin)', async () => {
      const settings = await withTiles.api('GET', '/api/v2/webconsole/settings', { token: withTiles.adminToken });
      expect(settings.body.map).toMatchObject({ attribution: 'Test tiles <b>bold</b>' });
      const { page, expectNoErrorsAndClose } = await suite.open({ broker: withTiles, at: '/map' });
      const map = page.getByTestId('map');
      await expect.poll(() => map.locator('img.leaflet-tile-loaded').count()).toBeGreaterThan(0);
      expect(await map.getAttribute('data-fallback')).toBe('none');
      expect(tileRequests).toBeGreaterThan(0);
      // Names and the credit are text, never markup.
      expect(await map.locator('.leaflet-control-attribution').textContent()).toContain('Test tiles <b>bold</b>');
      await map.locator('path.device-marker').first().hover({ force: true });
      await expect.poll(() => map.locator('.leaflet-tooltip').textContent()).toBe('<img src=x class=injected> (offline)');
      expect(await page.locator('img.injected, .leaflet-control-attribution b').count()).toBe(0);
      await expectNoErrorsAndClose();
    });

    it('falls back to the outline when the tiles do not load', async () => {
      const { page, expectNoErrorsAndClose } = await suite.open({ broker: badTiles, at: '/map' });
      const map = page.getByTestId('map');
      await expect.poll(() => map.getAttribute('data-fallback')).toBe('tiles-failed');
      await page.getByText('The map tiles could not be loaded').waitFor();
      expect(await map.locator('.leaflet-overlay-pane path').count()).toBeGreaterThan(0);
      await expectNoErrorsAndClose();
    });
  });

  it('refuses the settings call without a session', async () => {
    expect((await suite.t.api('GET', '/api/v2/webconsole/settings')).status).toBe(401);
  });
});

describe('Devices area rows of the UI permission table', () => {
  it('Devices (device:read): hidden without it, and the API refuses', async () => {
    const user = await suite.t.userWith([{ permission: 'files:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user });
    expect(await page.getByRole('link', { name: 'Devices' }).count()).toBe(0);
    await page.goto('/devices');
    await page.getByText('Access denied').waitFor();
    expect((await suite.t.api('GET', '/api/v2/grouptree', { token: user.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it('Devices, Pending hosts (device:approve): offered with it, hidden without, and the API refuses', async () => {
    const approver = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'device:approve' }]);
    const a = await suite.open({ as: approver });
    await a.page.goto('/devices');
    await a.page.getByRole('main').getByRole('link', { name: 'Pending hosts' }).waitFor();
    await a.expectNoErrorsAndClose();

    const reader = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader, at: '/devices' });
    await page.locator('ul.tree').getByText('oslo-gw').waitFor();
    expect(await page.getByRole('link', { name: 'Pending hosts' }).count()).toBe(0);
    await page.goto('/pending');
    await page.getByText('Access denied').waitFor();
    expect((await suite.t.api('GET', '/api/v2/pendinghost', { token: reader.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it('Devices, Update attributes and Delete (device:manage): offered with it; not to device:approve alone, and the API refuses', async () => {
    const manager = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'device:manage' }]);
    const m = await suite.open({ as: manager });
    await m.page.goto(`/devices/${shed}`);
    await m.page.getByRole('link', { name: 'Edit attributes' }).waitFor();
    await m.page.getByRole('button', { name: 'Remove device' }).waitFor();
    await m.expectNoErrorsAndClose();

    const approver = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'device:approve' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: approver, at: `/devices/${shed}` });
    await page.getByRole('heading', { level: 2, name: 'Attributes' }).waitFor();
    expect(await page.getByRole('button', { name: 'Remove device' }).count()).toBe(0);
    expect(await page.getByRole('link', { name: 'Edit attributes' }).count()).toBe(0);
    expect((await suite.t.api('DELETE', `/api/v2/inventory/${shed}`, { token: approver.token })).status).toBe(403);
    expect((await suite.t.api('PATCH', `/api/v2/deviceattribute/${shed}`, { token: approver.token, body: { city: 'Bergen' } })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it('Devices, Show configuration (configuration:read): shows the committed configuration with it; hidden without, and the API refuses', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'configuration:read' }]);
    const c = await suite.open({ as: user });
    await c.page.goto(`/devices/${oslo}`);
    await c.page.getByRole('button', { name: 'Show configuration' }).click();
    await c.page.getByTestId('device-config').waitFor();
    const config = await suite.t.api('GET', `/api/v2/config/${oslo}`, { token: user.token });
    expect(config.status).toBe(200);
    // The rendered configuration, bundle by bundle, with the commit state of the device.
    for (const bundle of Object.keys(config.body.config.bundle_data)) expect(await c.page.getByTestId(`device-bundle-${bundle}`).count()).toBe(1);
    expect(await c.page.getByTestId('device-commit-sha').count()).toBe(1);
    await c.expectNoErrorsAndClose();

    const reader = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader, at: `/devices/${oslo}` });
    await page.getByRole('heading', { level: 2, name: 'Attributes' }).waitFor();
    expect(await page.getByRole('heading', { name: 'Configuration' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Show configuration' }).count()).toBe(0);
    expect((await suite.t.api('GET', `/api/v2/config/${oslo}`, { token: reader.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it("Devices' reports (reports:read): the device's unread counts link into the Logs; hidden without, and the API refuses", async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'reports:read' }]);
    const r = await suite.open({ as: user });
    await r.page.goto(`/devices/${oslo}`);
    const panel = r.page.getByTestId('device-reports');
    await expect.poll(() => panel.locator('.stat.sev-err').textContent()).toBe('1 ERR');
    await panel.locator('.stat.sev-err').click();
    await r.page.waitForURL(`**/logs?node_id=${oslo}&severity=ERR&read=false`);
    await expect.poll(() => r.page.getByTestId('report-row').count()).toBe(1);
    await r.expectNoErrorsAndClose();

    const reader = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader, at: `/devices/${oslo}` });
    await page.getByRole('heading', { level: 2, name: 'Attributes' }).waitFor();
    expect(await page.getByRole('heading', { name: 'Reports' }).count()).toBe(0);
    expect((await suite.t.api('GET', `/api/v2/reportsummary/${oslo}`, { token: reader.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });
});

describe('phone width', () => {
  it('shows the dashboard and the map at 390×844 without sideways scrolling', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 }, touch: true });
    for (const [path, shot] of [
      ['/dashboard', 'phone-dashboard'],
      ['/map', 'phone-map'],
    ]) {
      await page.goto(path);
      await page.locator('main h1').waitFor();
      await expect.poll(() => page.locator('.loading').count()).toBe(0);
      if (path === '/map') await expect.poll(() => page.getByTestId('map').locator('path.device-marker').count()).toBe(2);
      await screenshot(page, shot);
      const wide = await page.evaluate(() =>
        [...document.querySelectorAll('body *')]
          // Leaflet's panes overflow its container on purpose (it clips them): only the container's own box counts.
          .filter((e) => !e.closest('.leaflet-container'))
          .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1 || e.scrollWidth > window.innerWidth + 1)
          .slice(0, 8)
          .map((e) => `${e.tagName}.${e.className} ${e.getBoundingClientRect().right} ${e.scrollWidth}`),
      );
      expect(wide).toEqual([]);
      for (const box of await page.locator('.leaflet-container').evaluateAll((els) => els.map((e) => e.getBoundingClientRect().right))) {
        expect(box).toBeLessThanOrEqual(390);
      }
      expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
    }
    const map = page.getByTestId('map').boundingBox();
    expect((await map)?.height).toBeGreaterThan(300);
    await expectNoErrorsAndClose();
  });
});
