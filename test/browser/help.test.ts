/**
 * Help in the console: the README and the pages of docs/, reached from the navigation, with links
 * between pages and to their sections kept inside the console.
 */
import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

describe('help', () => {
  it('opens the overview from the navigation and follows its links to a page and a section', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/dashboard' });
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Help' }).click();
    await expect.poll(() => page.locator('.help h1').first().textContent()).toContain('Fleet');
    expect(new URL(page.url()).pathname).toBe('/help');
    // The README's screenshots are drawn.
    await expect
      .poll(() =>
        page
          .locator('.help img')
          .first()
          .evaluate((img) => (img as HTMLImageElement).naturalWidth),
      )
      .toBeGreaterThan(100);

    await page.locator('.help').getByRole('link', { name: 'Operator guide' }).click();
    await expect.poll(() => page.locator('.help h1').first().textContent()).toBe('Operator guide');
    expect(new URL(page.url()).pathname).toBe('/help/operator-guide');
    await screenshot(page, 'help-operator-guide');

    // A link to a section of another page lands on that heading.
    await page.goto('/help/security');
    await page.locator('.help a[href="/help/several-brokers#faults-what-survives-what"]').first().click();
    await expect.poll(() => new URL(page.url()).pathname).toBe('/help/several-brokers');
    await expect.poll(() => page.locator('#faults-what-survives-what').evaluate((h) => h.getBoundingClientRect().top)).toBeLessThan(200);
    await expectNoErrorsAndClose();
  });

  it('says so for a page that does not exist', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/help/no-such-page' });
    await expect.poll(() => page.locator('.help h1').textContent()).toBe('No such help page');
    await expectNoErrorsAndClose();
  });

  it('is reachable at phone width through the menu', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 }, touch: true, at: '/dashboard' });
    await page.getByRole('button', { name: 'Menu' }).click();
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Help' }).click();
    await expect.poll(() => page.locator('.help h1').first().textContent()).toContain('Fleet');
    // The page fits the screen: wide tables and code scroll inside themselves.
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth + 1)).toBe(true);
    await expectNoErrorsAndClose();
  });
});
