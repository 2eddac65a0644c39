/**
 * The audit reads API changes as sentences, with the recorded JSON one click away, on a desktop
 * and on a phone.
 */
import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

for (const viewport of [undefined, { width: 390, height: 844 }]) {
  describe(`audit sentences ${viewport ? 'on a phone' : 'on a desktop'}`, () => {
    it('shows a group move and a device rename as sentences, the JSON behind a disclosure', async () => {
      const suffix = viewport ? 'p' : 'd';
      const t = suite.t;
      await t.addGroup({ id: `site-2${suffix}`, title: `site-2${suffix}` });
      await t.addGroup({ id: `lab${suffix}`, title: `lab${suffix}` });
      const device = await t.addDevice({ name: `x${suffix}` });
      const tree = (changes: unknown[]) => t.api('PUT', '/api/v2/grouptree', { token: t.adminToken, body: { changes } });
      expect((await tree([{ action: 'move', data: { node_id: `lab${suffix}`, parent_id: `site-2${suffix}` } }])).status).toBeLessThan(300);
      expect((await tree([{ action: 'rename', data: { node_id: device, title: `y${suffix}` } }])).status).toBeLessThan(300);

      const { page, expectNoErrorsAndClose } = await suite.open({ viewport, at: `/audit?action=${encodeURIComponent('PUT /api/v2/grouptree')}` });
      const sentences = page.getByTestId('audit-sentence');
      await expect
        .poll(() => sentences.allTextContents())
        .toEqual(expect.arrayContaining([`Renamed device x${suffix} to y${suffix}`, `Moved group lab${suffix} under site-2${suffix}`]));

      const row = page.locator('table.audit-table tbody tr', { hasText: `Moved group lab${suffix}` });
      const json = row.locator('td.audit-what pre');
      expect(await json.isVisible()).toBe(false);
      await row.getByText('JSON', { exact: true }).click();
      await expect.poll(() => json.isVisible()).toBe(true);
      const recorded = JSON.parse((await json.textContent())!) as { event: string; options: { after: Record<string, { parent_id: string }> } };
      expect(recorded.event).toBe('device.tree.change');
      expect(recorded.options.after[`lab${suffix}`].parent_id).toBe(`site-2${suffix}`);
      await screenshot(page, `audit-sentences${viewport ? '-phone' : ''}`);
      await expectNoErrorsAndClose();
    });
  });
}
