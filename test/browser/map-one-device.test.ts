/**
 * The Map with one placed device: it fits a region around it (zoom no closer than the outline's
 * least view) with the bundled outline's land and sea both in sight, not a zoom into a
 * featureless fill — on a desktop and a phone.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { Page } from 'playwright-core';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();

beforeAll(async () => {
  const oslo = await suite.t.addDevice({ name: 'only-gw' });
  const res = await suite.t.api('PATCH', `/api/v2/deviceattribute/${oslo}`, { token: suite.t.adminToken, body: { latitude: '59.91', longitude: '10.75' } });
  expect(res.status).toBe(200);
});

/** Shares of the map's pixels that are the outline's sea (#dbe8f3) and land fill (#e4e8ee). */
async function landAndSea(page: Page): Promise<{ sea: number; land: number }> {
  const png = (await page.getByTestId('map').screenshot()).toString('base64');
  return page.evaluate(async (data) => {
    const img = new Image();
    img.src = `data:image/png;base64,${data}`;
    await img.decode();
    const canvas = document.createElement('canvas');
    canvas.width = img.width;
    canvas.height = img.height;
    const ctx = canvas.getContext('2d')!;
    ctx.drawImage(img, 0, 0);
    const px = ctx.getImageData(0, 0, img.width, img.height).data;
    const near = (i: number, [r, g, b]: number[]) => Math.abs(px[i] - r) <= 3 && Math.abs(px[i + 1] - g) <= 3 && Math.abs(px[i + 2] - b) <= 3;
    let sea = 0;
    let land = 0;
    for (let i = 0; i < px.length; i += 4) {
      if (near(i, [0xdb, 0xe8, 0xf3])) sea += 1;
      else if (near(i, [0xe4, 0xe8, 0xee])) land += 1;
    }
    const all = px.length / 4;
    return { sea: sea / all, land: land / all };
  }, png);
}

async function checkView(page: Page, shot: string): Promise<void> {
  await page.goto('/map');
  const map = page.getByTestId('map');
  await expect.poll(() => map.locator('path.device-marker').count()).toBe(1);
  await expect.poll(async () => Number(await map.getAttribute('data-zoom'))).toBeGreaterThan(1);
  const zoom = Number(await map.getAttribute('data-zoom'));
  expect(zoom).toBeLessThanOrEqual(5);
  // The marker is in view.
  const box = (await map.boundingBox())!;
  const marker = (await map.locator('path.device-marker').boundingBox())!;
  expect(marker.x).toBeGreaterThan(box.x);
  expect(marker.x + marker.width).toBeLessThan(box.x + box.width);
  expect(marker.y).toBeGreaterThan(box.y);
  expect(marker.y + marker.height).toBeLessThan(box.y + box.height);
  // Coasts in sight: land and sea each fill a fair part of the map.
  const shares = await landAndSea(page);
  expect(shares.sea).toBeGreaterThan(0.05);
  expect(shares.land).toBeGreaterThan(0.05);
  await screenshot(page, shot);
}

describe('Map with one device', () => {
  it('fits a region around it with the outline in sight, not a zoom into the fill', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    await checkView(page, 'map-one-device');
    await expectNoErrorsAndClose();
  });

  it('does so at phone width too', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 }, touch: true });
    await checkView(page, 'phone-map-one-device');
    await expectNoErrorsAndClose();
  });
});
