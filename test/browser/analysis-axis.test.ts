/**
 * The Analysis charts' time axis is the range the user chose: with one device that sent one sample
 * an hour ago, "Last 24 hours" spans those 24 hours (not years around one dot at the edge), and
 * "7 days" spans the week — for the fleet charts and a device's.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { useBrowserSuite, screenshot } from '../support/browser.js';

const suite = useBrowserSuite();
let device: string;
let sampledAt: number;

beforeAll(async () => {
  device = await suite.t.addDevice({ name: 'lonely-01' });
  sampledAt = Math.floor(Date.now() / 1000) - 3600;
  await suite.t.broker.services.metrics.ingest(device, [{ label: 'cpu', ts: sampledAt, values: { user: 12, system: 3, iowait: 1 } }]);
});

/** The x axis uPlot drew, in Unix seconds. */
async function axis(page: Page, key: string): Promise<[number, number]> {
  const box = page.getByTestId(`chart-${key}`).locator('.chart-box');
  await expect.poll(() => box.getAttribute('data-x-max'), { timeout: 20_000 }).not.toBeNull();
  return [Number(await box.getAttribute('data-x-min')), Number(await box.getAttribute('data-x-max'))];
}

function expectSpan([min, max]: [number, number], seconds: number): void {
  const now = Math.floor(Date.now() / 1000);
  // The range ends now (the page was loaded a moment ago) and begins `seconds` before, to the hour
  // (the hourly bucket that began before the range).
  expect(max).toBeGreaterThan(now - 600);
  expect(max).toBeLessThanOrEqual(now + 60);
  expect(max - min).toBeGreaterThanOrEqual(seconds - 60);
  expect(max - min).toBeLessThanOrEqual(seconds + 3600 + 60);
  expect(min).toBeLessThanOrEqual(sampledAt);
}

describe('Analysis time axis', () => {
  it('spans the chosen range for the fleet charts with one sample: 24 hours, then 7 days', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/analysis' });
    expectSpan(await axis(page, 'cpu'), 86400);
    await screenshot(page, 'analysis-one-sample-24h');
    await page.getByLabel('Time range').selectOption('7d');
    await expect.poll(async () => (await axis(page, 'cpu'))[1] - (await axis(page, 'cpu'))[0], { timeout: 20_000 }).toBeGreaterThan(86400 * 2);
    expectSpan(await axis(page, 'cpu'), 7 * 86400);
    await expectNoErrorsAndClose();
  });

  it('spans the chosen range for one device’s charts, at phone width too', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 }, touch: true, at: `/analysis?device=${device}` });
    expectSpan(await axis(page, 'cpu'), 86400);
    expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
    await screenshot(page, 'phone-analysis-one-sample');
    await expectNoErrorsAndClose();
  });
});
