import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

async function node(id: string): Promise<{ parent_id: string; tags: string[] }> {
  return (await suite.t.api<{ parent_id: string; tags: string[] }>('GET', `/api/v2/node/${id}`, { token: suite.t.adminToken })).body;
}

describe('devices as a table', () => {
  it('tells same-named devices apart, sorts, keeps filters in the URL, and tags, moves and reloads a selection', async () => {
    await suite.t.addGroup({ id: 'depot', title: 'Depot', tags: ['site'] });
    await suite.t.addGroup({ id: 'yard', title: 'Yard' });
    const a = await suite.t.addDevice({ parent: 'depot', name: 'twin' });
    const b = await suite.t.addDevice({ parent: 'yard', name: 'twin' });
    const c = await suite.t.addDevice({ parent: 'depot', name: 'alpha' });
    await suite.t.broker.services.inventory.record(c, {
      hostname: 'alpha-host',
      os: { name: 'Debian GNU/Linux', version: '12' },
      network: [{ name: 'eth0', mac: '02:00:00:00:00:01', addresses: [{ address: '10.9.8.7', family: 'IPv4', cidr: '10.9.8.7/24' }] }],
      agent_version: '7.7.7',
    });

    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/devices' });
    await page.locator('ul.tree').getByText('alpha').waitFor();
    await page.getByRole('button', { name: 'Show as table' }).click();
    const table = page.locator('table.devices');
    await table.waitFor();
    expect(new URL(page.url()).searchParams.get('view')).toBe('table');

    // The two "twin" rows carry different short ids, marked as needed to tell them apart.
    const twins = await table.locator('tr', { hasText: 'twin' }).locator('code.short-id.same-name').allTextContents();
    expect(twins.sort()).toEqual([a.slice(0, 8), b.slice(0, 8)].sort());
    expect(await table.locator('tr', { hasText: 'alpha' }).locator('code.same-name').count()).toBe(0);

    // Sorted by name at first, then the other way round; then by group-inherited tags.
    const names = () => table.locator('tbody tr td:nth-child(2) a').allTextContents();
    await expect.poll(names).toEqual(['alpha', 'twin', 'twin']);
    await table.getByRole('button', { name: /^Name/ }).click();
    await expect.poll(names).toEqual(['twin', 'twin', 'alpha']);
    expect(new URL(page.url()).searchParams.get('dir')).toBe('desc');

    // The search reaches the inventory columns: OS, IP and agent version; it is kept in the URL too.
    for (const text of ['debian', '10.9.8.7', '7.7.7']) {
      await page.getByLabel('Search').fill(text);
      await expect.poll(names, { message: text }).toEqual(['alpha']);
    }
    expect(new URL(page.url()).searchParams.get('q')).toBe('7.7.7');
    await page.getByText('1 of 3 match “7.7.7”').waitFor();
    await page.getByLabel('Search').fill('');
    await expect.poll(names).toEqual(['twin', 'twin', 'alpha']);

    // A filter by an inherited tag is kept in the URL and survives a reload of the page.
    await page.getByLabel('Tag', { exact: true }).selectOption('site');
    await expect.poll(() => table.locator('tbody tr').count()).toBe(2);
    expect(new URL(page.url()).searchParams.get('tag')).toBe('site');
    await page.reload();
    await page.locator('table.devices').waitFor();
    await expect.poll(() => table.locator('tbody tr').count()).toBe(2);
    expect(await page.getByLabel('Tag', { exact: true }).inputValue()).toBe('site');

    // Bulk: tag and move the two Depot devices.
    await page.getByLabel('Select all shown').check();
    await page.getByLabel('Tags to add').fill('bulk');
    await page.getByRole('button', { name: 'Add tags' }).click();
    await page.getByText('Tagged 2 devices.').waitFor();
    expect((await node(a)).tags).toEqual(['bulk']);
    expect((await node(c)).tags).toEqual(['bulk']);
    expect((await node(b)).tags).toEqual([]);
    // The selection survives the action until it is cleared.
    expect(await page.getByRole('group', { name: 'Actions on the selected devices' }).getByText('2 selected').count()).toBe(1);
    await page.getByRole('button', { name: 'Clear selection' }).click();

    await page.getByLabel('Tag', { exact: true }).selectOption('');
    await table.getByLabel(`Select alpha ${c.slice(0, 8)}`).check();
    await page.getByLabel('Move selected to').selectOption('yard');
    await page.getByRole('button', { name: 'Move', exact: true }).click();
    await page.getByText('Moved 1 device.').waitFor();
    expect((await node(c)).parent_id).toBe('yard');
    expect((await node(a)).parent_id).toBe('depot');
    await page.getByRole('button', { name: 'Clear selection' }).click();

    // Reload asks first; offline agents cannot reload, and the API's reason is shown.
    await table.getByLabel(`Select twin ${b.slice(0, 8)}`).check();
    await page.getByRole('button', { name: 'Reload agents' }).click();
    await page.getByRole('button', { name: 'Yes, reload' }).click();
    const alert = page.locator('.devices-table').getByRole('alert');
    await alert.waitFor();
    expect(await alert.textContent()).toMatch(/Not reloaded: twin/);
    await screenshot(page, 'devices-table');
    await expectNoErrorsAndClose();
  });

  it('filters by OS, IP, agent version and last seen, per column, kept in the URL', async () => {
    await suite.t.addGroup({ id: 'cols', title: 'Columns', tags: ['cols'] });
    const deb = await suite.t.addDevice({ parent: 'cols', name: 'col-debian' });
    const ubu = await suite.t.addDevice({ parent: 'cols', name: 'col-ubuntu' });
    const old = await suite.t.addDevice({ parent: 'cols', name: 'col-old' });
    const inventory = suite.t.broker.services.inventory;
    await inventory.record(deb, {
      os: { name: 'Debian GNU/Linux', version: '12' },
      network: [{ name: 'eth0', mac: '02:00:00:00:00:11', addresses: [{ address: '10.1.1.1', family: 'IPv4', cidr: '10.1.1.1/24' }] }],
      agent_version: '1.2.3',
    });
    await inventory.record(ubu, {
      os: { name: 'Ubuntu', version: '24.04' },
      network: [{ name: 'eth0', mac: '02:00:00:00:00:12', addresses: [{ address: '192.168.7.5', family: 'IPv4', cidr: '192.168.7.5/24' }] }],
      agent_version: '2.0.0',
    });
    const db = suite.t.broker.services.store.db;
    const now = new Date().toISOString();
    await db.updateTable('devices').set({ last_seen: now }).where('device_id', 'in', [deb, ubu]).execute();
    await db
      .updateTable('devices')
      .set({ last_seen: new Date(Date.now() - 3 * 24 * 3600_000).toISOString() })
      .where('device_id', '=', old)
      .execute();

    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/devices?view=table&tag=cols' });
    const table = page.locator('table.devices');
    const names = () => table.locator('tbody tr td:nth-child(2) a').allTextContents();
    await expect.poll(names).toEqual(['col-debian', 'col-old', 'col-ubuntu']);

    const cases: [string, string, string, string[]][] = [
      ['Filter by OS', 'os', 'ubuntu', ['col-ubuntu']],
      ['Filter by IP', 'ip', '10.1.', ['col-debian']],
      ['Filter by agent version', 'agent', '2.0', ['col-ubuntu']],
    ];
    for (const [label, param, value, expected] of cases) {
      await page.getByLabel(label).fill(value);
      await expect.poll(names, { message: label }).toEqual(expected);
      expect(new URL(page.url()).searchParams.get(param)).toBe(value);
      await page.getByLabel(label).fill('');
      await expect.poll(names).toEqual(['col-debian', 'col-old', 'col-ubuntu']);
      expect(new URL(page.url()).searchParams.get(param)).toBeNull();
    }

    // Not seen for more than a day: the device last heard from three days ago.
    await page.getByLabel('Filter by last seen').selectOption('over1d');
    await expect.poll(names).toEqual(['col-old']);
    expect(new URL(page.url()).searchParams.get('seen')).toBe('over1d');
    await page.getByLabel('Filter by last seen').selectOption('within1h');
    await expect.poll(names).toEqual(['col-debian', 'col-ubuntu']);

    // Filters combine, survive a reload of the page, and sorting keeps them.
    await page.getByLabel('Filter by OS').fill('debian');
    await expect.poll(names).toEqual(['col-debian']);
    await page.getByText('1 of 3 match').waitFor();
    await screenshot(page, 'devices-table-column-filters');
    await page.reload();
    await expect.poll(names).toEqual(['col-debian']);
    expect(await page.getByLabel('Filter by OS').inputValue()).toBe('debian');
    expect(await page.getByLabel('Filter by last seen').inputValue()).toBe('within1h');
    await table.getByRole('button', { name: /^Name/ }).click();
    await expect.poll(() => new URL(page.url()).searchParams.get('dir')).toBe('desc');
    expect(new URL(page.url()).searchParams.get('os')).toBe('debian');
    expect(await names()).toEqual(['col-debian']);
    await page.getByRole('button', { name: 'Clear column filters' }).click();
    await expect.poll(names).toEqual(['col-ubuntu', 'col-old', 'col-debian']);
    expect([...new URL(page.url()).searchParams.keys()].sort()).toEqual(['dir', 'sort', 'tag', 'view']);
    await expectNoErrorsAndClose();
  });
});
