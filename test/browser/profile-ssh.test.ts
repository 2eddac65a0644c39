import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const PHONE = { viewport: { width: 390, height: 844 }, touch: true };

describe('SSH access on the Profile page, gateway on', () => {
  const suite = useBrowserSuite({ env: { SSH_PORT: '0' } });

  it('shows the set-up commands, the config block and known_hosts line the API answers, copyable, on desktop and phone', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    const setup = (await suite.t.api('GET', '/api/v2/ssh/config', { token: user.token })).body;
    expect(setup.enabled).toBe(true);
    for (const phone of [false, true]) {
      const { page, context, expectNoErrorsAndClose } = await suite.open({ as: user, ...(phone ? PHONE : {}) });
      await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: suite.t.url });
      await page.goto('/profile');
      await page.getByRole('heading', { name: 'SSH access' }).waitFor();
      const commands = page.getByTestId('ssh-commands');
      await commands.waitFor();
      expect(await commands.textContent()).toBe(`fleet login --url ${setup.url}\nfleet ssh-config >> ~/.ssh/config`);
      expect(await page.getByTestId('ssh-config').textContent()).toBe(setup.ssh_config);
      expect(await page.getByTestId('ssh-known-hosts').textContent()).toBe(setup.known_hosts);
      expect(await page.getByTestId('ssh-example').textContent()).toBe(`ssh root@<device name>.${setup.host}`);
      expect(await page.getByTestId('ssh-off').count()).toBe(0);

      await page.getByRole('button', { name: 'Copy SSH config' }).click();
      await expect.poll(() => page.evaluate(() => navigator.clipboard.readText()), { timeout: 10_000 }).toBe(setup.ssh_config);
      await page.getByRole('button', { name: 'Copy set-up commands' }).click();
      await expect.poll(() => page.evaluate(() => navigator.clipboard.readText()), { timeout: 10_000 }).toContain('fleet ssh-config >> ~/.ssh/config');

      if (phone) {
        expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
        await page.getByRole('heading', { name: 'SSH access' }).scrollIntoViewIfNeeded();
        await screenshot(page, 'phone-profile-ssh');
      } else {
        await page.getByRole('heading', { name: 'SSH access' }).scrollIntoViewIfNeeded();
        await screenshot(page, 'profile-ssh');
      }
      await expectNoErrorsAndClose();
    }
  });
});

describe('SSH access on the Profile page, gateway off', () => {
  const suite = useBrowserSuite();

  it('says in one sentence that the operator has not turned the gateway on, and shows no commands', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    for (const phone of [false, true]) {
      const { page, expectNoErrorsAndClose } = await suite.open({ as: user, ...(phone ? PHONE : {}), at: '/profile' });
      const off = page.getByTestId('ssh-off');
      await off.waitFor();
      expect(await off.textContent()).toMatch(/has not turned the SSH gateway on \(SSH_PORT\)/);
      expect(await page.getByTestId('ssh-commands').count()).toBe(0);
      expect(await page.getByTestId('ssh-config').count()).toBe(0);
      if (phone) expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
      await expectNoErrorsAndClose();
    }
  });
});
