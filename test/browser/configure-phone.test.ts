/**
 * Configure on a desktop and a 390 px phone: checkboxes sit beside their labels, "not set" reads
 * differently from "off", and the form fits the phone without scrolling sideways.
 */
import type { Page } from 'playwright-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

beforeAll(async () => {
  await suite.t.addGroup({ id: 'north', title: 'North' });
  await suite.t.addDevice({ parent: 'north', name: 'north-01' });
});

/** How far each checkbox of the form sits from its label's text: centres' vertical distance, and its width. */
function checkboxLayout(page: Page) {
  return page.getByTestId('bundle-settings').evaluate((root) =>
    [...root.querySelectorAll('label.check')].map((label) => {
      const box = label.querySelector('input[type=checkbox]')!.getBoundingClientRect();
      const text = label.querySelector('span')!.getBoundingClientRect();
      return { width: box.width, offset: Math.abs(box.top + box.height / 2 - (text.top + text.height / 2)), gap: text.left - box.right };
    }),
  );
}

for (const viewport of [undefined, { width: 390, height: 844 }]) {
  describe(`Configure ${viewport ? 'on a phone' : 'on a desktop'}`, () => {
    it('aligns checkboxes with their labels, tells "not set" from "off", and fits without sideways scrolling', async () => {
      const { page, expectNoErrorsAndClose } = await suite.open({ viewport, at: '/configure' });
      if (viewport) await page.getByRole('navigation', { name: 'Entities' }).waitFor();
      await page.getByRole('navigation', { name: 'Entities' }).getByRole('link', { name: 'north-01' }).click();
      await page.getByRole('tab', { name: /^settings/ }).click();
      const form = page.getByTestId('bundle-settings');
      const reports = form.getByRole('checkbox', { name: /^Send reports/ });
      await reports.waitFor();

      // Nothing set: each switch says so, and is neither on nor off.
      const state = form.getByTestId('state-reports');
      expect(await state.textContent()).toBe('not set');
      expect(await reports.evaluate((el) => (el as HTMLInputElement).indeterminate)).toBe(true);
      await reports.check();
      expect(await state.textContent()).toBe('on');
      await reports.uncheck();
      expect(await state.textContent()).toBe('off');
      expect(await reports.evaluate((el) => (el as HTMLInputElement).indeterminate)).toBe(false);
      expect(await form.getByTestId('state-metrics').textContent()).toBe('not set');

      for (const box of await checkboxLayout(page)) {
        expect(box.width).toBeLessThan(30);
        expect(box.offset).toBeLessThan(4);
        expect(box.gap).toBeGreaterThanOrEqual(0);
        expect(box.gap).toBeLessThan(16);
      }
      const overflow = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth }));
      expect(overflow.scroll).toBeLessThanOrEqual(overflow.client);
      const formOverflow = await form.evaluate((el) => ({ scroll: el.scrollWidth, client: el.clientWidth }));
      expect(formOverflow.scroll).toBeLessThanOrEqual(formOverflow.client);
      await screenshot(page, `configure-settings${viewport ? '-phone' : ''}`);

      // The widest form, a list in a list with a file picker, fits too.
      await page.getByRole('tab', { name: /^file_distribution/ }).click();
      const files = page.getByTestId('bundle-file_distribution');
      await files.getByRole('button', { name: 'Add file set' }).click();
      await files.getByRole('button', { name: 'Add file', exact: true }).click();
      await files.getByLabel('Destination on the device').waitFor();
      const wide = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, client: document.documentElement.clientWidth }));
      expect(wide.scroll).toBeLessThanOrEqual(wide.client);
      const filesOverflow = await files.evaluate((el) => ({ scroll: el.scrollWidth, client: el.clientWidth }));
      expect(filesOverflow.scroll).toBeLessThanOrEqual(filesOverflow.client);
      await screenshot(page, `configure-files${viewport ? '-phone' : ''}`);
      await expectNoErrorsAndClose();
    });
  });
}
