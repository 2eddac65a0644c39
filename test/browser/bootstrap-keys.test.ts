import { describe, expect, it } from 'vitest';
import { enrolDevice } from '../support/agent.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

type KeyMap = Record<string, { auto_accept: boolean; devices?: number }>;
const keys = async () => (await suite.t.api<KeyMap>('GET', '/api/v2/bootstrapkeylist', { token: suite.t.adminToken })).body;

describe('bootstrap keys screen', () => {
  it('asks before an auto-accepting key, shows the install command and counts enrolled devices', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.goto('/bootstrap-keys');
    await page.getByRole('heading', { level: 1, name: 'Bootstrap keys' }).waitFor();

    await page.getByLabel('Accept devices automatically').check();
    await page.getByRole('button', { name: 'Create key' }).click();
    const confirm = page.getByRole('group', { name: 'Confirm automatic accept' });
    await confirm.waitFor();
    expect(Object.keys(await keys())).toHaveLength(0);
    await confirm.getByRole('button', { name: 'Cancel' }).click();
    expect(Object.keys(await keys())).toHaveLength(0);

    await page.getByRole('button', { name: 'Create key' }).click();
    await confirm.getByRole('button', { name: 'Yes, create key' }).click();
    const created = page.locator('.notice code');
    await created.waitFor();
    const key = (await created.textContent()) as string;
    expect((await keys())[key].auto_accept).toBe(true);
    const origin = new URL(page.url()).origin;
    expect(await page.getByTestId('install-command').first().textContent()).toBe(`curl -fsSL ${origin}/install.sh | sudo sh -s -- --bootstrap-key ${key}`);
    await screenshot(page, 'bootstrap-key-install-command');

    // Enrolled devices are counted per key.
    expect((await enrolDevice(suite.t, key)).answer.status).toBe(200);
    await page.reload();
    const row = page.locator('tbody tr', { hasText: key });
    await expect.poll(() => row.locator('td').nth(3).textContent()).toBe('1');

    // Turning automatic accept on asks too; cancelled, the key stays as it was.
    await page.getByLabel('Accept devices automatically').uncheck();
    await page.getByRole('button', { name: 'Create key' }).click();
    await expect.poll(async () => Object.keys(await keys()).length).toBe(2);
    const plain = Object.keys(await keys()).find((k) => k !== key) as string;
    const plainRow = page.locator('tbody tr', { hasText: plain });
    await plainRow.getByLabel('automatic').click();
    await confirm.getByRole('button', { name: 'Cancel' }).click();
    expect((await keys())[plain].auto_accept).toBe(false);
    expect(await plainRow.getByLabel('automatic').isChecked()).toBe(false);
    await plainRow.getByLabel('automatic').click();
    await confirm.getByRole('button', { name: 'Yes, accept automatically' }).click();
    await expect.poll(async () => (await keys())[plain].auto_accept).toBe(true);
    await expectNoErrorsAndClose();
  });
});

describe('pending hosts', () => {
  it('approves a selection of hosts at once, after asking', async () => {
    const [key] = Object.keys((await suite.t.api<KeyMap>('POST', '/api/v2/bootstrapkey', { token: suite.t.adminToken, body: {} })).body);
    const hosts = [];
    for (const name of ['bulk-one', 'bulk-two', 'bulk-three']) hosts.push(await enrolDevice(suite.t, key, undefined, name));
    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.goto('/pending');
    const rows = page.locator('tbody tr');
    await expect.poll(() => rows.count()).toBe(3);
    await page.getByLabel('Select bulk-one').check();
    await page.getByLabel('Select bulk-three').check();
    await page.getByRole('button', { name: 'Approve selected' }).click();
    await page.getByRole('button', { name: 'Yes, approve' }).click();
    await page.getByText('2 hosts approved.').waitFor();
    await expect.poll(() => rows.count()).toBe(1);
    expect(await rows.textContent()).toContain('bulk-two');
    const node = (id: string) => suite.t.api('GET', `/api/v2/node/${id}`, { token: suite.t.adminToken });
    expect((await node(hosts[0].device.id)).status).toBe(200);
    expect((await node(hosts[2].device.id)).status).toBe(200);
    await screenshot(page, 'pending-bulk-approved');
    await expectNoErrorsAndClose();
  });
});
