import { describe, expect, it } from 'vitest';
import { ADMIN, startTestBroker } from '../support/broker.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

describe('sign-in and sign-out', () => {
  it('shows the API message for a wrong password, then signs in with the keyboard alone', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ as: null, at: '/' });
    await expect.poll(() => page.url()).toMatch(/\/login$/);
    await screenshot(page, 'sign-in');

    // The email field has the focus; Tab reaches the password, Enter submits.
    await expect.poll(() => page.evaluate(() => document.activeElement?.id)).toBe('f-email');
    await page.keyboard.type(ADMIN.email);
    await page.keyboard.press('Tab');
    await page.keyboard.type('wrong-password');
    await page.keyboard.press('Enter');
    const alert = page.getByRole('alert');
    await alert.waitFor();
    expect(await alert.textContent()).toContain('The email or password is wrong.');
    await screenshot(page, 'sign-in-refused');

    await page.getByLabel('Password').fill(ADMIN.password);
    await page.getByLabel('Password').press('Enter');
    await page.getByRole('button', { name: 'Sign out' }).waitFor();
    // The frame is drawn at /login for one render before the effect moves on to the first page.
    await expect.poll(() => new URL(page.url()).pathname).not.toBe('/login');
    await expectNoErrorsAndClose();
  });

  it('says how many minutes a locked-out sign-in must wait, not seconds', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    for (let i = 0; i < 10; i++) {
      const r = await suite.t.api('POST', '/api/v2/login', { body: { email: user.email, password: `wrong-${i}` } });
      expect(r.status).toBe(401);
    }
    const { page, expectNoErrorsAndClose } = await suite.open({ as: null, at: '/login' });
    await page.getByLabel('Email').fill(user.email);
    await page.getByLabel('Password').fill(user.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    const alert = page.getByRole('alert');
    await alert.waitFor();
    expect(await alert.textContent()).toMatch(/try again in 1?\d minutes?\./);
    expect(await alert.textContent()).not.toMatch(/\d+ s\b/);
    await screenshot(page, 'sign-in-locked-out');
    await expectNoErrorsAndClose();
  });

  it('signs out: the token is revoked and the console asks to sign in again', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    const token = await page.evaluate(() => sessionStorage.getItem('fleet.token'));
    expect(token).toMatch(/^ey/);
    expect((await suite.t.api('GET', '/api/v2/commitlist', { token: token as string })).status).toBe(200);

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('button', { name: 'Sign in' }).waitFor();
    expect(await page.getByRole('status').first().textContent()).toContain('signed out');
    expect(new URL(page.url()).pathname).toBe('/login');
    expect((await suite.t.api('GET', '/api/v2/commitlist', { token: token as string })).status).toBe(401);

    // A new visit does not sign in again by itself: the refresh cookie was revoked too.
    await page.goto('/audit');
    await page.getByRole('button', { name: 'Sign in' }).waitFor();
    expect(await page.evaluate(() => sessionStorage.getItem('fleet.token'))).toBeNull();
    await expectNoErrorsAndClose();
  });

  it('gives each page opened as the same user a session of its own: signing out of one leaves the other signed in', async () => {
    const first = await suite.open({ at: '/audit' });
    const second = await suite.open({ at: '/audit' });
    const tokens = await Promise.all([first, second].map(({ page }) => page.evaluate(() => sessionStorage.getItem('fleet.token'))));
    expect(tokens[0]).toMatch(/^ey/);
    expect(tokens[1]).toMatch(/^ey/);

    await first.page.getByRole('button', { name: 'Sign out' }).click();
    await first.page.getByRole('button', { name: 'Sign in' }).waitFor();
    expect((await suite.t.api('GET', '/api/v2/commitlist', { token: tokens[0] as string })).status).toBe(401);

    expect((await suite.t.api('GET', '/api/v2/commitlist', { token: tokens[1] as string })).status).toBe(200);
    await second.page.reload();
    await second.page.getByRole('heading', { name: 'Audit' }).waitFor();
    await first.expectNoErrorsAndClose();
    await second.expectNoErrorsAndClose();
  });

  it('keeps the session across a reload and returns to the page asked for after sign-in', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ as: null, at: '/audit?result=denied' });
    await page.getByRole('button', { name: 'Sign in' }).waitFor();
    await page.getByLabel('Email').fill(ADMIN.email);
    await page.getByLabel('Password').fill(ADMIN.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Audit' }).waitFor();
    expect(new URL(page.url()).search).toBe('?result=denied');

    await page.reload();
    await page.getByRole('heading', { name: 'Audit' }).waitFor();
    expect(await page.getByRole('button', { name: 'Sign out' }).isVisible()).toBe(true);
    await expectNoErrorsAndClose();
  });
});

describe('navigation', () => {
  it('offers every area to the administrator, and each screen renders a heading or the API message', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    const nav = page.getByRole('navigation', { name: 'Main' });
    const areas = [
      ['Devices', 'devices'],
      ['Pending hosts', 'pending-hosts'],
      ['Bootstrap keys', 'bootstrap-keys'],
      ['Files', 'files'],
      ['Users', 'users'],
      ['Roles', 'roles'],
      ['Sessions', 'active-sessions'],
      ['Audit', 'audit'],
    ] as const;
    for (const [label, shot] of areas) {
      await nav.getByRole('link', { name: label, exact: true }).click();
      await page.getByRole('heading', { level: 1, name: label }).waitFor();
      await expect.poll(() => page.locator('.loading').count()).toBe(0);
      expect(await nav.getByRole('link', { name: label, exact: true }).getAttribute('aria-current')).toBe('page');
      // Never a blank page: the main area has content.
      expect(((await page.locator('main').textContent()) ?? '').trim().length).toBeGreaterThan(label.length);
      await screenshot(page, shot);
    }
    await page.getByRole('link', { name: 'Profile admin@example.com' }).click();
    await page.getByRole('heading', { level: 1, name: 'Profile' }).waitFor();
    await screenshot(page, 'profile');

    await page.goto('/no-such-page');
    await page.getByText('There is no page at /no-such-page').waitFor();
    await expectNoErrorsAndClose();
  });

  it('fits a phone-width window: the menu folds behind a button', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 } });
    const nav = page.getByRole('navigation', { name: 'Main' });
    expect(await nav.isVisible()).toBe(false);
    await page.getByRole('button', { name: 'Menu' }).click();
    expect(await nav.isVisible()).toBe(true);
    await screenshot(page, 'phone-menu');
    await nav.getByRole('link', { name: 'Audit', exact: true }).click();
    await page.getByRole('heading', { level: 1, name: 'Audit' }).waitFor();
    expect(await nav.isVisible()).toBe(false);
    // Nothing wider than the window but the scrollable tables.
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    await screenshot(page, 'phone-audit');
    await expectNoErrorsAndClose();
  });
});

describe('access denied', () => {
  it('shows "Access denied" with the reason when the user may not use an area', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user, at: '/audit' });
    const alert = page.getByRole('alert');
    await alert.waitFor();
    expect(await alert.textContent()).toContain('Access denied');
    await screenshot(page, 'access-denied');

    await page.goto('/users');
    await page.getByRole('alert').waitFor();
    expect(await page.getByRole('alert').textContent()).toContain('Access denied');
    await expectNoErrorsAndClose();
  });
});

describe('audit view', () => {
  it('lists remote-access attempts and filters them by result and device', async () => {
    const audit = suite.t.broker.services.audit;
    const admin = await suite.t.api('GET', '/api/v2/commitlist', { token: suite.t.adminToken });
    expect(admin.status).toBe(200);
    const deviceA = 'a'.repeat(64);
    const deviceB = 'b'.repeat(64);
    const user = { id: 'u-audit', email: 'operator@example.com' };
    const base = { user, action: 'console', options: {}, ip: '192.0.2.7', source: 'web' as const };
    await audit.recordRemoteStart({ ...base, event: 'remote.console', deviceId: deviceA, allowed: true, reason: 'tag:lab/console' });
    await audit.recordRemoteStart({ ...base, event: 'remote.console', deviceId: deviceB, allowed: false, reason: 'no matching resource' });
    await audit.recordRemoteStart({
      ...base,
      event: 'remote.tunnel',
      action: 'tunnel',
      deviceId: deviceA,
      allowed: false,
      options: { proto: 'tcp', port: 22 },
      reason: 'port not allowed',
    });

    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/audit' });
    const rows = page.locator('table.audit-table tbody tr');
    await rows.first().waitFor();
    expect(await rows.count()).toBeGreaterThanOrEqual(3);
    await screenshot(page, 'audit-all');

    // Refused calls of other tests (a sign-out with a spent token…) are denied entries too: remote access only here.
    await page.getByLabel('Entries').selectOption('remote');
    await page.getByLabel('Result').selectOption('denied');
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect.poll(() => page.url()).toContain('result=denied');
    await expect.poll(() => rows.count()).toBe(2);
    expect(await rows.allTextContents()).toEqual([expect.stringContaining('port not allowed'), expect.stringContaining('no matching resource')]);

    await page.getByLabel('Device', { exact: true }).fill(deviceA);
    await page.getByRole('button', { name: 'Filter' }).click();
    await expect.poll(() => rows.count()).toBe(1);
    expect(await rows.first().textContent()).toContain('tunnel');
    expect(await rows.first().textContent()).toContain('operator@example.com');
    await screenshot(page, 'audit-filtered');

    await page.getByRole('button', { name: 'Clear' }).click();
    await expect.poll(() => rows.count()).toBeGreaterThanOrEqual(3);

    await page.getByRole('button', { name: 'Verify chain' }).click();
    await expect.poll(() => page.getByRole('status', { name: 'Chain' }).textContent()).toMatch(/^Chain intact: \d+ entries\.$/);
    await expectNoErrorsAndClose();
  });
});

describe('audit view at a glance', () => {
  it('names the device (its id on hover) and wraps event names only between words', async () => {
    const device = await suite.t.addDevice({ name: 'audit-gateway' });
    await suite.t.broker.services.audit.recordRemoteStart({
      user: { id: 'u-audit-2', email: 'operator-2@example.com' },
      action: 'console',
      options: {},
      ip: '192.0.2.8',
      source: 'web',
      event: 'remote.console',
      deviceId: device,
      allowed: false,
      reason: 'no matching resource',
    });
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 }, at: `/audit?device_id=${device}` });
    const row = page.locator('table.audit-table tbody tr').first();
    await row.waitFor();
    const link = row.getByRole('link', { name: 'audit-gateway' });
    await link.waitFor();
    expect(await link.getAttribute('title')).toBe(device);
    await screenshot(page, 'audit-phone');
    // Every word of every event name lies on one line (its rectangles share one top).
    const brokenWords = await page.evaluate(() => {
      const broken: string[] = [];
      for (const cell of document.querySelectorAll('table.audit-table tbody tr td:nth-child(5)')) {
        const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
        for (let node = walker.nextNode(); node; node = walker.nextNode()) {
          for (const m of (node.textContent ?? '').matchAll(/[A-Za-z_]+/g)) {
            const range = document.createRange();
            range.setStart(node, m.index ?? 0);
            range.setEnd(node, (m.index ?? 0) + m[0].length);
            const tops = new Set([...range.getClientRects()].map((r) => Math.round(r.top)));
            if (tops.size > 1) broken.push(m[0]);
          }
        }
      }
      return broken;
    });
    expect(brokenWords).toEqual([]);
    await expectNoErrorsAndClose();
  });
});

describe('token renewal', () => {
  it('renews the token before it expires, so a long-open console keeps working', async () => {
    const short = await startTestBroker({ env: { TOKEN_TTL_SECONDS: '10' } });
    try {
      const { page, expectNoErrorsAndClose } = await suite.open({ broker: short });
      const first = await page.evaluate(() => sessionStorage.getItem('fleet.token'));
      // The console renews at 80% of the lifetime; wait until the token changed.
      await expect.poll(() => page.evaluate(() => sessionStorage.getItem('fleet.token')), { timeout: 20_000, interval: 500 }).not.toBe(first);
      await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Audit', exact: true }).click();
      await page.getByRole('heading', { level: 1, name: 'Audit' }).waitFor();
      await expect.poll(() => page.locator('table.audit-table').count()).toBe(1);
      await expectNoErrorsAndClose();
    } finally {
      await short.close();
    }
  });
});
