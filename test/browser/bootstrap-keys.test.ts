import { describe, expect, it } from 'vitest';
import { enrolDevice } from '../support/agent.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

type KeyMap = Record<string, { auto_accept: boolean; devices?: number; label: string; expires_at: string | null; expired: boolean }>;
const keys = async () => (await suite.t.api<KeyMap>('GET', '/api/v2/bootstrapkeylist', { token: suite.t.adminToken })).body;

describe('bootstrap keys screen', () => {
  it('asks before an auto-accepting key, shows the install command and counts enrolled devices', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/bootstrap-keys' });
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
    expect(await page.getByTestId('install-command').first().textContent()).toBe(
      `curl -fsSL ${origin}/install.sh -o fleet-install.sh && printf '%s\\n' '${key}' | sudo sh fleet-install.sh --bootstrap-key-stdin`,
    );
    await screenshot(page, 'bootstrap-key-install-command');

    // Enrolled devices are counted per key.
    expect((await enrolDevice(suite.t, key)).answer.status).toBe(200);
    await page.reload();
    const row = page.locator('tbody tr', { hasText: key });
    await expect.poll(() => row.locator('td').nth(4).textContent()).toBe('1');

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

describe('bootstrap key label and expiry', () => {
  it('creates a labelled key that expires, relabels it, shows an expired key as such and clears the expiry', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/bootstrap-keys' });
    await page.getByLabel('Label', { exact: true }).fill('Rack 4 batch');
    await page.getByLabel('Expires').selectOption({ label: 'In 7 days' });
    const before = Date.now();
    await page.getByRole('button', { name: 'Create key' }).click();
    const created = page.locator('.notice code');
    await created.waitFor();
    const key = (await created.textContent()) as string;
    const stored = (await keys())[key];
    expect(stored.label).toBe('Rack 4 batch');
    const lifetime = Date.parse(stored.expires_at as string) - before;
    expect(lifetime).toBeGreaterThan(7 * 86400_000 - 60_000);
    expect(lifetime).toBeLessThan(7 * 86400_000 + 60_000);
    const row = page.locator('tbody tr', { has: page.locator(`code.key:text-is("${key}")`) });
    await expect.poll(() => row.getByLabel(`Label of key ${key}`).inputValue()).toBe('Rack 4 batch');

    // Relabelled in place: the change goes when the field is left.
    await row.getByLabel(`Label of key ${key}`).fill('Rack 5');
    await row.getByLabel(`Label of key ${key}`).press('Enter');
    await expect.poll(async () => (await keys())[key].label).toBe('Rack 5');

    // Past its time, the key says so, and enrolment is refused with a clear error.
    await suite.t.broker.services.store.db
      .updateTable('bootstrap_keys')
      .set({ expires_at: new Date(Date.now() - 60_000).toISOString() })
      .where('key_secret', '=', key)
      .execute();
    await page.reload();
    await row.locator('.badge.denied', { hasText: 'expired' }).waitFor();
    await screenshot(page, 'bootstrap-key-expired');
    const refused = await enrolDevice(suite.t, key);
    expect(refused.answer.status).toBe(403);
    expect(refused.answer.body.error).toBe('bootstrap_key_expired');

    // Made to never expire, it enrols again.
    await row.getByLabel(`Change expiry of key ${key}`).selectOption({ label: 'Never expire' });
    await expect.poll(async () => (await keys())[key].expires_at).toBeNull();
    await expect.poll(() => row.locator('.badge.denied').count()).toBe(0);
    expect((await keys())[key].label).toBe('Rack 5');
    const enrolled = await enrolDevice(suite.t, key);
    expect(enrolled.answer.status).toBe(200);
    // (rejected again, so the pending hosts below are the next test's own)
    expect((await suite.t.api('DELETE', `/api/v2/pendinghost/${enrolled.device.id}`, { token: suite.t.adminToken })).status).toBe(204);
    await expectNoErrorsAndClose();
  });
});

describe('pending hosts', () => {
  it('approves a selection of hosts at once, after asking', async () => {
    const [key] = Object.keys((await suite.t.api<KeyMap>('POST', '/api/v2/bootstrapkey', { token: suite.t.adminToken, body: {} })).body);
    const hosts = [];
    for (const name of ['bulk-one', 'bulk-two', 'bulk-three']) hosts.push(await enrolDevice(suite.t, key, undefined, name));
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/pending' });
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
