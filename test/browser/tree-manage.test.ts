import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

interface Node {
  node_id: string;
  title: string;
  parent_id: string | null;
  tags: string[];
}

async function node(id: string): Promise<{ status: number; body: Node }> {
  return suite.t.api<Node>('GET', `/api/v2/node/${id}`, { token: suite.t.adminToken });
}

describe('managing groups and tags from the device list', () => {
  it('as administrator: creates, renames and deletes groups, moves a device and sets tags; a group that holds something says so instead of offering Delete', async () => {
    await suite.t.addGroup({ id: 'hamburg', title: 'Hamburg' });
    const device = await suite.t.addDevice({ parent: 'hamburg', name: 'harbour-gw' });

    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/devices' });
    const tree = page.locator('ul.tree');
    await tree.getByText('harbour-gw').waitFor();

    // A sub-group of Hamburg.
    await tree.getByRole('button', { name: 'Manage Hamburg' }).click();
    const manager = page.getByRole('region', { name: 'Manage Hamburg' });
    await manager.getByLabel('New sub-group').fill('Altona');
    await manager.getByRole('button', { name: 'Create group' }).click();
    await page.getByText('Group Altona created.').waitFor();
    const altona = tree.locator('summary', { hasText: 'Altona' });
    await altona.waitFor();
    const altonaId = (await altona.locator('code.node-id').textContent())!;
    expect((await node(altonaId)).body).toMatchObject({ title: 'Altona', parent_id: 'hamburg' });

    // Rename it.
    await tree.getByRole('button', { name: 'Manage Altona' }).click();
    await page.getByRole('region', { name: 'Manage Altona' }).getByLabel('Name').fill('Altona-Nord');
    await page.getByRole('region', { name: 'Manage Altona' }).getByRole('button', { name: 'Rename' }).click();
    await page.getByText('Renamed to Altona-Nord.').waitFor();
    expect((await node(altonaId)).body.title).toBe('Altona-Nord');

    // Move the device into it and tag it.
    await tree.getByRole('button', { name: 'Manage harbour-gw' }).click();
    const deviceManager = page.getByRole('region', { name: 'Manage harbour-gw' });
    await deviceManager.getByLabel('Move to').selectOption(altonaId);
    await screenshot(page, 'tree-manage-device');
    await deviceManager.getByRole('button', { name: 'Move' }).click();
    await page.getByText(/Moved harbour-gw to .*Altona-Nord\./).waitFor();
    expect((await node(device)).body.parent_id).toBe(altonaId);

    await tree.getByRole('button', { name: 'Manage harbour-gw' }).click();
    await page.getByRole('region', { name: 'Manage harbour-gw' }).getByLabel('Tags').fill('edge, prod');
    await page.getByRole('region', { name: 'Manage harbour-gw' }).getByRole('button', { name: 'Save tags' }).click();
    await page.getByText('Tags of harbour-gw saved.').waitFor();
    expect((await node(device)).body.tags).toEqual(['edge', 'prod']);
    await expect.poll(() => tree.locator('.device-row', { hasText: 'harbour-gw' }).locator('.tag').allTextContents()).toEqual(['edge', 'prod']);

    // A group with a device in it is not offered for deletion: the panel says what it holds.
    await tree.getByRole('button', { name: 'Manage Altona-Nord' }).click();
    const groupManager = page.getByRole('region', { name: 'Manage Altona-Nord' });
    expect(await groupManager.getByTestId('group-holds').textContent()).toBe('This group holds 1 device: move or remove them to delete it.');
    expect(await groupManager.getByRole('button', { name: 'Delete group' }).count()).toBe(0);
    await screenshot(page, 'tree-manage-refused');

    // Moved back out, the group is empty and goes.
    await groupManager.getByRole('button', { name: 'Close' }).click();
    await tree.getByRole('button', { name: 'Manage harbour-gw' }).click();
    await page.getByRole('region', { name: 'Manage harbour-gw' }).getByLabel('Move to').selectOption('hamburg');
    await page.getByRole('region', { name: 'Manage harbour-gw' }).getByRole('button', { name: 'Move' }).click();
    await page.getByText(/Moved harbour-gw to/).waitFor();
    await tree.getByRole('button', { name: 'Manage Altona-Nord' }).click();
    await page.getByRole('region', { name: 'Manage Altona-Nord' }).getByRole('button', { name: 'Delete group' }).click();
    await page.getByRole('region', { name: 'Manage Altona-Nord' }).getByRole('button', { name: 'Yes, delete group' }).click();
    await page.getByText('Group Altona-Nord deleted.').waitFor();
    expect((await node(altonaId)).status).toBe(404);
    await expectNoErrorsAndClose();
  });

  for (const viewport of [undefined, { width: 390, height: 844 }]) {
    it(`says in plain words why a group that filled up meanwhile was not deleted${viewport ? ' (phone)' : ''}`, async () => {
      const id = viewport ? 'lager-p' : 'lager-d';
      await suite.t.addGroup({ id, title: `Lager ${id}` });
      const { page, expectNoErrorsAndClose } = await suite.open({ viewport, at: '/devices' });
      const tree = page.locator('ul.tree');
      await tree.getByRole('button', { name: `Manage Lager ${id}` }).click();
      const manager = page.getByRole('region', { name: `Manage Lager ${id}` });
      await manager.getByRole('button', { name: 'Delete group' }).click();
      // Someone else puts a device and a group into it before the delete is confirmed.
      await suite.t.addDevice({ parent: id, name: `late-${id}` });
      await suite.t.addGroup({ id: `${id}-sub`, parent: id });
      await manager.getByRole('button', { name: 'Yes, delete group' }).click();
      const alert = manager.getByRole('alert');
      await alert.waitFor();
      expect(await alert.textContent()).toBe(`Not changedGroup "Lager ${id}" holds 1 device and 1 group: move or remove them before deleting it.`);
      expect((await node(id)).status).toBe(200);
      await screenshot(page, `tree-manage-not-empty${viewport ? '-phone' : ''}`);
      await expectNoErrorsAndClose();
    });
  }

  it('as a user restricted to one group: acts inside it, and is offered no change outside it (tree, table and device page)', async () => {
    await suite.t.addGroup({ id: 'koeln', title: 'Koeln' });
    await suite.t.addGroup({ id: 'bonn', title: 'Bonn', tags: ['shared'] });
    const inside = await suite.t.addDevice({ parent: 'koeln', name: 'dom-gw' });
    const outside = await suite.t.addDevice({ parent: 'bonn', name: 'rhein-gw' });
    // They read both groups (Bonn through its tag) but manage Koeln only, and the tag site-a.
    const user = await suite.t.userWith([
      { permission: 'device:read', resources: ['node:koeln', 'tag:shared'] },
      { permission: 'device:manage', resources: ['node:koeln', 'tag:site-a'] },
    ]);

    const { page, expectNoErrorsAndClose } = await suite.open({ as: user, at: '/devices' });
    const tree = page.locator('ul.tree');
    await tree.getByText('dom-gw').waitFor();
    await tree.getByText('rhein-gw').waitFor();

    // Manage is offered on Koeln and its device only: not on the top of the tree, Bonn or Bonn's device.
    const manageButtons = await tree.getByRole('button', { name: /^Manage / }).allTextContents();
    expect(manageButtons).toHaveLength(2);
    expect(await tree.getByRole('button', { name: 'Manage Koeln' }).count()).toBe(1);
    expect(await tree.getByRole('button', { name: 'Manage dom-gw' }).count()).toBe(1);
    for (const name of ['Manage Bonn', 'Manage rhein-gw', 'Manage All devices']) expect(await tree.getByRole('button', { name }).count(), name).toBe(0);
    expect(await tree.locator('.device-row', { hasText: 'dom-gw' }).getAttribute('draggable')).toBe('true');
    expect(await tree.locator('.device-row', { hasText: 'rhein-gw' }).getAttribute('draggable')).toBe('false');

    // Inside the group: a sub-group and a tag of their own tag resources.
    await tree.getByRole('button', { name: 'Manage Koeln' }).click();
    await page.getByRole('region', { name: 'Manage Koeln' }).getByLabel('New sub-group').fill('Deutz');
    await page.getByRole('region', { name: 'Manage Koeln' }).getByRole('button', { name: 'Create group' }).click();
    await page.getByText('Group Deutz created.').waitFor();

    await tree.getByRole('button', { name: 'Manage dom-gw' }).click();
    const manager = page.getByRole('region', { name: 'Manage dom-gw' });
    // Only groups they manage are move targets.
    const targets = await manager
      .getByLabel('Move to')
      .locator('option')
      .evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value).filter(Boolean));
    expect(targets.sort()).toEqual([(await tree.locator('summary', { hasText: 'Deutz' }).locator('code.node-id').textContent())!, 'koeln'].sort());
    expect(await manager.getByText('You may add or remove only these tags: site-a.').count()).toBe(1);
    await manager.getByLabel('Tags').fill('site-a');
    await manager.getByRole('button', { name: 'Save tags' }).click();
    await page.getByText('Tags of dom-gw saved.').waitFor();
    expect((await node(inside)).body.tags).toEqual(['site-a']);

    // A tag outside their tag resources is not sent: Save is off and the panel says why.
    await tree.getByRole('button', { name: 'Manage dom-gw' }).click();
    const again = page.getByRole('region', { name: 'Manage dom-gw' });
    await again.getByLabel('Tags').fill('site-a, other');
    await again.getByText('Outside your device:manage resources: other.').waitFor();
    expect(await again.getByRole('button', { name: 'Save tags' }).isDisabled()).toBe(true);
    await screenshot(page, 'tree-manage-restricted');
    await again.getByRole('button', { name: 'Close' }).click();

    // The table: tagging and moving are off while a device outside their grant is selected.
    await page.getByRole('button', { name: 'Show as table' }).click();
    await page.locator('table.devices').waitFor();
    const bulk = page.getByRole('group', { name: 'Actions on the selected devices' });
    await page.getByLabel(`Select rhein-gw ${outside.slice(0, 8)}`).check();
    await page.getByLabel(`Select dom-gw ${inside.slice(0, 8)}`).check();
    await bulk.getByLabel('Tags to add').fill('site-a');
    await page.getByText(/Tagging and moving are off: 1 device selected is outside your device:manage resources \(rhein-gw\)/).waitFor();
    expect(await bulk.getByRole('button', { name: 'Add tags' }).isDisabled()).toBe(true);
    const tableTargets = await bulk
      .getByLabel('Move selected to')
      .locator('option')
      .evaluateAll((os) => os.map((o) => (o as HTMLOptionElement).value).filter(Boolean));
    expect(tableTargets).not.toContain('root');
    expect(tableTargets).not.toContain('bonn');
    await screenshot(page, 'devices-table-restricted');
    await page.getByLabel(`Select rhein-gw ${outside.slice(0, 8)}`).uncheck();
    expect(await bulk.getByRole('button', { name: 'Add tags' }).isDisabled()).toBe(false);

    // The device page offers attribute editing and removal on their device only.
    await page.goto(`/devices/${outside}`);
    await page.locator('.device-meta', { hasText: 'Bonn (bonn)' }).waitFor(); // the node (and its hint) has loaded
    expect(await page.getByRole('link', { name: 'Edit attributes' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Remove device' }).count()).toBe(0);
    // Its editor, reached by its address, says why instead of offering a form the broker refuses.
    await page.goto(`/devices/${outside}/attributes`);
    await page.getByText('This device is outside your device:manage resources').waitFor();
    expect(await page.getByRole('button', { name: 'Save' }).count()).toBe(0);
    await page.goto(`/devices/${inside}`);
    await page.getByRole('link', { name: 'Edit attributes' }).waitFor();
    expect(await page.getByRole('button', { name: 'Remove device' }).count()).toBe(1);
    await expectNoErrorsAndClose();
  });

  it('moves a device by dragging it onto a group', async () => {
    await suite.t.addGroup({ id: 'north', title: 'North' });
    await suite.t.addGroup({ id: 'south', title: 'South' });
    const device = await suite.t.addDevice({ parent: 'north', name: 'drag-me' });
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/devices' });
    const tree = page.locator('ul.tree');
    const row = tree.locator('.device-row', { hasText: 'drag-me' });
    await row.waitFor();
    await row.dragTo(tree.locator('summary', { hasText: 'South' }));
    await page.getByText(/Moved to .*South\./).waitFor();
    expect((await node(device)).body.parent_id).toBe('south');
    await expectNoErrorsAndClose();
  });

  it('offers no changes to a user who may only read devices', async () => {
    await suite.t.addGroup({ id: 'readonly', title: 'Readonly' });
    await suite.t.addDevice({ parent: 'readonly', name: 'look-only' });
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user, at: '/devices' });
    const tree = page.locator('ul.tree');
    await tree.getByText('look-only').waitFor();
    expect(await tree.getByRole('button', { name: /^Manage / }).count()).toBe(0);
    expect(await tree.locator('.device-row[draggable="true"]').count()).toBe(0);
    await page.getByRole('button', { name: 'Show as table' }).click();
    await page.locator('table.devices').waitFor();
    expect(await page.getByRole('group', { name: 'Actions on the selected devices' }).count()).toBe(0);
    expect(await page.locator('table.devices input[type="checkbox"]').count()).toBe(0);
    await expectNoErrorsAndClose();
  });
});
