/**
 * Audit and Logs filters take device and group names, suggested from the nodes the user may read,
 * on a desktop and a phone; a name that names nothing is said, not silently filtered on.
 */
import type { Page } from 'playwright-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

/** The names a filter field suggests (its datalist). */
const suggested = (page: Page, list: string) => page.locator(`#${list} option`).evaluateAll((o) => o.map((x) => (x as HTMLOptionElement).value));

const suite = useBrowserSuite();
const PHONE = { width: 390, height: 844 };
let north: string;
let south: string;

beforeAll(async () => {
  await suite.t.addGroup({ id: 'oslo', title: 'Oslo', tags: ['north'] });
  north = await suite.t.addDevice({ parent: 'oslo', name: 'fjord-gw' });
  south = await suite.t.addDevice({ name: 'delta-gw', tags: ['south'] });
  const base = {
    user: { id: 'u-names', email: 'names@example.com' },
    action: 'console',
    options: {},
    ip: '192.0.2.9',
    source: 'web' as const,
    event: 'remote.console',
  };
  await suite.t.broker.services.audit.recordRemoteStart({ ...base, deviceId: north, allowed: false, reason: 'north refused' });
  await suite.t.broker.services.audit.recordRemoteStart({ ...base, deviceId: south, allowed: false, reason: 'south refused' });
  const ts = Math.floor(Date.now() / 1000);
  const report = { bundle: 'proc_watch', bundle_commit_id: 'b1', commit_id: 'c1', labels: '', log: '', sev: 'WARN' as const, ts };
  await suite.t.broker.services.reports.record(north, [{ ...report, text: 'north report' }]);
  await suite.t.broker.services.reports.record(south, [{ ...report, text: 'south report' }]);
});

for (const viewport of [undefined, PHONE]) {
  const where = viewport ? 'on a phone' : 'on a desktop';

  describe(`filters by name ${where}`, () => {
    it('filters the audit by a device name picked from the suggestions, and says when a name names nothing', async () => {
      const { page, expectNoErrorsAndClose } = await suite.open({ viewport, at: '/audit?kind=remote&result=denied' });
      const rows = page.locator('table.audit-table tbody tr');
      await expect.poll(() => rows.count()).toBeGreaterThanOrEqual(2);
      if (viewport) await page.getByRole('button', { name: /^Filters/ }).click();
      const field = page.getByLabel('Device', { exact: true });
      // Suggested: the devices, by name (groups are not audit subjects).
      await expect.poll(() => suggested(page, 'a-device-names')).toEqual(expect.arrayContaining(['fjord-gw', 'delta-gw']));
      expect(await suggested(page, 'a-device-names')).not.toContain('Oslo');

      await field.fill('no-such-box');
      await page.getByRole('button', { name: 'Filter', exact: true }).click();
      await expect.poll(() => page.getByRole('alert').textContent()).toBe('No device you may see is named “no-such-box”.');
      expect(page.url()).not.toContain('device_id');

      await field.fill('FJORD-GW');
      await page.getByRole('button', { name: 'Filter', exact: true }).click();
      await expect.poll(() => page.url()).toContain(`device_id=${north}`);
      await expect.poll(() => rows.allTextContents()).toEqual([expect.stringContaining('north refused')]);
      if (viewport) await page.getByRole('button', { name: /^Filters/ }).click();
      // The field shows the applied device by its name, also on a fresh load of the URL.
      expect(await field.inputValue()).toBe('fjord-gw');
      await page.reload();
      if (viewport) await page.getByRole('button', { name: /^Filters/ }).click();
      await expect.poll(() => page.getByLabel('Device', { exact: true }).inputValue()).toBe('fjord-gw');
      await screenshot(page, `audit-filter-name${viewport ? '-phone' : ''}`);
      if (viewport) expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
      await expectNoErrorsAndClose();
    });

    it('filters the logs by a group name, which takes in the devices below it', async () => {
      const { page, expectNoErrorsAndClose } = await suite.open({ viewport, at: '/logs' });
      const rows = page.getByTestId('report-row');
      await expect.poll(() => rows.count()).toBe(2);
      await expect.poll(() => suggested(page, 'l-node-names')).toEqual(expect.arrayContaining(['fjord-gw', 'delta-gw', 'Oslo']));
      await page.getByLabel('Device or group').fill('oslo');
      await page.getByRole('button', { name: 'Filter', exact: true }).click();
      await expect.poll(() => page.url()).toContain('node_id=oslo');
      await expect.poll(() => rows.allTextContents()).toEqual([expect.stringContaining('north report')]);
      await page.getByLabel('Device or group').fill('delta-gw');
      await page.getByRole('button', { name: 'Filter', exact: true }).click();
      await expect.poll(() => rows.allTextContents()).toEqual([expect.stringContaining('south report')]);
      await expectNoErrorsAndClose();
    });
  });
}

describe('names a user may not read', () => {
  it('are never suggested nor resolved: a reader of the north sees only north names', async () => {
    const reader = await suite.t.userWith([
      { permission: 'device:read', resources: ['tag:north'] },
      { permission: 'audit:read' },
      { permission: 'reports:read', resources: ['tag:north'] },
    ]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader, at: '/logs' });
    await expect.poll(() => page.getByTestId('report-row').count()).toBe(1);
    await expect.poll(() => suggested(page, 'l-node-names')).toContain('fjord-gw');
    expect(await suggested(page, 'l-node-names')).not.toContain('delta-gw');
    await page.getByLabel('Device or group').fill('delta-gw');
    await page.getByRole('button', { name: 'Filter', exact: true }).click();
    await expect.poll(() => page.getByRole('alert').textContent()).toBe('No device or group you may see is named “delta-gw”.');

    await page.goto('/audit');
    await expect.poll(() => suggested(page, 'a-device-names')).toEqual(['fjord-gw']);
    await expectNoErrorsAndClose();
  });
});
