/**
 * Fewer clicks: the Manage panel stays open between changes, a table selection survives an action,
 * and a success notice goes when the next action starts or after a while (desktop and phone).
 */
import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();
/** The console's NOTICE_MS, and some. */
const PAST_NOTICE_MS = 9000;

async function node(id: string): Promise<{ parent_id: string; tags: string[]; title: string }> {
  return (await suite.t.api<{ parent_id: string; tags: string[]; title: string }>('GET', `/api/v2/node/${id}`, { token: suite.t.adminToken })).body;
}

for (const viewport of [undefined, { width: 390, height: 844 }]) {
  const phone = viewport ? ' (phone)' : '';
  const s = viewport ? 'p' : 'd';

  describe(`one change after another${phone}`, () => {
    it('keeps the Manage panel open between changes; each notice replaces the last and goes after a while', async () => {
      await suite.t.addGroup({ id: `werk-${s}`, title: `Werk ${s}` });
      const { page, expectNoErrorsAndClose } = await suite.open({ viewport });
      await page.clock.install();
      await page.goto('/devices');
      const tree = page.locator('ul.tree');
      await tree.getByRole('button', { name: `Manage Werk ${s}` }).click();
      const manager = page.getByRole('region', { name: `Manage Werk ${s}` });

      await manager.getByLabel('New sub-group').fill(`Halle ${s}`);
      await manager.getByRole('button', { name: 'Create group' }).click();
      await page.getByText(`Group Halle ${s} created.`).waitFor();
      // Still open, ready for the next change, its sub-group field emptied.
      expect(await manager.isVisible()).toBe(true);
      expect(await manager.getByLabel('New sub-group').inputValue()).toBe('');

      await manager.getByLabel('Name').fill(`Werk ${s} Nord`);
      await manager.getByRole('button', { name: 'Rename' }).click();
      await page.getByText(`Renamed to Werk ${s} Nord.`).waitFor();
      // The last change's notice replaced the one before it.
      expect(await page.getByText(`Group Halle ${s} created.`).count()).toBe(0);
      expect((await node(`werk-${s}`)).title).toBe(`Werk ${s} Nord`);
      // The panel follows the node as reloaded (its new name).
      const renamed = page.getByRole('region', { name: `Manage Werk ${s} Nord` });
      await renamed.waitFor();
      await renamed.getByLabel('Tags').fill('plant');
      await renamed.getByRole('button', { name: 'Save tags' }).click();
      await page.getByText(`Tags of Werk ${s} Nord saved.`).waitFor();
      expect((await node(`werk-${s}`)).tags).toEqual(['plant']);
      await screenshot(page, `manage-stays-open${viewport ? '-phone' : ''}`);

      // After a while the notice goes by itself; the panel stays.
      await page.clock.fastForward(PAST_NOTICE_MS);
      await expect.poll(() => page.getByText(`Tags of Werk ${s} Nord saved.`).count()).toBe(0);
      expect(await renamed.isVisible()).toBe(true);
      await expectNoErrorsAndClose();
    });

    it('keeps the table selection after an action, so the next one needs no new picking', async () => {
      await suite.t.addGroup({ id: `bay-${s}`, title: `Bay ${s}` });
      await suite.t.addGroup({ id: `dock-${s}`, title: `Dock ${s}` });
      const one = await suite.t.addDevice({ parent: `bay-${s}`, name: `crane${s}-1` });
      const two = await suite.t.addDevice({ parent: `bay-${s}`, name: `crane${s}-2` });
      const { page, expectNoErrorsAndClose } = await suite.open({ viewport, at: `/devices?view=table&q=crane${s}` });
      const table = page.locator('table.devices');
      await expect.poll(() => table.locator('tbody tr').count()).toBe(2);
      await page.getByLabel('Select all shown').check();
      await page.getByLabel('Tags to add').fill('lifted');
      await page.getByRole('button', { name: 'Add tags' }).click();
      await page.getByText('Tagged 2 devices.').waitFor();

      const bulk = page.getByRole('group', { name: 'Actions on the selected devices' });
      expect(await bulk.getByText('2 selected').count()).toBe(1);
      await page.getByLabel('Move selected to').selectOption(`dock-${s}`);
      await page.getByRole('button', { name: 'Move', exact: true }).click();
      await page.getByText('Moved 2 devices.').waitFor();
      expect(await page.getByText('Tagged 2 devices.').count()).toBe(0);
      for (const id of [one, two]) expect(await node(id)).toMatchObject({ parent_id: `dock-${s}`, tags: ['lifted'] });

      await page.getByRole('button', { name: 'Clear selection' }).click();
      expect(await bulk.getByText('0 selected').count()).toBe(1);
      await expectNoErrorsAndClose();
    });
  });
}
