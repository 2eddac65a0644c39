import { describe, expect, it } from 'vitest';
import { ApiClient } from '../../cli/api.js';
import { resolveDevice } from '../../cli/devices.js';
import { enrolDevice } from '../support/agent.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

describe('device tree', () => {
  it('shows groups with their node ids, tags and devices, and filters by text, tag and status', async () => {
    await suite.t.addGroup({ id: 'berlin', title: 'Berlin', tags: ['prod'] });
    await suite.t.addGroup({ id: 'lab', title: 'Lab', tags: ['test'] });
    const gateway = await suite.t.addDevice({ parent: 'berlin', name: 'gateway-01', tags: ['edge'] });
    await suite.t.addDevice({ parent: 'lab', name: 'bench-pi' });

    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/devices' });
    const tree = page.locator('ul.tree');
    await tree.getByText('gateway-01').waitFor();
    // Node ids are shown next to group names.
    const berlin = tree.locator('summary', { hasText: 'Berlin' });
    expect(await berlin.locator('code.node-id').textContent()).toBe('berlin');
    expect(await berlin.locator('.tag').allTextContents()).toEqual(['prod']);
    expect(await tree.locator('.device-row', { hasText: 'gateway-01' }).locator('.tag').allTextContents()).toEqual(['edge']);
    expect(await tree.locator('.device-row', { hasText: 'gateway-01' }).locator('.status').textContent()).toContain('offline');
    await screenshot(page, 'devices-tree');

    await page.getByLabel('Search').fill('bench');
    await expect.poll(() => tree.locator('.device-row').count()).toBe(1);
    expect(await tree.locator('.device-row').textContent()).toContain('bench-pi');

    await page.getByLabel('Search').fill('');
    // A device carries the tags of its groups: "prod" finds the gateway below Berlin.
    await page.getByLabel('Tag').selectOption('prod');
    await expect.poll(() => tree.locator('.device-row').count()).toBe(1);
    expect(await tree.locator('.device-row').textContent()).toContain('gateway-01');

    await page.getByLabel('Tag').selectOption('');
    await page.getByLabel('Status').selectOption('online');
    await expect.poll(() => tree.locator('.device-row').count()).toBe(0);
    expect(await page.getByText('No device or group matches.').isVisible()).toBe(true);

    await page.getByLabel('Status').selectOption('');
    await tree.getByRole('link', { name: 'gateway-01' }).click();
    await page.getByRole('heading', { level: 1, name: 'gateway-01' }).waitFor();
    expect(new URL(page.url()).pathname).toBe(`/devices/${gateway}`);
    expect(await page.locator('.device-meta').textContent()).toContain(gateway);
    await screenshot(page, 'device-page');
    await expectNoErrorsAndClose();
  });
});

describe('attribute editor', () => {
  it('adds two custom keys, marks one for deletion and undoes it; nothing is stored before Save; the API then holds exactly the record', async () => {
    const device = await suite.t.addDevice({ name: 'sensor-7' });
    const seeded = await suite.t.api('PATCH', `/api/v2/deviceattribute/${device}`, {
      token: suite.t.adminToken,
      body: { description: 'lab sensor', custom: { owner: 'ops' } },
    });
    expect(seeded.status).toBe(200);
    const before = seeded.body;
    const max = before.custom_max as number;

    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}` });
    await page.getByRole('link', { name: 'Edit attributes' }).click();
    await page.getByRole('heading', { level: 1, name: 'Edit attributes' }).waitFor();
    const counter = page.getByTestId('custom-counter');
    await expect.poll(() => counter.textContent()).toContain(`1 / ${max}`);

    // The key of an existing attribute cannot be edited.
    const ownerRow = page.locator('.custom-row[data-key="owner"]');
    expect(await ownerRow.getByLabel('Key').getAttribute('readonly')).not.toBeNull();

    for (const [key, value] of [
      ['site', 'berlin'],
      ['rack', 'r12'],
    ]) {
      await page.getByRole('button', { name: 'Add custom attribute' }).click();
      const row = page.locator('.custom-row').last();
      await row.getByLabel('New key').fill(key);
      await row.getByLabel('Value').fill(value);
    }
    await expect.poll(() => counter.textContent()).toContain(`3 / ${max}`);

    await ownerRow.getByRole('button', { name: 'Delete owner' }).click();
    await expect.poll(() => counter.textContent()).toContain(`2 / ${max}`);
    expect(await ownerRow.textContent()).toContain('Marked for deletion');
    await screenshot(page, 'attributes-marked');

    // Nothing is persisted before Save.
    expect((await suite.t.api('GET', `/api/v2/deviceattribute/${device}`, { token: suite.t.adminToken })).body).toEqual(before);

    await ownerRow.getByRole('button', { name: 'Undo delete of owner' }).click();
    await expect.poll(() => counter.textContent()).toContain(`3 / ${max}`);
    expect(await ownerRow.textContent()).not.toContain('Marked for deletion');

    await page.getByRole('button', { name: 'Save', exact: true }).click();
    await page.getByText('Saved.').waitFor();
    const after = await suite.t.api('GET', `/api/v2/deviceattribute/${device}`, { token: suite.t.adminToken });
    expect(after.body).toEqual({ ...before, custom: { owner: 'ops', site: 'berlin', rack: 'r12' } });
    await screenshot(page, 'attributes-saved');
    await expectNoErrorsAndClose();
  });

  it('shows the API errors at the field (coordinates out of range, key too long) and stores nothing', async () => {
    const device = await suite.t.addDevice({ name: 'sensor-8' });
    const before = (await suite.t.api('GET', `/api/v2/deviceattribute/${device}`, { token: suite.t.adminToken })).body;
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}/attributes` });
    await page.getByLabel('Latitude').fill('95');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    const latitude = page.locator('.field', { has: page.getByLabel('Latitude') });
    await latitude.locator('.field-error').waitFor();
    expect(await latitude.locator('.field-error').textContent()).toMatch(/90/);
    expect(await page.getByLabel('Latitude').getAttribute('aria-invalid')).toBe('true');

    await page.getByLabel('Latitude').fill('52.52');
    await page.getByRole('button', { name: 'Add custom attribute' }).click();
    const row = page.locator('.custom-row').last();
    await row.getByLabel('New key').fill('k'.repeat(65));
    await row.getByLabel('Value').fill('v');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    await row.locator('.field-error').waitFor();
    expect(await row.locator('.field-error').textContent()).toMatch(/64/);
    await screenshot(page, 'attributes-errors');
    // All or nothing: the valid latitude was not stored either.
    expect((await suite.t.api('GET', `/api/v2/deviceattribute/${device}`, { token: suite.t.adminToken })).body).toEqual(before);

    await row.getByRole('button', { name: /Remove new row/ }).click();
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    await page.getByText('Saved.').waitFor();
    expect((await suite.t.api('GET', `/api/v2/deviceattribute/${device}`, { token: suite.t.adminToken })).body.latitude).toBe('52.52');
    await expectNoErrorsAndClose();
  });

  it('checks ranges, lengths and legacy names before sending, and shows every refusal at its field without "body."', async () => {
    const device = await suite.t.addDevice({ name: 'sensor-10' });
    const before = (await suite.t.api('GET', `/api/v2/deviceattribute/${device}`, { token: suite.t.adminToken })).body;
    const { page, expectNoErrorsAndClose } = await suite.open();
    const patches: string[] = [];
    page.on('request', (r) => {
      if (r.method() === 'PATCH') patches.push(r.url());
    });
    await page.goto(`/devices/${device}/attributes`);
    await page.getByLabel('Latitude').fill('95');
    await page.getByLabel('Longitude').fill('-180.5');
    await page.getByRole('button', { name: 'Add custom attribute' }).click();
    await page.locator('.custom-row').last().getByLabel('New key').fill('latitude');
    await page.locator('.custom-row').last().getByLabel('Value').fill('52');
    await page.getByRole('button', { name: 'Add custom attribute' }).click();
    await page.locator('.custom-row').last().getByLabel('New key').fill('k'.repeat(65));
    await page.locator('.custom-row').last().getByLabel('Value').fill('v');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    const errorOf = (label: string) => page.locator('.field', { has: page.getByLabel(label, { exact: true }) }).locator('.field-error');
    await errorOf('Latitude').waitFor();
    expect(await errorOf('Latitude').textContent()).toContain('-90 to 90');
    expect(await errorOf('Longitude').textContent()).toContain('-180 to 180');
    const rowErrors = page.locator('.custom-row .field-error');
    expect(await rowErrors.allTextContents()).toEqual([
      '"latitude" is a device field above; set it there or choose another key.',
      'A key holds at most 64 characters.',
    ]);
    expect(patches).toEqual([]);
    await screenshot(page, 'attributes-client-checks');

    // What only the broker checks (control characters) comes back for every field at once.
    await page
      .locator('.custom-row')
      .last()
      .getByRole('button', { name: /Remove new row/ })
      .click();
    await page
      .locator('.custom-row')
      .last()
      .getByRole('button', { name: /Remove new row/ })
      .click();
    await page.getByLabel('Latitude').fill('');
    await page.getByLabel('Longitude').fill('');
    await page.getByLabel('Name', { exact: true }).fill('bell\u0007name');
    await page.getByLabel('City').fill('bell\u0007city');
    await page.getByRole('button', { name: 'Save', exact: true }).click();
    await errorOf('City').waitFor();
    expect(await errorOf('Name').count()).toBe(1);
    expect(patches.length).toBe(1);
    expect(await page.locator('.error-box').textContent()).toContain('2 fields need a change');
    expect(await page.locator('main').textContent()).not.toContain('body.');
    expect((await suite.t.api('GET', `/api/v2/deviceattribute/${device}`, { token: suite.t.adminToken })).body).toEqual(before);
    await expectNoErrorsAndClose();
  });

  it('asks before leaving for another page with unsaved edits', async () => {
    const device = await suite.t.addDevice({ name: 'sensor-11' });
    const { page, expectNoErrorsAndClose } = await suite.open();
    // Arrive from the device page, so Back has somewhere to go inside the app.
    await page.goto(`/devices/${device}`);
    await page.getByRole('link', { name: 'Edit attributes' }).click();
    await page.getByLabel('Description').fill('not saved yet');
    const questions: string[] = [];
    page.once('dialog', (d) => {
      questions.push(d.message());
      void d.dismiss();
    });
    await page.getByRole('link', { name: 'Back to the device' }).click();
    await expect.poll(() => questions.length).toBe(1);
    expect(questions[0]).toContain('Leave without saving?');
    expect(new URL(page.url()).pathname).toBe(`/devices/${device}/attributes`);
    expect(await page.getByLabel('Description').inputValue()).toBe('not saved yet');

    // The browser's Back button asks too.
    page.once('dialog', (d) => {
      questions.push(d.message());
      void d.dismiss();
    });
    await page.goBack();
    await expect.poll(() => questions.length).toBe(2);
    await expect.poll(() => new URL(page.url()).pathname).toBe(`/devices/${device}/attributes`);
    expect(await page.getByLabel('Description').inputValue()).toBe('not saved yet');

    page.once('dialog', (d) => void d.accept());
    await page.getByRole('link', { name: 'Back to the device' }).click();
    await page.getByRole('heading', { level: 1, name: 'sensor-11' }).waitFor();
    expect(new URL(page.url()).pathname).toBe(`/devices/${device}`);
    await expectNoErrorsAndClose();
  });

  it('is not offered without device:manage', async () => {
    const device = await suite.t.addDevice({ name: 'sensor-9' });
    const reader = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader, at: `/devices/${device}` });
    await page.getByRole('heading', { level: 2, name: 'Attributes' }).waitFor();
    expect(await page.getByRole('link', { name: 'Edit attributes' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Remove device' }).count()).toBe(0);
    await page.goto(`/devices/${device}/attributes`);
    await page.getByRole('alert').waitFor();
    expect(await page.getByRole('alert').textContent()).toContain('Access denied');
    await expectNoErrorsAndClose();
  });
});

describe('phone width', () => {
  it('shows the device page and the attribute editor without sideways scrolling', async () => {
    const device = await suite.t.addDevice({ name: 'phone-check', tags: ['a-rather-long-tag-name'] });
    await suite.t.api('PATCH', `/api/v2/deviceattribute/${device}`, {
      token: suite.t.adminToken,
      body: { custom: { owner: 'ops', location: 'building 7, floor 3' } },
    });
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 } });
    for (const [path, shot] of [
      [`/devices/${device}`, 'phone-device'],
      [`/devices/${device}/attributes`, 'phone-attributes'],
      ['/devices', 'phone-devices'],
    ]) {
      await page.goto(path);
      await page.locator('main h1').waitFor();
      await expect.poll(() => page.locator('.loading').count()).toBe(0);
      await screenshot(page, shot);
      const wide = await page.evaluate(() =>
        [...document.querySelectorAll('body *')]
          .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1 || e.scrollWidth > window.innerWidth + 1)
          .slice(0, 8)
          .map((e) => `${e.tagName}.${e.className} ${e.getBoundingClientRect().right} ${e.scrollWidth}`),
      );
      expect(wide).toEqual([]);
      expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
    }
    await expectNoErrorsAndClose();
  });
});

describe('remote access buttons', () => {
  it('offers no console to a user without remote-access:connect, and the console URL says "Access denied"', async () => {
    const device = await suite.t.addDevice({ name: 'router-3', tags: ['lab'] });
    const reader = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'inventory:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader, at: `/devices/${device}` });
    await page.getByText('Your roles allow no remote access to this device.').waitFor();
    expect(await page.getByTestId('open-console').count()).toBe(0);
    expect(await page.getByRole('button', { name: 'Reload agent' }).count()).toBe(0);
    await screenshot(page, 'device-no-remote-access');

    await page.goto(`/console/${device}`);
    const alert = page.getByRole('alert');
    await alert.waitFor();
    expect(await alert.textContent()).toContain('Access denied');
    expect(await page.locator('.xterm').count()).toBe(0);
    await screenshot(page, 'console-access-denied');
    await expectNoErrorsAndClose();
  });

  it('offers exactly the actions a role grants: console only on tag:lab', async () => {
    const device = await suite.t.addDevice({ name: 'router-4', tags: ['lab'] });
    const other = await suite.t.addDevice({ name: 'router-5' });
    const operator = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['tag:lab/console'] }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: operator, at: `/devices/${device}` });
    await page.getByTestId('open-console').waitFor();
    expect(await page.getByRole('button', { name: 'Reload agent' }).count()).toBe(0);
    expect(await page.getByRole('heading', { name: 'File transfer' }).count()).toBe(0);
    expect(await page.getByRole('heading', { name: 'Tunnels' }).count()).toBe(0);

    await page.goto(`/devices/${other}`);
    await page.getByText('Your roles allow no remote access to this device.').waitFor();
    expect(await page.getByTestId('open-console').count()).toBe(0);
    await expectNoErrorsAndClose();
  });

  it('shows a copy-only user what they may do (file transfer) and what not, rather than an empty panel', async () => {
    const device = await suite.t.addDevice({ name: 'router-copy', tags: ['lab'] });
    const copier = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['tag:lab/copy'] }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: copier, at: `/devices/${device}` });
    const may = page.getByTestId('remote-may');
    await may.waitFor();
    expect(await may.textContent()).toContain('Copy files to and from the device');
    expect(await may.getByRole('link', { name: 'Copy files to and from the device' }).getAttribute('href')).toBe('#h-transfer');
    expect(await page.getByTestId('remote-may-not').textContent()).toBe('Your roles do not allow a console, tunnels or an agent reload on this device.');
    // Offline: what waits is the file browser, not a console this user may not open.
    expect(await page.getByTestId('offline-hint').textContent()).toBe('The device is offline: the file browser is available once it connects.');
    expect(await page.getByTestId('open-console').count()).toBe(0);
    expect(await page.getByRole('heading', { name: 'File transfer' }).count()).toBe(1);
    await screenshot(page, 'device-copy-only');
    await expectNoErrorsAndClose();
  });

  it('offers no console or reload while the device is offline, and says why', async () => {
    const device = await suite.t.addDevice({ name: 'router-6' });
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}` });
    await page.getByTestId('offline-hint').waitFor();
    expect(await page.getByTestId('offline-hint').textContent()).toContain('offline');
    expect(await page.getByTestId('open-console').isDisabled()).toBe(true);
    expect(await page.getByTestId('open-console').getAttribute('href')).toBeNull();
    expect(await page.getByRole('button', { name: 'Reload agent' }).isDisabled()).toBe(true);
    await screenshot(page, 'device-offline');
    await expectNoErrorsAndClose();
  });

  it('lists the port presets of a device with the fleet connect command the CLI resolves: its name, a likely free local port', async () => {
    const device = await suite.t.addDevice({ name: 'camera-1', tags: ['cams'] });
    for (const body of [
      { target: 'tag:cams', name: 'RTSP', proto: 'tcp', port: 554, dst: 'localhost' },
      { target: '*', name: 'SSH', proto: 'tcp', port: 22, dst: 'localhost' },
      { target: 'tag:cams', name: 'Web', proto: 'tcp', port: 8080, dst: 'localhost' },
      { target: 'tag:cams', name: 'Node-RED', proto: 'tcp', port: 1880, dst: 'localhost' },
    ]) {
      expect((await suite.t.api('POST', '/api/v2/service-connect/portmap', { token: suite.t.adminToken, body })).status).toBe(201);
    }
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}` });
    const ssh = page.locator('.portmap', { hasText: 'SSH' });
    await ssh.waitFor();
    // Privileged (22, 554) and commonly taken (8080) ports move up by 10000; 1880 stays.
    await expect.poll(() => ssh.getByTestId('connect-command').textContent()).toBe('fleet connect camera-1 -t 10022:localhost:22');
    expect(await ssh.getByTestId('connect-then').textContent()).toBe('Then connect to localhost:10022.');
    expect(await page.locator('.portmap', { hasText: 'Web' }).getByTestId('connect-command').textContent()).toBe(
      'fleet connect camera-1 -t 18080:localhost:8080',
    );
    expect(await page.locator('.portmap', { hasText: 'Node-RED' }).getByTestId('connect-command').textContent()).toBe(
      'fleet connect camera-1 -t 1880:localhost:1880',
    );
    const rtsp = page.locator('.portmap', { hasText: 'RTSP' });
    expect(await rtsp.getByTestId('connect-command').textContent()).toBe('fleet connect camera-1 -t 10554:localhost:554');
    await rtsp.getByLabel('Local port').fill('8554');
    expect(await rtsp.getByTestId('connect-command').textContent()).toBe('fleet connect camera-1 -t 8554:localhost:554');
    expect(await page.getByTestId('connect-by-id').count()).toBe(0);
    // The name shown is one the CLI resolves to this device (its own resolver, against this broker).
    const client = new ApiClient({ url: suite.t.url, token: suite.t.adminToken });
    expect((await resolveDevice(client, 'camera-1')).id).toBe(device);
    // How to get the CLI: the one-line install from this broker, and the script itself.
    const origin = new URL(page.url()).origin;
    expect(await page.getByTestId('install-cli-command').textContent()).toBe(`curl -fsSL ${origin}/install-cli.sh | sh`);
    expect(await page.getByTestId('install-cli-script').getAttribute('href')).toBe('/install-cli.sh');
    await screenshot(page, 'device-tunnels');
    await expectNoErrorsAndClose();
  });

  it('names a device by its id when its name is shared, and fits the panel on a phone', async () => {
    const twin = await suite.t.addDevice({ name: 'twin-cam', tags: ['twins'] });
    const other = await suite.t.addDevice({ name: 'twin-cam', tags: ['twins'] });
    expect(
      (
        await suite.t.api('POST', '/api/v2/service-connect/portmap', {
          token: suite.t.adminToken,
          body: { target: 'tag:twins', name: 'Twin shell', proto: 'tcp', port: 2222, dst: 'localhost' },
        })
      ).status,
    ).toBe(201);
    // The CLI refuses the shared name: the panel must not offer it.
    const client = new ApiClient({ url: suite.t.url, token: suite.t.adminToken });
    await expect(resolveDevice(client, 'twin-cam')).rejects.toThrow(/names 2 devices/);

    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 }, at: `/devices/${twin}` });
    const ssh = page.locator('.portmap', { hasText: 'Twin shell' });
    await ssh.waitFor();
    await page.getByTestId('connect-by-id').waitFor();
    expect(await ssh.getByTestId('connect-command').textContent()).toBe(`fleet connect ${twin} -t 2222:localhost:2222`);
    expect(await page.getByTestId('connect-by-id').textContent()).toBe('The command names the device by its id: 2 devices you can see are named "twin-cam".');
    expect(other).not.toBe(twin);
    // At 390 px the command wraps inside the page: nothing scrolls sideways, the copy button is on screen.
    await ssh.getByTestId('connect-command').scrollIntoViewIfNeeded();
    expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
    const box = await ssh.getByRole('button', { name: 'Copy command' }).boundingBox();
    expect(box && box.x + box.width).toBeLessThanOrEqual(390);
    const installBox = await page.getByTestId('install-cli-command').boundingBox();
    expect(installBox && installBox.x + installBox.width).toBeLessThanOrEqual(390);
    await screenshot(page, 'device-tunnels-phone');
    await expectNoErrorsAndClose();
  });
});

describe('enrolment', () => {
  it('creates a bootstrap key, approves one pending host and rejects another', async () => {
    await suite.t.addGroup({ id: 'hamburg', title: 'Hamburg' });
    const { page, expectNoErrorsAndClose } = await suite.open();
    // The group tree's answer held back: until it comes the field says it is loading, then lists the groups.
    let releaseTree!: () => void;
    const treeHeld = new Promise<void>((resolve) => (releaseTree = resolve));
    await page.route('**/api/v2/grouptree', async (route) => {
      await treeHeld;
      await route.continue();
    });
    await page.goto('/bootstrap-keys');
    await page.getByRole('heading', { level: 1, name: 'Bootstrap keys' }).waitFor();
    const group = page.getByLabel('Group');
    await expect
      .poll(() => group.evaluate((el) => [el.tagName, (el as HTMLSelectElement).disabled, el.textContent]))
      .toEqual(['SELECT', true, 'Loading groups…']);
    releaseTree();
    await page.locator('select#bk-group:enabled').waitFor();
    await group.selectOption('hamburg');
    await page.getByRole('button', { name: 'Create key' }).click();
    const created = page.locator('.notice code');
    await created.waitFor();
    const key = (await created.textContent()) as string;
    const listed = await suite.t.api('GET', '/api/v2/bootstrapkeylist', { token: suite.t.adminToken });
    expect(Object.values(listed.body)).toEqual([expect.objectContaining({ key, group_id: 'hamburg', auto_accept: false })]);
    await screenshot(page, 'bootstrap-keys');

    const first = await enrolDevice(suite.t, key, undefined, 'pending-one');
    const second = await enrolDevice(suite.t, key, undefined, 'pending-two');
    expect(first.answer.body.state).toBe('pending');
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Pending hosts' }).click();
    const rows = page.locator('tbody tr');
    await expect.poll(() => rows.count()).toBe(2);
    await screenshot(page, 'pending-hosts');
    await rows.filter({ hasText: 'pending-one' }).getByRole('button', { name: 'Approve' }).click();
    await page.getByText('pending-one was approved.').waitFor();
    await rows.filter({ hasText: 'pending-two' }).getByRole('button', { name: 'Reject' }).click();
    await page.getByRole('button', { name: 'Yes, reject' }).click();
    await page.getByText('pending-two was rejected.').waitFor();
    await expect.poll(() => rows.count()).toBe(0);

    const tree = await suite.t.api('GET', `/api/v2/node/${first.device.id}`, { token: suite.t.adminToken });
    expect(tree.body.parent_id).toBe('hamburg');
    expect((await suite.t.api('GET', `/api/v2/node/${second.device.id}`, { token: suite.t.adminToken })).status).toBe(404);
    await expectNoErrorsAndClose();
  });
});
