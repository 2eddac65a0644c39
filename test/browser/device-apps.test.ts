/**
 * A device's web UI in Chromium: a small HTTP server on this machine is reached through a real
 * agent, on `<device>-<port>.localhost:<broker port>` (Chromium resolves *.localhost to loopback),
 * opened from the device page in a new tab. The tab is on its own origin: it holds the app cookie,
 * the console's origin does not, and it cannot reach back to the console's window.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker } from '../support/broker.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

let agent: TestAgent;
let device: string;
let app: http.Server;
let appPort: number;

const suite = useBrowserSuite({ env: { APPS_HOST: 'localhost' } });

beforeAll(async () => {
  ({ agent, device } = await startEnrolledAgent(suite.t));
  app = http.createServer((req, res) => {
    if (req.url === '/app.js') {
      res.writeHead(200, { 'Content-Type': 'text/javascript' });
      return res.end("document.getElementById('state').textContent = 'script ran; opener: ' + String(window.opener);");
    }
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
    res.end(`<!doctype html><title>Router admin</title><h1>Router admin on ${req.headers.host}</h1><p id="state">waiting</p><script src="/app.js"></script>`);
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  appPort = (app.address() as AddressInfo).port;
});

afterAll(async () => {
  await agent?.close();
  app?.close();
});

describe('device web UI in the browser', () => {
  it('opens from the device page in a new tab on the device-and-port origin, through the agent', async () => {
    const { page, context, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}` });
    await page.getByRole('heading', { name: 'Web UI in the browser' }).waitFor();
    await page.getByLabel('Web UI port').fill(String(appPort));
    const [tab] = await Promise.all([context.waitForEvent('page'), page.getByRole('button', { name: 'Open web UI' }).click()]);
    await tab.getByRole('heading', { name: `Router admin on 127.0.0.1:${appPort}` }).waitFor({ timeout: 30_000 });
    const origin = new URL(tab.url());
    expect(origin.hostname).toBe(`${device.slice(0, 32)}-${appPort}.localhost`);
    expect(origin.port).toBe(new URL(suite.t.url).port);
    expect(origin.pathname).toBe('/');
    await expect.poll(() => tab.locator('#state').textContent()).toBe('script ran; opener: null');
    await screenshot(tab, 'device-web-ui');

    // The cookie belongs to the app's origin alone: HttpOnly, SameSite=Lax, host-only.
    const cookies = await context.cookies(tab.url());
    expect(cookies.map((c) => ({ name: c.name, httpOnly: c.httpOnly, sameSite: c.sameSite, domain: c.domain }))).toEqual([
      { name: 'fleet_app', httpOnly: true, sameSite: 'Lax', domain: origin.hostname },
    ]);
    expect((await context.cookies(suite.t.url)).filter((c) => c.name === 'fleet_app')).toEqual([]);
    expect(await tab.evaluate(() => document.cookie)).toBe('');
    await tab.close();
    await expectNoErrorsAndClose();
  });

  it('explains a refusal on the device page: a port the roles do not allow', async () => {
    const user = await suite.t.userWith([
      { permission: 'remote-access:connect', resources: ['*/tunnel(proto=tcp;port=1-2)'] },
      { permission: 'device:read', resources: ['*'] },
      { permission: 'inventory:read', resources: ['*'] },
    ]);
    const { page, context, expectNoErrorsAndClose } = await suite.open({ as: user, at: `/devices/${device}` });
    await page.getByLabel('Web UI port').fill(String(appPort));
    const opened = context.waitForEvent('page');
    await page.getByRole('button', { name: 'Open web UI' }).click();
    await page.getByRole('alert').filter({ hasText: 'Access denied' }).waitFor();
    expect((await opened).isClosed()).toBe(true);
    await expectNoErrorsAndClose();
  });

  it('says what to set when the broker has no APPS_HOST', async () => {
    const plain = await startTestBroker();
    try {
      const id = await plain.addDevice({ name: 'no-apps-host' });
      const { page, context, expectNoErrorsAndClose } = await suite.open({ broker: plain, at: `/devices/${id}` });
      const opened = context.waitForEvent('page');
      await page.getByRole('button', { name: 'Open web UI' }).click();
      const alert = page.getByRole('alert').filter({ hasText: 'APPS_HOST' });
      await alert.waitFor();
      expect(await alert.textContent()).toMatch(/set APPS_HOST/);
      expect((await opened).isClosed()).toBe(true);
      await expectNoErrorsAndClose();
    } finally {
      await plain.close();
    }
  });
});
