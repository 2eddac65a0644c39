import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

describe('live device status', () => {
  it('shows a device going online and offline without a refresh, in the tree and in the table', async () => {
    const device = await suite.t.addDevice({ name: 'live-gw' });
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/devices' });
    const row = page.locator('ul.tree .device-row', { hasText: 'live-gw' });
    await row.waitFor();
    expect(await row.locator('.status').textContent()).toContain('offline');
    const events = suite.t.broker.services.events;
    await expect.poll(() => events.size).toBe(1);

    const hub = suite.t.broker.services.agents;
    hub.emit('connected', device);
    await expect.poll(() => row.locator('.status').textContent()).toContain('online');
    expect(await row.locator('.heard').textContent()).toMatch(/^heard \d+ s ago$/);
    await screenshot(page, 'live-status-online');

    await page.getByRole('button', { name: 'Show as table' }).click();
    const tableRow = page.locator(`table.devices tr[data-device="${device}"]`);
    await expect.poll(() => tableRow.locator('.status').textContent()).toContain('online');
    hub.emit('disconnected', device);
    await expect.poll(() => tableRow.locator('.status').textContent()).toContain('offline');
    await expectNoErrorsAndClose();
    // Closing the page ends its stream on the broker.
    await expect.poll(() => events.size).toBe(0);
  });
});
