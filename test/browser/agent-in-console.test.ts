/**
 * A real agent process seen through the web console: its software inventory (this machine's dpkg
 * database) in the device page's software tab, its metrics in the device's Metrics panel, and the
 * report of a configuration run it made in Logs (reached from the commit in the Audit view).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();
let agent: TestAgent | undefined;
let device: string;

beforeAll(async () => {
  const t = suite.t;
  const upload = new FormData();
  upload.append('path', '/templates/');
  upload.append('file', new Blob(['welcome to {{device_name}}\n']), 'motd.tpl');
  expect((await t.api('POST', '/api/v2/file', { token: t.adminToken, body: upload })).status).toBe(200);
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  agent = startAgent({
    broker: t.url,
    bootstrapKey: Object.keys(key.body)[0],
    args: ['--metrics-interval-ms', '1000', '--metrics-flush-ms', '1000', '--inventory-interval-ms', '1000'],
  });
  device = await agent.waitConnected(t, 60_000);
});
afterAll(async () => {
  await agent?.close();
});

describe('a real agent in the web console', () => {
  it('shows its software, its metrics and the report of its configuration run', async () => {
    const t = suite.t;
    const admin = { token: t.adminToken };
    const dpkgVersion = execFileSync('dpkg-query', ['-W', '-f', '${Version}', 'dpkg'], { encoding: 'utf8' });
    await eventually(
      async () => {
        const r = await t.api('GET', `/api/v2/inventoryreport/${device}?item_type=software&search=dpkg`, admin);
        return r.status === 200 && (r.body.items ?? []).length > 0;
      },
      60_000,
      'the software inventory',
    );
    await eventually(
      async () => {
        const r = await t.api('GET', `/api/v2/device/${device}/metrics/latest`, admin);
        return r.status === 200 && r.body.cpu.reported > 0 && r.body.filesystem.reported > 0;
      },
      60_000,
      "the agent's metrics",
    );

    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}` });
    // Software: the machine's own dpkg, with its installed version.
    const tabs = page.locator('.inventory-tabs');
    await tabs.locator('[data-type="software"]').waitFor();
    expect(await tabs.locator('[data-type="software"] p').textContent()).toContain('(dpkg)');
    await tabs.getByLabel('Filter software').fill('dpkg');
    const dpkgRow = tabs.locator('tbody tr', { has: page.getByRole('cell', { name: 'dpkg', exact: true }) });
    await dpkgRow.waitFor();
    expect(await dpkgRow.locator('td').nth(1).textContent()).toBe(dpkgVersion);
    // Metrics: the latest values and a chart with data.
    const latest = page.getByTestId('latest-metrics');
    await latest.waitFor();
    expect(await latest.innerText()).toMatch(/CPU\s*[\d.]+ % user/);
    await page
      .locator('section.panel', { has: page.getByRole('heading', { name: 'Metrics' }) })
      .getByTestId('chart-cpu')
      .locator('canvas')
      .waitFor();
    await screenshot(page, 'agent-device-page');

    // A configuration run: the agent renders the template and reports it.
    const committed = await t.api('POST', '/api/v2/commit', {
      ...admin,
      body: {
        action: 'commit',
        message: 'motd for the agent',
        changes: [
          {
            node_id: device,
            formtype: 'file_distribution',
            extend: false,
            config: { files: [{ label: 'motd', templates: [{ source: '/templates/motd.tpl', destination: '/etc/motd', is_template: true }], parameters: [] }] },
          },
        ],
      },
    });
    expect(committed.status).toBe(200);
    const sha: string = committed.body.sha;
    await eventually(() => fs.existsSync(path.join(agent!.configRoot, 'etc/motd')), 60_000, 'the rendered file');
    await eventually(
      async () => (await t.api('GET', `/api/v2/reportlist?node_id=${device}&bundle=file_distribution`, admin)).body.total > 0,
      30_000,
      'the file_distribution report',
    );

    // From the commit in the Audit view to its reports in Logs.
    await page.goto(`/audit?action=${encodeURIComponent('POST /api/v2/commit')}`);
    await page.getByTestId('audit-show-reports').first().click();
    await page.waitForURL(`**/logs?commit_id=${sha}`);
    await page.getByTestId('logs-commit').waitFor();
    const rows = page.getByTestId('report-row');
    const rendered = rows.filter({ hasText: 'Successfully rendered template file /templates/motd.tpl to /etc/motd' });
    await rendered.first().waitFor();
    expect(await rendered.first().textContent()).toContain(sha.slice(0, 8));
    // Only that commit's reports are listed.
    const all = await rows.allTextContents();
    expect(all.length).toBeGreaterThan(0);
    for (const text of all) expect(text).toContain(sha.slice(0, 8));
    await screenshot(page, 'agent-logs-commit');
    await expectNoErrorsAndClose();
  });
});
