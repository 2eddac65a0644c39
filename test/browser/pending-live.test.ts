/**
 * Pending hosts appear live: a device enrolling with a manual key shows on the open Pending hosts
 * page, in the navigation's count and on the dashboard without a reload; approved or rejected
 * elsewhere, it goes. A user who may not list pending hosts sees no count.
 */
import { describe, expect, it } from 'vitest';
import { enrolDevice } from '../support/agent.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

async function manualKey(): Promise<string> {
  const created = await suite.t.api<Record<string, unknown>>('POST', '/api/v2/bootstrapkey', { token: suite.t.adminToken, body: { auto_accept: false } });
  return Object.keys(created.body)[0];
}

describe('pending hosts, live', () => {
  it('shows a host that enrols while the page is open, with the count in the navigation and on the dashboard, and drops it when approved elsewhere', async () => {
    const key = await manualKey();
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/pending' });
    await page.getByText('No device is waiting for approval.').waitFor();
    expect(await page.getByTestId('nav-pending-count').count()).toBe(0);

    const first = await enrolDevice(suite.t, key, undefined, 'live-one');
    expect(first.answer.body).toMatchObject({ state: 'pending' });
    const row = page.locator('tbody tr', { hasText: 'live-one' });
    await row.waitFor({ timeout: 20_000 });
    await expect.poll(() => page.getByTestId('nav-pending-count').textContent(), { timeout: 20_000 }).toBe('1');

    await enrolDevice(suite.t, key, undefined, 'live-two');
    await page.locator('tbody tr', { hasText: 'live-two' }).waitFor({ timeout: 20_000 });
    await expect.poll(() => page.getByTestId('nav-pending-count').textContent(), { timeout: 20_000 }).toBe('2');
    await screenshot(page, 'pending-live');

    // Approved through the API (another operator): gone from the page and the count.
    expect((await suite.t.api('POST', '/api/v2/pendinghost', { token: suite.t.adminToken, body: { node_id: first.device.id } })).status).toBe(200);
    await expect.poll(() => row.count(), { timeout: 20_000 }).toBe(0);
    await expect.poll(() => page.getByTestId('nav-pending-count').textContent(), { timeout: 20_000 }).toBe('1');

    // The dashboard counts them too, live.
    await page.getByRole('link', { name: 'Dashboard' }).click();
    const card = page.getByTestId('dashboard-pending-count');
    await expect.poll(() => card.textContent(), { timeout: 20_000 }).toContain('1 waiting for approval');
    await enrolDevice(suite.t, key, undefined, 'live-three');
    await expect.poll(() => card.textContent(), { timeout: 20_000 }).toContain('2 waiting for approval');
    await card.click();
    await page.locator('tbody tr', { hasText: 'live-three' }).waitFor();
    await expectNoErrorsAndClose();
  });

  it('shows the count on the phone’s menu button, and the host in the list once open', async () => {
    const key = await manualKey();
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 }, touch: true, at: '/dashboard' });
    const before = Number(await page.getByTestId('menu-pending-count').textContent());
    await enrolDevice(suite.t, key, undefined, 'phone-host');
    await expect.poll(async () => Number(await page.getByTestId('menu-pending-count').textContent()), { timeout: 20_000 }).toBe(before + 1);
    await page.getByRole('button', { name: /Menu/ }).click();
    await page.getByRole('link', { name: /Pending hosts/ }).click();
    await page
      .locator('tbody tr', { hasText: 'phone-host' })
      .or(page.locator('li, .card', { hasText: 'phone-host' }))
      .first()
      .waitFor();
    expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
    await screenshot(page, 'phone-pending-live');
    await expectNoErrorsAndClose();
  });

  it('shows no count to a user who may not list pending hosts', async () => {
    const key = await manualKey();
    const reader = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader, at: '/devices' });
    await page.locator('main h1').waitFor();
    await enrolDevice(suite.t, key, undefined, 'hidden-host');
    expect(await page.getByTestId('nav-pending-count').count()).toBe(0);
    expect(await page.getByRole('link', { name: /Pending hosts/ }).count()).toBe(0);
    await expectNoErrorsAndClose();
  });
});
