/** Phone width: filter forms fold behind a button that counts the filters set, so the list comes first; table actions stay on screen. */
import { describe, expect, it } from 'vitest';
import type { Locator, Page } from 'playwright-core';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();
const PHONE = { width: 390, height: 844 };

/** Nothing wider than the screen: no sideways scrolling. */
async function expectNoSidewaysScroll(page: Page) {
  expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
}

describe('filters on a phone', () => {
  it('devices: search stays, tag and status fold behind "Filters", which counts what is set', async () => {
    await suite.t.addDevice({ name: 'fold-a', tags: ['fold-tag'] });
    await suite.t.addDevice({ name: 'fold-b' });
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: PHONE, at: '/devices' });
    await page.locator('ul.tree').getByText('fold-b').waitFor();
    const toggle = page.getByRole('button', { name: /^Filters/ });
    expect(await page.getByLabel('Search').isVisible()).toBe(true);
    expect(await page.getByLabel('Tag', { exact: true }).isVisible()).toBe(false);
    expect(await page.getByLabel('Status', { exact: true }).isVisible()).toBe(false);
    expect(await toggle.getAttribute('aria-expanded')).toBe('false');
    await screenshot(page, 'phone-devices-filters-folded');

    await toggle.click();
    await page.getByLabel('Tag', { exact: true }).selectOption('fold-tag');
    await expect.poll(() => new URL(page.url()).searchParams.get('tag')).toBe('fold-tag');
    await page.locator('ul.tree').getByText('fold-b').waitFor({ state: 'detached' });
    await screenshot(page, 'phone-devices-filters-open');
    await page.getByRole('button', { name: /^Hide filters/ }).click();
    expect(await page.getByLabel('Tag', { exact: true }).isVisible()).toBe(false);
    expect(await page.getByRole('button', { name: /^Filters/ }).textContent()).toBe('Filters (1 set)');
    await expectNoSidewaysScroll(page);
    await expectNoErrorsAndClose();
  });

  it('audit: every filter folds, the entries come first, and applying a filter folds them again', async () => {
    // A denied remote-access attempt and a few ordinary changes to list.
    const device = await suite.t.addDevice({ name: 'audit-phone' });
    const reader = await suite.t.userWith([{ permission: 'device:read' }]);
    expect((await suite.t.api('POST', `/api/v2/remote/reload/${device}`, { token: reader.token, body: {} })).status).toBe(403);
    for (let i = 0; i < 3; i++) await suite.t.api('POST', '/api/v2/bootstrapkey', { token: suite.t.adminToken, body: {} });

    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: PHONE, at: '/audit' });
    const rows = page.locator('main table tbody tr');
    await rows.first().waitFor();
    expect(await page.getByLabel('Result').isVisible()).toBe(false);
    expect(await page.getByRole('button', { name: 'Filter', exact: true }).isVisible()).toBe(false);
    // The first entry is on the first screen, not below seven filter fields.
    const top = await rows.first().evaluate((r) => r.getBoundingClientRect().top);
    expect(top).toBeLessThan(PHONE.height);
    await screenshot(page, 'phone-audit-filters-folded');

    await page.getByRole('button', { name: /^Filters/ }).click();
    await page.getByLabel('Result').selectOption('denied');
    await page.getByRole('button', { name: 'Filter', exact: true }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get('result')).toBe('denied');
    expect(await page.getByLabel('Result').isVisible()).toBe(false);
    expect(await page.getByRole('button', { name: /^Filters/ }).textContent()).toBe('Filters (1 set)');
    await expect.poll(async () => (await rows.allTextContents()).every((t) => t.includes('denied'))).toBe(true);
    expect(await rows.count()).toBeGreaterThan(0);
    await expectNoSidewaysScroll(page);
    await expectNoErrorsAndClose();
  });

  it('on a wide screen shows every filter and no fold button', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/audit' });
    await page.getByLabel('Result').waitFor();
    expect(await page.getByLabel('Result').isVisible()).toBe(true);
    expect(await page.getByRole('button', { name: /^Filters/ }).isVisible()).toBe(false);
    await page.goto('/devices');
    await page.getByLabel('Tag', { exact: true }).waitFor();
    expect(await page.getByRole('button', { name: /^Filters/ }).isVisible()).toBe(false);
    await expectNoErrorsAndClose();
  });
});

describe('tables on a phone', () => {
  it('keeps the bootstrap keys actions on screen while the wide table scrolls', async () => {
    await suite.t.api('POST', '/api/v2/bootstrapkey', { token: suite.t.adminToken, body: { label: 'phone batch' } });
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: PHONE, touch: true, at: '/bootstrap-keys' });
    const del = page.locator('td.actions-cell').getByRole('button', { name: 'Delete' }).first();
    await del.waitFor();
    const box = await del.boundingBox();
    expect(box).not.toBeNull();
    expect(box!.x).toBeGreaterThanOrEqual(0);
    expect(box!.x + box!.width).toBeLessThanOrEqual(PHONE.width);
    await screenshot(page, 'phone-bootstrap-keys');
    await expectNoSidewaysScroll(page);
    await expectNoErrorsAndClose();
  });

  it('devices table: the selection, bulk actions and column filters are reachable; the table scrolls, not the page', async () => {
    const id = await suite.t.addDevice({ name: 'phone-table-dev' });
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: PHONE, touch: true, at: '/devices?view=table' });
    const row = page.locator(`table.devices tr[data-device="${id}"]`);
    await row.waitFor();
    const onScreen = async (what: string, l: Locator) => {
      const box = await l.boundingBox();
      expect(box, what).not.toBeNull();
      expect(box!.x, what).toBeGreaterThanOrEqual(0);
      expect(box!.x + box!.width, what).toBeLessThanOrEqual(PHONE.width);
    };
    await onScreen('select', row.getByRole('checkbox'));
    await onScreen('name', row.getByRole('link', { name: 'phone-table-dev' }));
    for (const name of ['Add tags', 'Move', 'Reload agents']) await onScreen(name, page.getByRole('button', { name, exact: true }));
    // The last-seen filter is at the far right: scrolled to, it is usable.
    const seen = page.getByLabel('Filter by last seen');
    await seen.scrollIntoViewIfNeeded();
    await onScreen('last seen filter', seen);
    await seen.selectOption('never');
    await expect.poll(() => new URL(page.url()).searchParams.get('seen')).toBe('never');
    await expectNoSidewaysScroll(page);
    await screenshot(page, 'phone-devices-table');
    await expectNoErrorsAndClose();
  });
});
