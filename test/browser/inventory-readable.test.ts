/**
 * The device page's inventory reads in words, units and dates ("Memory 3.8 GiB", "Last boot
 * 2026-11-20 10:02"), never raw keys and epoch numbers; on a desktop and a phone.
 */
import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();
const two = (n: number) => String(n).padStart(2, '0');
/** As the browser shows a time (its zone is this machine's). */
const shown = (d: Date) => `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}`;

for (const viewport of [undefined, { width: 390, height: 844 }]) {
  describe(`inventory in words ${viewport ? 'on a phone' : 'on a desktop'}`, () => {
    it('names each field with its unit or date, and shows no raw key or epoch number', async () => {
      const device = await suite.t.addDevice({ name: `inv-${viewport ? 'p' : 'd'}` });
      const collected = new Date(Date.UTC(2026, 10, 25, 12, 0, 0));
      const boot = new Date(Date.UTC(2026, 10, 20, 10, 2, 0));
      await suite.t.broker.services.inventory.record(device, {
        hostname: 'edge-host',
        os: { name: 'Debian GNU/Linux', version: '12', pretty_name: 'Debian GNU/Linux 12 (bookworm)' },
        kernel: '6.1.0-18-amd64',
        arch: 'x86_64',
        memory: { total: 4_083_023_872, free: 1_288_490_189 },
        uptime: (collected.getTime() - boot.getTime()) / 1000,
        agent_uptime: 3600,
        agent_version: '1.4.0',
        collected_at: collected.toISOString(),
        // Another agent's fields.
        boot_time: boot.getTime() / 1000,
        swap_total: 2 * 1024 ** 3,
      });
      const { page, expectNoErrorsAndClose } = await suite.open({ viewport, at: `/devices/${device}` });
      const summary = page.getByTestId('inventory-summary');
      await summary.waitFor();
      const pairs = await summary.evaluate((dl) => {
        const out: Record<string, string> = {};
        for (const dt of dl.querySelectorAll('dt')) out[dt.textContent ?? ''] = dt.nextElementSibling?.textContent ?? '';
        return out;
      });
      expect(pairs).toMatchObject({
        'Host name': 'edge-host',
        Memory: '3.8 GiB (1.2 GiB free)',
        'Last boot': shown(boot),
        'Up for': '5 d 1 h',
        'Agent running for': '1 h 0 min',
        Collected: shown(collected),
        'Boot time': shown(boot),
        'Swap total': '2.0 GiB',
      });
      const text = (await page.getByRole('region', { name: 'Inventory' }).textContent()) ?? '';
      expect(text).not.toMatch(/agent_uptime|collected_at|boot_time|swap_total|\b\d{10}\b|4083023872/);
      await screenshot(page, `device-inventory-words${viewport ? '-phone' : ''}`);
      if (viewport) expect(await page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth)).toBeLessThanOrEqual(0);
      await expectNoErrorsAndClose();
    });
  });
}
