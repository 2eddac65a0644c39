/**
 * "Seen" of an online device is its last heartbeat, in the tree, the table and on the device page:
 * a heartbeat moves it forward while the device stays online. The page's own clock is driven by the
 * test (Playwright's fake timers), so its periodic re-read happens when the test says, not after a wait.
 */
import { describe, expect, it } from 'vitest';
import type { Locator } from 'playwright-core';
import { connectDevice, enrolDevice, type FakeConnection } from '../support/agent.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

/** The devices page reads the tree again this often, the device page its status (see the screens). */
const TREE_REFRESH_MS = 30_000;
const STATUS_REFRESH_MS = 15_000;

/** A heartbeat from the agent, after the clock has passed a whole second since `iso` (the tree has seconds). */
async function heartbeatAfter(conn: FakeConnection, iso: string): Promise<void> {
  const next = (Math.floor(Date.parse(iso) / 1000) + 1) * 1000;
  await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now() + 20)));
  await new Promise<void>((resolve) => {
    conn.ws.once('pong', () => resolve());
    conn.ws.ping();
  });
}

const heardAt = async (l: Locator) => (await l.locator('.heard').getAttribute('data-at')) ?? '';

describe('last heard', () => {
  it('shows "online · heard … ago" and moves it forward on each heartbeat, in the tree, the table and the device page', async () => {
    const created = await suite.t.api<Record<string, unknown>>('POST', '/api/v2/bootstrapkey', { token: suite.t.adminToken, body: { auto_accept: true } });
    const { device } = await enrolDevice(suite.t, Object.keys(created.body)[0]);
    const conn = await connectDevice(suite.t.url, device);
    expect(conn.welcome?.device_id).toBe(device.id);

    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.clock.install();
    await page.goto('/devices');
    const row = page.locator('ul.tree .device-row', { has: page.locator(`code[title="${device.id}"]`) });
    await row.locator('.heard').waitFor();
    expect(await row.locator('.status').textContent()).toContain('online');
    expect(await row.locator('.heard').textContent()).toMatch(/^heard \d+ s ago$/);
    const before = await heardAt(row);
    await screenshot(page, 'last-heard-tree');

    // A heartbeat; the next periodic read shows it, the device still online.
    await heartbeatAfter(conn, before);
    await page.clock.runFor(TREE_REFRESH_MS);
    await expect.poll(() => heardAt(row)).not.toBe(before);
    const later = await heardAt(row);
    expect(Date.parse(later)).toBeGreaterThan(Date.parse(before));
    expect(await row.locator('.status').textContent()).toContain('online');

    // The table's last-seen column says the same.
    await page.getByRole('button', { name: 'Show as table' }).click();
    const cell = page.locator(`table.devices tr[data-device="${device.id}"] td.last-contact`);
    await expect.poll(() => heardAt(cell)).toBe(later);
    await heartbeatAfter(conn, later);
    await page.clock.runFor(TREE_REFRESH_MS);
    await expect.poll(async () => Date.parse(await heardAt(cell))).toBeGreaterThan(Date.parse(later));
    await screenshot(page, 'last-heard-table');

    // The device page: its status is read again, to the millisecond.
    await page.goto(`/devices/${device.id}`);
    const meta = page.locator('.device-meta');
    await meta.locator('.heard').waitFor();
    const onPage = await heardAt(meta);
    await heartbeatAfter(conn, onPage);
    await page.clock.runFor(STATUS_REFRESH_MS);
    await expect.poll(async () => Date.parse(await heardAt(meta))).toBeGreaterThan(Date.parse(onPage));
    expect(await meta.locator('.status').textContent()).toContain('online');
    await screenshot(page, 'last-heard-device');

    // Offline, it says when it was last seen instead.
    conn.ws.close();
    await page.clock.runFor(STATUS_REFRESH_MS);
    await expect.poll(() => meta.locator('.status').textContent()).toContain('offline');
    await meta.locator('.seen').waitFor();
    expect(await meta.locator('.heard').count()).toBe(0);
    await expectNoErrorsAndClose();
  });
});
