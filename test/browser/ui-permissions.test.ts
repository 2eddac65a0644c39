/**
 * The specification's "Permissions needed by UI areas", row by row. The table is transcribed
 * below (UI element and permissions exactly as the spec writes them), with where this console
 * shows each element. For every row:
 * - a user holding exactly the row's permissions (plus, for a "Area, Element" row, what the area
 *   itself needs, as the element sits inside it) sees the element;
 * - for each permission of the row, a user holding all but that one does not see it;
 * - the API refuses that user a call guarded by the permission they lack, and grants it (answers
 *   anything but 403) to the holder.
 * The Devices row lists four permissions for one area: the list and the device page need
 * device:read, and each of the other three gates what it shows there (the CVEs, Inventory and
 * Reports panels), so a user lacking one sees the rest of the area.
 * One broker, each distinct set of permissions one user, one page per user, a few users at once.
 */
import crypto from 'node:crypto';
import type { Locator, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Permission } from '../../shared/permissions.js';
import { useBrowserSuite } from '../support/browser.js';
import { fakeStripe } from '../support/stripe.js';

let stripe: Awaited<ReturnType<typeof fakeStripe>>;
beforeAll(async () => {
  stripe = await fakeStripe();
});
afterAll(() => {
  stripe?.server.close();
});

const suite = useBrowserSuite({
  env: () => ({ STRIPE_SECRET_KEY: 'sk_test_local', STRIPE_API_BASE: `http://127.0.0.1:${stripe.port}`, STRIPE_PRICE_ID: 'price_seat' }),
});

/** Set up before the rows run: a device with inventory, a configuration commit and its report, a stored file. */
const fx = { device: '', companyId: '' };

const nav = (page: Page, name: string) => page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true });
const title = (page: Page) => page.locator('main h1');

interface Part {
  /** The permissions whose lack hides this part (default: every permission of the row). */
  perms?: Permission[];
  locate: (page: Page) => Locator;
}

interface Row {
  /** The spec's "UI element" column, verbatim. */
  element: string;
  /** The spec's "Permissions required" column, verbatim. */
  needs: Permission[];
  /** What the area around the element needs (held by the row's users too). */
  within?: Permission[];
  path: () => string;
  /** Shown to holders and to users lacking a permission, once the page has what decides the element. */
  ready: (page: Page) => Locator;
  parts: Part[];
  /** The area's own page: refused ("Access denied") to a user lacking one of its permissions. */
  gated?: boolean;
}

/** The spec's table, in its order. */
const CONFIGURE: Permission[] = ['configuration:read', 'device:read'];
const REMOTE: Permission[] = ['device:read', 'inventory:read', 'remote-access:connect'];
const devicePage = () => `/devices/${fx.device}`;
const remotePanel = (page: Page) => page.getByTestId('open-console').or(page.getByText('Your roles allow no remote access to this device.'));
const configure = (bundle: string) => () => `/configure?type=node&id=${fx.device}&bundle=${bundle}`;
const ownConfig = (bundle: string) => (page: Page) => page.getByTestId(`bundle-${bundle}`).getByText('Own configuration');
const area = (element: string, needs: Permission[], path: string, link: string): Row => ({
  element,
  needs,
  path: () => path,
  ready: title,
  parts: [{ locate: (page) => nav(page, link) }],
  gated: true,
});

const TABLE: Row[] = [
  area('Dashboard', ['analysis:read', 'device:read', 'inventory:read', 'metrics:read', 'reports:read'], '/dashboard', 'Dashboard'),
  {
    element: 'Devices',
    needs: ['cve:read', 'device:read', 'inventory:read', 'reports:read'],
    path: devicePage,
    ready: (page) => page.getByRole('heading', { name: 'Attributes' }),
    parts: [
      { perms: ['device:read'], locate: (page) => nav(page, 'Devices') },
      { perms: ['cve:read'], locate: (page) => page.getByRole('heading', { name: 'CVEs', exact: true }) },
      { perms: ['inventory:read'], locate: (page) => page.getByRole('heading', { name: 'Inventory', exact: true }) },
      { perms: ['reports:read'], locate: (page) => page.getByRole('heading', { name: 'Reports', exact: true }) },
    ],
  },
  area('Devices, Pending hosts', ['device:approve'], '/pending', 'Pending hosts'),
  {
    element: 'Devices, Update attributes and Delete',
    needs: ['device:manage'],
    within: ['device:read'],
    path: devicePage,
    ready: (page) => page.getByRole('heading', { name: 'Attributes' }),
    parts: [
      { locate: (page) => page.getByRole('link', { name: 'Edit attributes' }) },
      { locate: (page) => page.getByRole('button', { name: 'Remove device' }) },
    ],
  },
  {
    element: 'Devices, Show configuration',
    needs: ['configuration:read'],
    within: ['device:read'],
    path: devicePage,
    ready: (page) => page.getByRole('heading', { name: 'Attributes' }),
    parts: [{ locate: (page) => page.getByRole('heading', { name: 'Configuration', exact: true }) }],
  },
  {
    element: 'Device, Connect to console',
    needs: ['remote-access:connect'],
    within: ['device:read'],
    path: devicePage,
    ready: remotePanel,
    parts: [{ locate: (page) => page.getByTestId('open-console') }],
  },
  area('Configure', CONFIGURE, '/configure', 'Configure'),
  {
    element: 'Configure, Modify',
    needs: ['configuration:manage'],
    within: CONFIGURE,
    path: configure('ntp'),
    ready: ownConfig('ntp'),
    parts: [{ locate: (page) => page.getByRole('button', { name: 'Stage change' }) }],
  },
  {
    element: 'Configure, File selector',
    needs: ['files:read'],
    within: [...CONFIGURE, 'configuration:manage'],
    path: configure('file_distribution'),
    ready: ownConfig('file_distribution'),
    parts: [{ locate: (page) => page.locator('datalist#cfg-store-files option[value="/templates/motd.tpl"]') }],
  },
  {
    element: 'Configure, User and Ports popups',
    needs: ['inventory:read'],
    within: [...CONFIGURE, 'configuration:manage'],
    path: configure('users'),
    ready: ownConfig('users'),
    parts: [
      { locate: (page) => page.locator('datalist#cfg-device-users option[value="alice"]') },
      { locate: (page) => page.locator('datalist#cfg-device-ports option[value="22"]') },
    ],
  },
  area('Files manager', ['files:read'], '/files', 'Files'),
  {
    element: 'Files manager, Write access',
    needs: ['files:manage'],
    within: ['files:read'],
    path: () => '/files',
    ready: (page) => page.getByRole('link', { name: 'templates' }),
    parts: [{ locate: (page) => page.getByText(/^Upload to/) }],
  },
  area('Logs', ['reports:read'], '/logs', 'Logs'),
  {
    element: 'Logs, Mark as read',
    needs: ['reports:acknowledge'],
    within: ['reports:read'],
    path: () => '/logs',
    ready: (page) => page.getByTestId('report-row').first(),
    parts: [{ locate: (page) => page.getByRole('button', { name: 'Mark shown as read' }) }],
  },
  area('Map', ['inventory:read'], '/map', 'Map'),
  area('Audit', ['audit:read'], '/audit', 'Audit'),
  {
    element: 'Audit, Show reports',
    needs: ['reports:read'],
    within: ['audit:read'],
    path: () => `/audit?action=${encodeURIComponent('POST /api/v2/commit')}`,
    ready: (page) => page.locator('.audit-table tbody tr').first(),
    parts: [{ locate: (page) => page.getByTestId('audit-show-reports') }],
  },
  area('CVE', ['cve:read'], '/cve', 'CVE'),
  {
    element: 'CVE, Manage',
    needs: ['cve:manage'],
    within: ['cve:read'],
    path: () => '/cve',
    ready: title,
    parts: [{ locate: (page) => page.getByLabel('Import feed (OSV JSON)') }],
  },
  {
    element: 'Remote console',
    needs: REMOTE,
    path: devicePage,
    ready: remotePanel,
    parts: [{ locate: (page) => page.getByRole('heading', { name: 'Tunnels', exact: true }) }],
  },
  {
    element: 'Remote console, Manage',
    needs: ['remote-access:manage'],
    within: REMOTE,
    path: devicePage,
    ready: (page) => page.getByRole('heading', { name: 'Tunnels', exact: true }),
    parts: [{ locate: (page) => page.getByRole('button', { name: 'Add port preset' }) }],
  },
  area('Analysis', ['analysis:read', 'device:read'], '/analysis', 'Analysis'),
  area('Bootstrap Keys', ['bootstrap-keys:read', 'device:read'], '/bootstrap-keys', 'Bootstrap keys'),
  {
    element: 'Bootstrap Keys, Manage',
    needs: ['bootstrap-keys:manage'],
    within: ['bootstrap-keys:read', 'device:read'],
    path: () => '/bootstrap-keys',
    ready: title,
    parts: [{ locate: (page) => page.getByRole('form', { name: 'New bootstrap key' }) }],
  },
  area('Company', ['company:read'], '/company', 'Company'),
  {
    element: 'Company, Manage',
    needs: ['company:manage'],
    within: ['company:read'],
    path: () => '/company',
    ready: (page) => page.getByLabel('Company name'),
    parts: [{ locate: (page) => page.getByRole('button', { name: 'Save' }) }],
  },
  area('Users', ['users:read'], '/users', 'Users'),
  {
    element: 'Users, Manage',
    needs: ['roles:read', 'users:manage'],
    within: ['users:read'],
    path: () => '/users',
    ready: title,
    parts: [{ locate: (page) => page.getByRole('button', { name: 'New user' }) }],
  },
  area('Roles', ['roles:read'], '/roles', 'Roles'),
  {
    element: 'Roles, Manage',
    needs: ['roles:manage'],
    within: ['roles:read'],
    path: () => '/roles',
    ready: title,
    parts: [{ locate: (page) => page.getByRole('link', { name: 'New role' }) }],
  },
  area('Order subscription', ['billing:read'], '/subscription', 'Subscription'),
  {
    element: 'Order subscription, Manage',
    needs: ['billing:manage'],
    within: ['billing:read'],
    path: () => '/subscription',
    ready: (page) => page.getByTestId('subscription-row').first(),
    parts: [
      { locate: (page) => page.getByRole('button', { name: /^Order \d+ seats$/ }) },
      { locate: (page) => page.getByRole('button', { name: 'Open customer portal' }) },
      { locate: (page) => page.getByRole('button', { name: 'Cancel subscription' }) },
    ],
  },
];

/** A call guarded by each permission (the spec's "Calls grouped by permission"), to check the API's side. */
const NOWHERE = '0'.repeat(64);
const CALL: Record<string, () => [string, string, unknown?]> = {
  'analysis:read': () => ['GET', '/analysis/orgstats'],
  'audit:read': () => ['GET', '/commitlist'],
  'billing:read': () => ['GET', '/stripe/subscriptions'],
  'billing:manage': () => ['POST', '/stripe/create-customer-portal', {}],
  'bootstrap-keys:read': () => ['GET', '/bootstrapkeylist'],
  'bootstrap-keys:manage': () => ['DELETE', `/bootstrapkey/${NOWHERE}`],
  'company:read': () => ['GET', `/company/${fx.companyId}`],
  'company:manage': () => ['PATCH', `/company/${fx.companyId}`, { city: 'Trondheim' }],
  'configuration:read': () => ['GET', `/config/${fx.device}`],
  'configuration:manage': () => ['DELETE', '/changes'],
  'cve:read': () => ['GET', '/cvelist'],
  'cve:manage': () => ['GET', '/cve/status/cves'],
  'device:read': () => ['GET', '/grouptree'],
  'device:manage': () => ['PATCH', `/deviceattribute/${fx.device}`, { device_name: 'perm-dev' }],
  'device:approve': () => ['GET', '/pendinghost'],
  'files:read': () => ['GET', '/files'],
  'files:manage': () => ['DELETE', '/file?path=/nothing-here.txt'],
  // The fleet-wide list: a device's own inventory also needs device:read on it (reach is never inferred).
  'inventory:read': () => ['GET', '/inventory'],
  'metrics:read': () => ['GET', `/device/${fx.device}/metrics/latest`],
  'remote-access:connect': () => ['POST', `/remote/reload/${fx.device}`, {}],
  'remote-access:manage': () => ['PATCH', '/service-connect/portmap', { id: NOWHERE, port: 22 }],
  'reports:read': () => ['GET', '/reportlist'],
  'reports:acknowledge': () => ['PATCH', '/reportmarkread', { all: true }],
  'roles:read': () => ['GET', '/roleslist'],
  'roles:manage': () => ['DELETE', `/role/${NOWHERE}`],
  'users:read': () => ['GET', '/userlist'],
  'users:manage': () => ['DELETE', `/user/${NOWHERE}`],
};

interface Check {
  row: Row;
  /** undefined: the holder; else the permission this user lacks. */
  lacking?: Permission;
}

const key = (perms: Permission[]) => [...new Set(perms)].sort().join(' ');
/** Each distinct set of permissions, with the checks its user makes. */
const byUser = new Map<string, Check[]>();
for (const row of TABLE) {
  const held = [...(row.within ?? []), ...row.needs];
  const add = (perms: Permission[], check: Check) => byUser.set(key(perms), [...(byUser.get(key(perms)) ?? []), check]);
  add(held, { row });
  for (const p of row.needs)
    add(
      [...(row.within ?? []), ...row.needs].filter((q) => q !== p),
      { row, lacking: p },
    );
}

async function record(deviceId: string, type: string, data: unknown) {
  const digest = crypto.createHash('sha256').update(JSON.stringify(data)).digest('hex');
  await suite.t.broker.services.inventory.recordItem(deviceId, { type, digest, data });
}

beforeAll(async () => {
  const t = suite.t;
  const admin = { token: t.adminToken };
  fx.device = await t.addDevice({ name: 'perm-dev' });
  fx.companyId = (await t.api('GET', '/api/v2/company', admin)).body.id;
  await record(fx.device, 'users', {
    items: [{ user: 'alice', uid: 1000, gid: 1000, gecos: 'Alice', home: '/home/alice', shell: '/bin/bash', has_pwd: 'yes', pwd_alg: 6, pwd_age: 0 }],
  });
  await record(fx.device, 'ports', { items: [{ proto: 'tcp', socket: '0.0.0.0:22', proc_info: '/usr/sbin/sshd -D' }] });
  const upload = new FormData();
  upload.append('path', '/templates/');
  upload.append('file', new Blob(['hello\n']), 'motd.tpl');
  expect((await t.api('POST', '/api/v2/file', { ...admin, body: upload })).status).toBe(200);
  const commit = await t.api('POST', '/api/v2/commit', {
    ...admin,
    body: {
      action: 'commit',
      message: 'baseline',
      changes: [{ node_id: 'root', formtype: 'ntp', extend: false, config: { enabled: true, servers: ['0.pool.ntp.org'] } }],
    },
  });
  expect(commit.status).toBe(200);
  await t.broker.services.reports.record(fx.device, [
    {
      bundle: 'ntp',
      bundle_commit_id: 'b1',
      commit_id: commit.body.sha,
      labels: '',
      log: '',
      sev: 'INFO',
      text: 'ntp configured',
      ts: Math.floor(Date.now() / 1000),
    },
  ]);
  // A subscription, so that cancelling is offered.
  const checkout = await t.api('POST', '/api/v2/stripe/create-checkout-session', { ...admin, body: { success_url: t.url, cancel_url: t.url } });
  expect(checkout.body).toMatchObject({ id: 'cs_1' });
});

describe('the spec’s UI permission table', () => {
  it('covers every row of the table and a call for every permission it names', () => {
    expect(TABLE.map((r) => r.element)).toHaveLength(32);
    for (const row of TABLE) for (const p of row.needs) expect(CALL[p], p).toBeDefined();
  });

  // One user per distinct set of permissions, signed in once; each of its checks on the same page.
  // Users are independent (nothing here changes what another sees): a few run side by side.
  for (const [perms, checks] of byUser)
    it.concurrent(`holding [${perms}]: ${checks.map((c) => `${c.row.element}${c.lacking ? ` without ${c.lacking}` : ''}`).join('; ')}`, async () => {
      const failures: string[] = [];
      const held = perms ? (perms.split(' ') as Permission[]) : [];
      const user = await suite.t.userWith(held.map((permission) => ({ permission })));
      const { page, expectNoErrorsAndClose } = await suite.open({ as: user });
      page.setDefaultTimeout(5000);
      for (const { row, lacking } of checks) {
        const what = `${row.element} — ${lacking ? `without ${lacking}` : 'holder'} [${perms}]`;
        await page.goto(row.path());
        await row
          .ready(page)
          .or(page.getByText('Access denied'))
          .first()
          .waitFor()
          .catch(() => failures.push(`${what}: the page never got ready`));
        const denied = await page.getByText('Access denied').count();
        if (!lacking) {
          if (denied) failures.push(`${what}: access denied`);
          for (const part of row.parts) {
            const ok = await part
              .locate(page)
              .first()
              .waitFor({ state: 'attached' })
              .then(() => true)
              .catch(() => false);
            if (!ok) failures.push(`${what}: not shown`);
          }
          for (const p of row.needs) {
            const [method, path, body] = CALL[p]();
            const r = await suite.t.api(method, `/api/v2${path}`, { token: user.token, body });
            if (r.status === 403) failures.push(`${what}: ${method} ${path} refused`);
          }
        } else {
          for (const part of row.parts) {
            if (part.perms && !part.perms.includes(lacking)) continue;
            if ((await part.locate(page).count()) > 0) failures.push(`${what}: shown`);
          }
          if (row.gated && !denied) failures.push(`${what}: the page was not refused`);
          const [method, path, body] = CALL[lacking]();
          const r = await suite.t.api(method, `/api/v2${path}`, { token: user.token, body });
          if (r.status !== 403) failures.push(`${what}: ${method} ${path} answered ${r.status}, not 403`);
        }
      }
      expect(failures).toEqual([]);
      await expectNoErrorsAndClose();
    });
});
