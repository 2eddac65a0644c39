/**
 * The Logs and Company areas of the web console, each row of the spec's UI permission table for
 * them: shown to holders of the permission, hidden from others, and the API refusing them too.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();
let device: string;

beforeAll(async () => {
  device = await suite.t.addDevice({ name: 'edge-07' });
  const ts = Math.floor(Date.now() / 1000);
  const base = { bundle_commit_id: 'b1', commit_id: 'c0ffee0123456789', labels: '', log: '' };
  await suite.t.broker.services.reports.record(device, [
    {
      ...base,
      bundle: 'package_management',
      sev: 'ERR',
      text: 'Package nginx failed to install',
      log: Buffer.from('E: Unable to locate package nginx').toString('base64'),
      ts: ts - 60,
    },
    { ...base, bundle: 'proc_watch', sev: 'WARN', text: 'Process sshd restarted', ts: ts - 30 },
    { ...base, bundle: 'file_distribution', sev: 'INFO', text: 'File /etc/motd updated', ts },
  ]);
});

describe('Logs', () => {
  it('lists reports with their severity, device and commit, filters them, and marks one read (reports:acknowledge)', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.getByRole('link', { name: 'Logs' }).click();
    const rows = page.getByTestId('report-row');
    await expect.poll(() => rows.count()).toBe(3);
    const failed = rows.filter({ hasText: 'Package nginx failed to install' });
    expect(await failed.textContent()).toContain('edge-07');
    expect(await failed.textContent()).toContain('c0ffee01');
    await failed.getByText('log').click();
    expect(await failed.locator('pre').textContent()).toBe('E: Unable to locate package nginx');
    await screenshot(page, 'logs');

    await page.getByLabel('Severity').selectOption('ERR,CRIT');
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect.poll(() => rows.count()).toBe(1);
    await rows.first().getByRole('button', { name: 'Mark read' }).click();
    await rows.first().getByRole('button', { name: 'Mark unread' }).waitFor();
    const read = await suite.t.api('GET', '/api/v2/reportlist?read=true', { token: suite.t.adminToken });
    expect(read.body.items.map((i: { text: string }) => i.text)).toEqual(['Package nginx failed to install']);
    await expectNoErrorsAndClose();
  });

  it('shows a reader without reports:acknowledge the logs without marking, and the API refuses them', async () => {
    const reader = await suite.t.userWith([{ permission: 'reports:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader });
    await page.getByRole('link', { name: 'Logs' }).click();
    await expect.poll(() => page.getByTestId('report-row').count()).toBe(3);
    expect(await page.getByRole('button', { name: /Mark/ }).count()).toBe(0);
    expect((await suite.t.api('PATCH', '/api/v2/reportmarkread', { token: reader.token, body: { all: true } })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it('hides Logs from a user without reports:read, and the API refuses them', async () => {
    const other = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: other });
    expect(await page.getByRole('link', { name: 'Logs' }).count()).toBe(0);
    await page.goto('/logs');
    await page.getByText('Access denied').waitFor();
    expect((await suite.t.api('GET', '/api/v2/reportlist', { token: other.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });
});

describe('Company', () => {
  it('lets a holder of company:manage change the record', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.getByRole('link', { name: 'Company' }).click();
    await page.getByLabel('Company name').fill('Acme Fleet');
    await page.getByLabel('City').fill('Trondheim');
    await page.getByRole('button', { name: 'Save' }).click();
    await page.getByText('Saved.').waitFor();
    await screenshot(page, 'company');
    const company = await suite.t.api('GET', '/api/v2/company', { token: suite.t.adminToken });
    expect(company.body).toMatchObject({ name: 'Acme Fleet', city: 'Trondheim' });
    await expectNoErrorsAndClose();
  });

  it('shows the record read-only with company:read alone, and the API refuses changes', async () => {
    const reader = await suite.t.userWith([{ permission: 'company:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader });
    await page.getByRole('link', { name: 'Company' }).click();
    await expect.poll(() => page.getByLabel('Company name').inputValue()).toBe('Acme Fleet');
    expect(await page.getByLabel('Company name').isDisabled()).toBe(true);
    expect(await page.getByRole('button', { name: 'Save' }).count()).toBe(0);
    const id = (await suite.t.api('GET', '/api/v2/company', { token: reader.token })).body.id;
    expect((await suite.t.api('PATCH', `/api/v2/company/${id}`, { token: reader.token, body: { name: 'Mine' } })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it('hides Company from a user without company:read, and the API refuses them', async () => {
    const other = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: other });
    expect(await page.getByRole('link', { name: 'Company' }).count()).toBe(0);
    await page.goto('/company');
    await page.getByText('Access denied').waitFor();
    expect((await suite.t.api('GET', '/api/v2/company', { token: other.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });
});
