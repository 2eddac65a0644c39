import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

async function record(deviceId: string, type: string, data: unknown) {
  const digest = crypto.createHash('sha256').update(JSON.stringify(data)).digest('hex');
  await suite.t.broker.services.inventory.recordItem(deviceId, { type, digest, data });
}

describe('device inventory tabs', () => {
  it('shows software, filters it, pages through it, and says which types were never reported', async () => {
    const device = await suite.t.addDevice({ name: 'edge-inv', tags: ['lab'] });
    const packages = Array.from({ length: 150 }, (_, i) => ({ name: `pkg-${String(i).padStart(3, '0')}`, version: `1.${i}`, arch: 'amd64' }));
    packages.push({ name: 'openssl', version: '3.0.11-1~deb12u2', arch: 'amd64' });
    await record(device, 'software', { pkg_manager: 'dpkg', items: packages });
    await record(device, 'ports', { items: [{ proto: 'tcp', socket: '0.0.0.0:22', proc_info: '/usr/sbin/sshd -D' }] });

    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}` });
    const tabs = page.locator('.inventory-tabs');
    await tabs.locator('[data-type="software"]').waitFor();
    expect(await tabs.locator('[data-type="software"] p').textContent()).toContain('151 items (dpkg)');
    expect(await tabs.locator('tbody tr').count()).toBe(100);
    await tabs.getByRole('button', { name: 'Next' }).click();
    await expect.poll(() => tabs.locator('tbody tr').count()).toBe(51);

    await tabs.getByLabel('Filter software').fill('openssl');
    await expect.poll(() => tabs.locator('tbody tr').count()).toBe(1);
    expect(await tabs.locator('tbody tr td').allTextContents()).toEqual(['openssl', '3.0.11-1~deb12u2', 'amd64']);
    await screenshot(page, 'device-inventory-software');

    await tabs.getByRole('tab', { name: 'Ports' }).click();
    await tabs.locator('[data-type="ports"]').waitFor();
    expect(await tabs.locator('tbody tr td').allTextContents()).toEqual(['tcp', '0.0.0.0:22', '/usr/sbin/sshd -D']);

    await tabs.getByRole('tab', { name: 'Containers' }).click();
    await tabs.getByText('Not reported by this device (docker containers).').waitFor();
    await tabs.getByText('Not reported by this device (podman containers).').waitFor();
    await expectNoErrorsAndClose();
  });

  it('is not shown to a user without inventory:read', async () => {
    const device = await suite.t.addDevice({ name: 'edge-hidden' });
    await record(device, 'software', { pkg_manager: 'dpkg', items: [{ name: 'openssl', version: '3.0.11', arch: 'amd64' }] });
    const reader = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader, at: `/devices/${device}` });
    await page.getByRole('heading', { level: 1, name: 'edge-hidden' }).waitFor();
    expect(await page.locator('.inventory-tabs').count()).toBe(0);
    expect((await suite.t.api('GET', `/api/v2/inventoryreport/${device}?item_type=software`, { token: reader.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });
});
