/**
 * The navigation's link to the signed-in user's own page reads "Profile" with their email, on a
 * desktop and in a phone's menu: never a bare first name such as the first administrator's "Admin",
 * which reads like an administration area.
 */
import { describe, expect, it } from 'vitest';
import { ADMIN } from '../support/broker.js';
import { useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

for (const viewport of [undefined, { width: 390, height: 844 }]) {
  describe(`the profile link ${viewport ? 'on a phone' : 'on a desktop'}`, () => {
    it('says Profile and whose it is, and leads to the Profile page', async () => {
      const { page, expectNoErrorsAndClose } = await suite.open({ viewport });
      if (viewport) await page.getByRole('button', { name: 'Menu' }).click();
      const nav = page.getByRole('navigation', { name: 'Main' });
      // The first administrator's first name is "Admin": no link reads so.
      expect(await nav.getByRole('link', { name: 'Admin', exact: true }).count()).toBe(0);
      const link = nav.getByRole('link', { name: `Profile ${ADMIN.email}`, exact: true });
      expect(await link.getAttribute('title')).toBe(`Admin · ${ADMIN.email}`);
      await link.click();
      await page.getByRole('heading', { level: 1, name: 'Profile' }).waitFor();
      if (viewport) await page.getByRole('button', { name: 'Menu' }).click();
      expect(await link.getAttribute('aria-current')).toBe('page');
      await expectNoErrorsAndClose();
    });
  });
}
