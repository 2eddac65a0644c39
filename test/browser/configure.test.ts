/**
 * The Configure area: pick an entity, see the effective configuration and where it comes from,
 * stage a change through a bundle's form (with validation) or the JSON editor, see the staged
 * changes with a diff, commit with a message, discard; the device page's "Show configuration" with
 * its commit/propagation state. A read-only user sees no edit controls; a user restricted to one
 * group sees only that group's entities.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();
let east: string;
let west: string;

const admin = () => ({ token: suite.t.adminToken });

beforeAll(async () => {
  await suite.t.addGroup({ id: 'east', title: 'East', tags: ['edge'] });
  await suite.t.addGroup({ id: 'west', title: 'West' });
  const upload = new FormData();
  upload.append('path', '/templates/');
  upload.append('file', new Blob(['site={{site}}\n']), 'motd.tpl');
  expect((await suite.t.api('POST', '/api/v2/file', { ...admin(), body: upload })).status).toBe(200);
  east = await suite.t.addDevice({ parent: 'east', name: 'east-01' });
  west = await suite.t.addDevice({ parent: 'west', name: 'west-01' });
  const r = await suite.t.api('POST', '/api/v2/commit', {
    ...admin(),
    body: {
      action: 'commit',
      message: 'baseline',
      changes: [
        { node_id: 'root', formtype: 'ntp', extend: false, config: { enabled: true, servers: ['0.pool.ntp.org'] } },
        {
          node_id: 'east',
          formtype: 'parameters',
          extend: false,
          config: { enabled: true, parameters: [{ key: 'site', value: 'oslo' }], secrets: [{ key: 'token', value: 'hunter2-secret' }] },
        },
      ],
    },
  });
  expect(r.status).toBe(200);
});

describe('Configure', () => {
  it('shows inherited values with where they come from, stages form and JSON changes with a diff, commits and discards', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.getByRole('link', { name: 'Configure' }).click();
    await page.getByRole('navigation', { name: 'Entities' }).getByRole('link', { name: 'east-01' }).click();

    // ntp comes from root; parameters from East, with the secret masked
    await page.getByRole('tab', { name: /^ntp/ }).click();
    const effective = page.getByTestId('bundle-ntp');
    await effective.getByTestId('inherited-from').waitFor();
    expect(await effective.getByTestId('inherited-from').textContent()).toContain('node');
    expect(await effective.getByTestId('effective-json').textContent()).toContain('0.pool.ntp.org');
    await page.getByRole('tab', { name: /^parameters/ }).click();
    const params = page.getByTestId('bundle-parameters');
    expect(await params.getByTestId('inherited-from').textContent()).toContain('East');
    expect(await params.getByTestId('effective-json').textContent()).toContain('********');
    expect(await page.content()).not.toContain('hunter2-secret');

    // the file_distribution form checks fields before staging
    await page.getByRole('tab', { name: /^file_distribution/ }).click();
    const form = page.getByTestId('bundle-file_distribution');
    await form.getByRole('button', { name: 'Add file set' }).click();
    await form.getByLabel('Label').fill('motd');
    await form.getByRole('button', { name: 'Add file', exact: true }).click();
    // the file selector (files:read) offers the store's files for the source
    await expect
      .poll(() => page.locator('#cfg-store-files option').evaluateAll((options) => options.map((o) => (o as HTMLOptionElement).value)))
      .toContain('/templates/motd.tpl');
    expect(await form.getByLabel('Source (file store path)').getAttribute('list')).toBe('cfg-store-files');
    await form.getByLabel('Source (file store path)').fill('templates/motd.tpl');
    await form.getByRole('button', { name: 'Stage change' }).click();
    await form.getByText('must be an absolute path').waitFor();
    await form.getByText('Destination on the device is required.').waitFor();
    expect((await suite.t.api('GET', '/api/v2/changelist', admin())).body).toEqual([]);
    await form.getByLabel('Source (file store path)').fill('/templates/motd.tpl');
    await form.getByLabel('Destination on the device').fill('/etc/motd');
    await form.getByLabel('Render as a template').check();
    await form.getByRole('button', { name: 'Stage change' }).click();
    await page.getByText('file_distribution staged').waitFor();
    const staged = page.getByTestId('change-file_distribution');
    await staged.getByTestId('diff').waitFor();
    const diff = (await staged.getByTestId('diff').textContent()) ?? '';
    expect(diff).toMatch(/^\+ +"destination": "\/etc\/motd",$/m);
    expect(diff).not.toMatch(/^- /m); // nothing committed before: every line is new
    await screenshot(page, 'configure');

    // a bundle without a form: the JSON editor, validated
    await page.getByRole('tab', { name: /^rauc/ }).click();
    const rauc = page.getByTestId('bundle-rauc');
    await rauc.getByLabel('Configuration (JSON').fill('{ "rauc_bundle": ');
    await rauc.getByRole('button', { name: 'Stage change' }).click();
    await rauc.getByText('Not valid JSON').waitFor();
    await rauc.getByLabel('Configuration (JSON').fill('["not an object"]');
    await rauc.getByRole('button', { name: 'Stage change' }).click();
    await rauc.getByText('must be a JSON object').waitFor();
    await rauc.getByLabel('Configuration (JSON').fill('{ "rauc_bundle": "/images/update.raucb", "pre_condition": "" }');
    await rauc.getByRole('button', { name: 'Stage change' }).click();
    await page.getByTestId('change-rauc').waitFor();

    // discard one, commit the other with a message
    await page.getByRole('button', { name: 'Discard the rauc change' }).click();
    await expect.poll(() => page.getByTestId('change-rauc').count()).toBe(0);
    await page.getByRole('button', { name: 'Commit' }).click();
    await page.getByText('Say what the commit does.').waitFor();
    await page.getByLabel('Commit message').fill('motd for east-01');
    await page.getByRole('button', { name: 'Commit' }).click();
    await page.getByText(/Committed 1 change/).waitFor();
    const config = (await suite.t.api('GET', `/api/v2/config/${east}`, admin())).body.config;
    expect(config.bundle_data.file_distribution.files[0].templates[0]).toMatchObject({
      source: '/templates/motd.tpl',
      destination: '/etc/motd',
      is_template: true,
    });
    expect(config.bundle_data.rauc).toBeUndefined();
    const commits = (await suite.t.api('GET', '/api/v2/commitlist?event=config.commit', admin())).body.items;
    expect(commits.map((c: { message: string }) => c.message)).toContain('motd for east-01');

    // discard all
    await page.getByRole('tab', { name: /^users/ }).click();
    const users = page.getByTestId('bundle-users');
    await users.getByRole('button', { name: 'Add user' }).click();
    await users.getByLabel('User name').fill('ops');
    await users.getByRole('button', { name: 'Stage change' }).click();
    await page.getByTestId('change-users').waitFor();
    await page.getByRole('button', { name: 'Discard all' }).click();
    await page.getByText('All staged changes discarded.').waitFor();
    expect((await suite.t.api('GET', '/api/v2/changelist', admin())).body).toEqual([]);
    await expectNoErrorsAndClose();
  });

  it('the device page shows the rendered configuration with inheritance and its commit/propagation state', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${east}` });
    await page.getByRole('button', { name: 'Show configuration' }).click();
    const view = page.getByTestId('device-config');
    await view.waitFor();
    expect(await view.getByTestId('config-propagated').textContent()).toContain('no');
    expect(await view.getByTestId('device-commit-sha').textContent()).toContain('nothing yet');
    expect(await view.getByTestId('device-bundle-ntp').textContent()).toContain('All devices');
    expect(await view.getByTestId('device-bundle-parameters').textContent()).toContain('East');
    await view.getByTestId('device-bundle-parameters').locator('summary').click();
    expect(await view.getByTestId('device-bundle-parameters').textContent()).toContain('********');
    expect(await page.content()).not.toContain('hunter2-secret');
    await screenshot(page, 'device-configuration');
    await expectNoErrorsAndClose();
  });

  it('shows a read-only user (configuration:read) the configuration without any edit control, and the API refuses changes', async () => {
    const reader = await suite.t.userWith([{ permission: 'configuration:read' }, { permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader });
    await page.getByRole('link', { name: 'Configure' }).click();
    await page.getByRole('navigation', { name: 'Entities' }).getByRole('link', { name: 'East', exact: true }).click();
    await page.getByRole('tab', { name: /^parameters/ }).click();
    await page.getByTestId('bundle-parameters').getByText('Own configuration').waitFor();
    expect(await page.getByRole('button', { name: 'Stage change' }).count()).toBe(0);
    expect(await page.getByRole('button', { name: /Discard|Commit|Add/ }).count()).toBe(0);
    expect(await page.locator('input:not([type=search]), textarea').count()).toBe(0);
    const refused = await suite.t.api('POST', '/api/v2/change', { token: reader.token, body: { node_id: 'east', formtype: 'ntp', config: { servers: [] } } });
    expect(refused.status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it('offers neither Configure nor Show configuration without configuration:read, and the API refuses it', async () => {
    const viewer = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: viewer });
    expect(await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Configure' }).count()).toBe(0);
    await page.goto(`/devices/${east}`);
    await page.getByRole('heading', { name: 'Attributes' }).waitFor();
    expect(await page.getByRole('button', { name: 'Show configuration' }).count()).toBe(0);
    await page.goto('/configure');
    await page.getByText('Access denied').waitFor();
    expect((await suite.t.api('GET', `/api/v2/config/${east}`, { token: viewer.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it('shows a user restricted to one group only that group’s entities, and the API refuses the others', async () => {
    const restricted = await suite.t.userWith([
      { permission: 'configuration:read', resources: ['node:west'] },
      { permission: 'configuration:manage', resources: ['node:west'] },
      { permission: 'device:read', resources: ['node:west'] },
    ]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: restricted });
    await page.getByRole('link', { name: 'Configure' }).click();
    const picker = page.getByRole('navigation', { name: 'Entities' });
    await picker.getByRole('link', { name: 'west-01' }).waitFor();
    expect(await picker.getByRole('link', { name: 'East', exact: true }).count()).toBe(0);
    expect(await picker.getByRole('link', { name: 'east-01' }).count()).toBe(0);
    await picker.getByRole('link', { name: 'west-01' }).click();
    await page.getByRole('tab', { name: /^ntp/ }).click();
    await page.getByTestId('bundle-ntp').getByRole('button', { name: 'Stage change' }).waitFor();
    // another group's device, typed into the address bar, is refused by the broker
    await page.goto(`/configure?type=node&id=${east}`);
    await page.getByText('Access denied').waitFor();
    expect((await suite.t.api('GET', `/api/v2/config/${east}`, { token: restricted.token })).status).toBe(403);
    expect((await suite.t.api('GET', `/api/v2/config/${west}`, { token: restricted.token })).status).toBe(200);
    await expectNoErrorsAndClose();
  });
});
