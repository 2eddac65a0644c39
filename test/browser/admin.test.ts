import { describe, expect, it } from 'vitest';
import { downloaded, screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

describe('roles', () => {
  it('validates each resource live with the shared parser, saves the role, and refuses to delete it while in use, naming who uses it', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/roles' });
    await page.getByRole('link', { name: 'New role' }).click();
    await page.getByRole('heading', { level: 1, name: 'New role' }).waitFor();
    await page.getByLabel('Name').fill('Lab operators');
    await page.getByLabel('Description').fill('Consoles and SSH tunnels in the lab');
    await page.getByRole('button', { name: 'Add permission' }).click();
    const policy = page.locator('li.policy').first();
    // A useful permission first; every permission is built, so none is marked or withheld.
    expect(await policy.getByLabel('Permission').inputValue()).toBe('device:read');
    const options = await policy
      .getByLabel('Permission')
      .locator('option')
      .evaluateAll((els) =>
        els.map((o) => ({ value: (o as HTMLOptionElement).value, text: o.textContent ?? '', disabled: (o as HTMLOptionElement).disabled })),
      );
    expect(options.filter((o) => o.disabled || o.text.includes('not built'))).toEqual([]);
    expect(options.find((o) => o.value === 'cve:read')).toMatchObject({ disabled: false });
    // The new grant has one empty resource row: it is refused, not saved as "all devices".
    expect(await policy.locator('.resource-row .field-error').textContent()).toContain('type * for all devices');
    expect(await page.getByRole('button', { name: 'Create role' }).isDisabled()).toBe(true);
    await policy.getByLabel('Permission').selectOption('remote-access:connect');
    await policy.getByRole('button', { name: 'Add resource' }).click();
    const first = policy.getByLabel('Resource 1 of remote-access:connect');
    const second = policy.getByLabel('Resource 2 of remote-access:connect');

    await first.fill('tag:lab/tunnel(proto=tcp;port=99999)');
    const error = policy.locator('.resource-row').first().locator('.field-error');
    await error.waitFor();
    expect(await error.textContent()).toContain('outside 1-65535');
    expect(await page.getByRole('button', { name: 'Create role' }).isDisabled()).toBe(true);

    await second.fill('*/consol');
    await policy.locator('.resource-row').nth(1).locator('.field-error').waitFor();
    expect(await policy.locator('.resource-row').nth(1).locator('.field-error').textContent()).toContain('unknown action');
    await screenshot(page, 'role-editor-invalid');
    // The console's login user option, checked as the broker checks it.
    await second.fill('*/console(user=Root)');
    await expect.poll(() => policy.locator('.resource-row').nth(1).locator('.field-error').textContent()).toContain('"Root" is not a user name');
    await second.fill('*/console(user=operator,deploy)');
    await expect.poll(() => policy.locator('.resource-row').nth(1).locator('.field-error').count()).toBe(0);

    await first.fill('tag:lab/tunnel(proto=tcp;port=22)');
    await second.fill('*/console');
    await expect.poll(() => policy.locator('.field-error').count()).toBe(0);
    expect(await policy.locator('.ok-mark').count()).toBe(2);

    await page.getByRole('button', { name: 'Add permission' }).click();
    const read = page.locator('li.policy').nth(1);
    expect(await read.getByLabel('Permission').inputValue()).toBe('device:read');
    // Removing the only row is refused too: all devices must be typed as *.
    await read.getByRole('button', { name: 'Remove resource' }).click();
    expect(await read.locator('.field-error').textContent()).toContain('* for all devices');
    expect(await page.getByRole('button', { name: 'Create role' }).isDisabled()).toBe(true);
    await read.getByRole('button', { name: 'Add resource' }).click();
    await read.getByLabel('Resource 1 of device:read').fill('*');
    await screenshot(page, 'role-editor-valid');
    await page.getByRole('button', { name: 'Create role' }).click();
    await page.getByRole('heading', { level: 1, name: 'Roles' }).waitFor();
    await page.getByText('The role Lab operators was created.').waitFor();

    const roles = await suite.t.api('GET', '/api/v2/roleslist', { token: suite.t.adminToken });
    const role = roles.body.items.find((r: { name: string }) => r.name === 'Lab operators');
    expect(role.policies).toEqual([
      { permission: 'remote-access:connect', resources: ['tag:lab/tunnel(proto=tcp;port=22)', '*/console'] },
      { permission: 'device:read', resources: ['*'] },
    ]);

    // Assign it, then try to delete it.
    const holder = await suite.t.api('POST', '/api/v2/user', {
      token: suite.t.adminToken,
      body: { fname: 'Linus', lname: 'Lab', email: 'linus@example.com', roles: [role.id], password: 'a-long-password-1' },
    });
    expect(holder.status).toBe(201);
    await page.reload();
    const row = page.locator('tr[data-role="Lab operators"]');
    await row.getByRole('button', { name: 'Delete' }).click();
    await row.getByRole('button', { name: 'Yes, delete' }).click();
    await row.getByTestId('used-by').waitFor();
    expect(await row.getByTestId('used-by').textContent()).toBe('Linus Lab');
    await screenshot(page, 'role-in-use');
    expect((await suite.t.api('GET', `/api/v2/role/${role.id}`, { token: suite.t.adminToken })).status).toBe(200);

    // The built-in Administrator role offers no Delete button (it could only fail).
    await page.locator('tr[data-role="Administrator"]').waitFor();
    expect(await page.locator('tr[data-role="Administrator"]').getByRole('button', { name: 'Delete' }).count()).toBe(0);

    // Saving a change says so; the stored role shows "all devices" as an explicit *.
    await page.getByRole('link', { name: 'Lab operators' }).click();
    await page.getByLabel('Description').fill('Consoles in the lab');
    expect(await page.locator('li.policy').nth(1).getByLabel('Resource 1 of device:read').inputValue()).toBe('*');
    await page.getByRole('button', { name: 'Save role' }).click();
    await page.getByText('The role Lab operators was saved.').waitFor();
    expect((await suite.t.api('GET', `/api/v2/role/${role.id}`, { token: suite.t.adminToken })).body.description).toBe('Consoles in the lab');
    await expectNoErrorsAndClose();
  });

  it('shows a role read-only to a user without roles:manage', async () => {
    const reader = await suite.t.userWith([{ permission: 'roles:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader, at: '/roles' });
    await page.getByRole('link', { name: 'Administrator' }).click();
    await page.getByRole('heading', { level: 2, name: 'Permissions' }).waitFor();
    expect(await page.getByRole('link', { name: 'New role' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: /Save role|Create role|Add permission/ }).count()).toBe(0);
    await expectNoErrorsAndClose();
  });
});

describe('users', () => {
  it('creates, edits, disables, enables, resets the password of and deletes a user', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/users' });
    await page.getByRole('button', { name: 'New user' }).click();
    const form = page.getByRole('form', { name: 'New user' });
    await form.getByLabel('First name').fill('Ada');
    await form.getByLabel('Last name').fill('Lovelace');
    await form.getByLabel('Email').fill('ada@example.com');
    await form.getByLabel('Password (optional)').fill('short');
    await form.getByLabel('Administrator').check();
    await form.getByRole('button', { name: 'Create user' }).click();
    // The API's refusal is shown at the field.
    await form
      .locator('.field', { has: page.getByLabel('Password (optional)') })
      .locator('.field-error')
      .waitFor();
    await screenshot(page, 'user-create-refused');
    await form.getByLabel('Password (optional)').fill('a-long-password-2');
    await form.getByRole('button', { name: 'Create user' }).click();
    await page.getByText('ada@example.com was created').waitFor();
    // This broker has no SMTP relay: the console says the mail went to the outbox, not that it was sent.
    const created = (await page.getByText('ada@example.com was created').textContent()) ?? '';
    expect(created).toContain("was not sent: no mail server is configured (SMTP_URL), so it was written to the broker's outbox folder");
    expect(created).not.toMatch(/email was sent/);
    const row = page.locator('tr[data-email="ada@example.com"]');
    await row.waitFor();
    await screenshot(page, 'users');

    await row.getByRole('button', { name: 'Edit' }).click();
    const edit = page.getByRole('form', { name: 'Edit ada@example.com' });
    await edit.getByLabel('Last name').fill('King');
    await edit.getByRole('button', { name: 'Save' }).click();
    await page.getByText('ada@example.com was saved.').waitFor();
    await expect.poll(() => row.textContent()).toContain('Ada King');

    await row.getByRole('button', { name: 'Disable' }).click();
    await row.getByRole('button', { name: 'Yes, disable' }).click();
    await page.getByText('ada@example.com is disabled.').waitFor();
    await expect.poll(() => row.locator('.badge').first().textContent()).toBe('disabled');
    const login = await suite.t.api('POST', '/api/v2/login', { body: { email: 'ada@example.com', password: 'a-long-password-2' } });
    expect(login.status).toBe(401);

    await row.getByRole('button', { name: 'Enable' }).click();
    await page.getByText('ada@example.com is enabled.').waitFor();
    expect(await suite.t.login('ada@example.com', 'a-long-password-2')).toMatch(/^ey/);

    await row.getByRole('button', { name: 'Mail reset link' }).click();
    await row.getByRole('button', { name: 'Yes, mail it' }).click();
    await page.getByText('A reset link was mailed to ada@example.com.').waitFor();
    await row.getByRole('button', { name: 'Create reset link' }).click();
    await row.getByRole('button', { name: 'Yes, create it' }).click();
    const link = (await page.getByTestId('reset-link').textContent()) ?? '';
    await screenshot(page, 'user-reset-link');
    const token = new URL(link).searchParams.get('token');
    const set = await suite.t.api('POST', '/api/v2/password/set', { body: { token, password: 'handed-over-pass-3' } });
    expect(set.status).toBe(200);
    expect(await suite.t.login('ada@example.com', 'handed-over-pass-3')).toMatch(/^ey/);
    await page.getByRole('region', { name: 'Reset link' }).getByRole('button', { name: 'Close' }).click();

    await row.getByRole('button', { name: 'Delete' }).click();
    await row.getByRole('button', { name: 'Yes, delete' }).click();
    await page.getByText('ada@example.com was deleted.').waitFor();
    await expect.poll(() => row.count()).toBe(0);
    await expectNoErrorsAndClose();
  });
});

describe('files manager', () => {
  it('creates a folder, uploads with progress, downloads the same bytes and deletes', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/files' });
    await page.getByRole('heading', { level: 1, name: 'Files' }).waitFor();
    await page.getByLabel('New folder').fill('configs');
    await page.getByRole('button', { name: 'Create folder' }).click();
    await page.getByText('Folder configs created.').waitFor();
    // The folder icon is drawn (an emoji would be an empty box without an emoji font).
    const folderLink = page.getByRole('link', { name: 'configs/' });
    await folderLink.waitFor();
    expect(await folderLink.locator('svg.folder-icon').count()).toBe(1);
    expect(((await folderLink.textContent()) ?? '').trim()).toBe('configs/');
    await folderLink.click();
    await page.getByText('This folder is empty.').waitFor();
    expect(new URL(page.url()).searchParams.get('path')).toBe('/configs/');

    const content = Buffer.alloc(3 * 1024 * 1024, 'fleet-');
    // Watch the progress element: it must appear while the upload runs.
    const sawProgress = page.waitForSelector('.transfer-progress progress', { timeout: 10_000 }).then(() => true);
    await page.getByLabel('Upload to /configs/').setInputFiles({ name: 'app.conf', mimeType: 'text/plain', buffer: content });
    expect(await sawProgress).toBe(true);
    await page.getByText('Uploaded app.conf.').waitFor();
    const row = page.locator('tbody tr', { hasText: 'app.conf' });
    await row.waitFor();
    expect(await row.textContent()).toContain('3.0 MiB');
    await screenshot(page, 'files');

    const [download] = await Promise.all([page.waitForEvent('download'), row.getByRole('button', { name: 'Download' }).click()]);
    expect(download.suggestedFilename()).toBe('app.conf');
    expect((await downloaded(download)).equals(content)).toBe(true);

    // Uploading the same name again asks before replacing.
    await page.getByLabel('Upload to /configs/').setInputFiles({ name: 'app.conf', mimeType: 'text/plain', buffer: Buffer.from('v2') });
    await page.getByRole('button', { name: 'Replace it' }).waitFor();
    // Only the question: no red error beside it.
    expect(await page.locator('.error-box').count()).toBe(0);
    await screenshot(page, 'files-replace-prompt');
    await page.getByRole('button', { name: 'Replace it' }).click();
    await page.getByText('Uploaded app.conf.').waitFor();
    await expect.poll(() => row.textContent()).toContain('2 B');

    // A name without an extension is saved as it is (no ".txt" added for text).
    await page.getByLabel('Upload to /configs/').setInputFiles({ name: 'hostname', mimeType: 'text/plain', buffer: Buffer.from('gateway-01\n') });
    await page.getByText('Uploaded hostname.').waitFor();
    const hostname = page.locator('tbody tr', { hasText: 'hostname' });
    const [plain] = await Promise.all([page.waitForEvent('download'), hostname.getByRole('button', { name: 'Download' }).click()]);
    expect(plain.suggestedFilename()).toBe('hostname');
    await hostname.getByRole('button', { name: 'Delete' }).click();
    await hostname.getByRole('button', { name: 'Yes, delete' }).click();
    await page.getByText('hostname deleted.').waitFor();

    await row.getByRole('button', { name: 'Delete' }).click();
    await row.getByRole('button', { name: 'Yes, delete' }).click();
    await page.getByText('app.conf deleted.').waitFor();
    await page.getByText('This folder is empty.').waitFor();
    const listed = await suite.t.api('GET', '/api/v2/files?path=/configs/', { token: suite.t.adminToken });
    expect(listed.body.items).toEqual([]);
    await expectNoErrorsAndClose();
  });

  it('offers no write actions without files:manage', async () => {
    const reader = await suite.t.userWith([{ permission: 'files:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader, at: '/files' });
    await page.getByRole('heading', { level: 1, name: 'Files' }).waitFor();
    await expect.poll(() => page.locator('.loading').count()).toBe(0);
    expect(await page.getByLabel(/Upload to/).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Create folder' }).count()).toBe(0);
    // Only Files is offered in the menu, beside Help and the profile.
    const links = await page.getByRole('navigation', { name: 'Main' }).getByRole('link').allTextContents();
    expect(links).toEqual(['Files', 'Help', expect.stringMatching(/^Profile/)]);
    await expectNoErrorsAndClose();
  });
});
