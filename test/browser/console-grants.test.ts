/**
 * Console grants name the login (`user=`); one without it opens the agent's own account, root on a
 * packaged install. The role editor says which account each console grant opens and warns when it
 * is the agent's own; the user's own profile shows the same for their grants — desktop and phone.
 */
import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

describe('console grants in the role editor', () => {
  it('warns about a console grant without user= as it is typed, and names the login of one with it', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/roles' });
    await page.getByRole('link', { name: 'New role' }).click();
    await page.getByRole('heading', { level: 1, name: 'New role' }).waitFor();
    await page.getByLabel('Name').fill('Console only');
    await page.getByRole('button', { name: 'Add permission' }).click();
    const policy = page.locator('li.policy').first();
    await policy.getByLabel('Permission').selectOption('remote-access:connect');
    const resource = policy.getByLabel('Resource 1 of remote-access:connect');

    await resource.fill('tag:lab/console');
    const warning = policy.getByTestId('console-account-warning');
    await warning.waitFor();
    expect(await warning.textContent()).toContain('tag:lab/console');
    expect(await warning.textContent()).toContain('root on a packaged install');
    expect(await warning.textContent()).toContain('tag:lab/console(user=operator)');
    await screenshot(page, 'role-console-root-warning');

    // A tunnel grant opens no console: no warning.
    await resource.fill('tag:lab/tunnel(port=22)');
    await expect.poll(() => warning.count()).toBe(0);

    // Naming the login: no warning, the login shown.
    await resource.fill('tag:lab/console(user=ops)');
    await expect.poll(() => warning.count()).toBe(0);
    expect(await policy.getByTestId('console-account').textContent()).toContain('runs as ops');
    await expectNoErrorsAndClose();
  });
});

describe('console grants in the user’s own view', () => {
  it('shows a user which account their consoles open, with the warning for the agent’s own, on a phone too', async () => {
    const user = await suite.t.userWith([
      { permission: 'remote-access:connect', resources: ['*/console', 'tag:ops/console(user=ops)'] },
      { permission: 'device:read' },
    ]);
    for (const phone of [false, true]) {
      const { page, expectNoErrorsAndClose } = await suite.open({
        as: user,
        ...(phone ? { viewport: { width: 390, height: 844 }, touch: true } : {}),
        at: '/profile',
      });
      const warning = page.getByTestId('console-account-warning');
      await warning.waitFor();
      expect(await warning.textContent()).toContain('*/console');
      expect(await warning.textContent()).toContain('root on a packaged install');
      expect(await page.getByTestId('console-account').textContent()).toContain('tag:ops/console(user=ops) runs as ops');
      if (phone) {
        expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
        await screenshot(page, 'phone-profile-console-grants');
      }
      await expectNoErrorsAndClose();
    }
  });

  it('shows nothing of the kind to a user without a console grant', async () => {
    const user = await suite.t.userWith([{ permission: 'remote-access:connect', resources: ['*/tunnel(port=22)'] }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user, at: '/profile' });
    await page.getByRole('heading', { name: 'What your roles allow' }).waitFor();
    expect(await page.getByTestId('console-account-warning').count()).toBe(0);
    expect(await page.getByRole('heading', { name: 'Consoles you may open' }).count()).toBe(0);
    await expectNoErrorsAndClose();
  });
});
