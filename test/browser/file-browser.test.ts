/**
 * The device page's file browser against a real agent: a user whose copy grant names one folder
 * lists it, opens a subfolder, downloads a file (its bytes checked), uploads by the file input and
 * by a dropped file with progress shown, is refused a symlink leading out of the grant, and can
 * use it all at phone width.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { downloaded, screenshot, useBrowserSuite } from '../support/browser.js';

let agent: TestAgent;
let device: string;
let work: string;
let root: string;
let user: { email: string; password: string };

const suite = useBrowserSuite();
const PHONE = { width: 390, height: 844 };

beforeAll(async () => {
  ({ agent, device } = await startEnrolledAgent(suite.t));
  work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-browser-files-')));
  root = path.join(work, 'granted');
  fs.mkdirSync(path.join(root, 'logs'), { recursive: true });
  fs.writeFileSync(path.join(root, 'logs', 'app.log'), 'line one\nline two\n');
  fs.writeFileSync(path.join(root, 'readme.txt'), 'hello');
  fs.writeFileSync(path.join(work, 'secret.txt'), 'not for you');
  fs.symlinkSync(work, path.join(root, 'escape'));
  user = await suite.t.userWith([
    { permission: 'remote-access:connect', resources: [`*/copy(path=${root})`] },
    { permission: 'device:read', resources: ['*'] },
  ]);
});

afterAll(async () => {
  await agent?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('file browser on the device page', () => {
  it('lists the granted folder, opens a folder, downloads, uploads by input and by drop with progress', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user, at: `/devices/${device}` });
    await page.getByRole('heading', { name: 'Files on the device' }).waitFor();
    const table = page.getByRole('table', { name: `Files in ${root}` });
    await table.waitFor({ timeout: 20_000 });
    expect(await table.locator('tbody tr').allTextContents()).toEqual([
      expect.stringContaining('logs'),
      expect.stringContaining('escape'),
      expect.stringContaining('readme.txt'),
    ]);

    // Open a folder and download a file from it: the same bytes.
    await table.getByRole('button', { name: 'Open logs' }).click();
    const logs = page.getByRole('table', { name: `Files in ${root}/logs` });
    await logs.waitFor();
    const [download] = await Promise.all([page.waitForEvent('download'), logs.getByRole('button', { name: 'Download app.log' }).click()]);
    expect(download.suggestedFilename()).toBe('app.log');
    expect((await downloaded(download)).toString('utf8')).toBe('line one\nline two\n');
    await page.getByText('Downloaded app.log').waitFor();

    // Upload through the file input, with progress shown; the folder is listed again with it.
    const content = crypto.randomBytes(4 * 1024 * 1024);
    const sawProgress = page.waitForSelector('[data-testid=browser-progress] progress', { timeout: 15_000 }).then(() => true);
    await page.getByLabel(`Upload files to ${root}/logs`).setInputFiles({ name: 'firmware.bin', mimeType: 'application/octet-stream', buffer: content });
    expect(await sawProgress).toBe(true);
    await page.getByText(`Uploaded firmware.bin to ${root}/logs.`).waitFor({ timeout: 30_000 });
    expect(fs.readFileSync(path.join(root, 'logs', 'firmware.bin')).equals(content)).toBe(true);
    await logs.getByRole('button', { name: 'Download firmware.bin' }).waitFor();

    // Up again, and drop a file on the drop zone (a synthetic drop event carrying a File).
    await page.getByRole('button', { name: 'Up', exact: true }).click();
    await table.waitFor();
    await page.getByTestId('drop-zone').evaluate((zone) => {
      const data = new DataTransfer();
      data.items.add(new File(['dropped bytes'], 'dropped.txt', { type: 'text/plain' }));
      zone.dispatchEvent(new DragEvent('dragenter', { dataTransfer: data, bubbles: true, cancelable: true }));
      zone.dispatchEvent(new DragEvent('drop', { dataTransfer: data, bubbles: true, cancelable: true }));
    });
    await page.getByText(`Uploaded dropped.txt to ${root}.`).waitFor({ timeout: 30_000 });
    expect(fs.readFileSync(path.join(root, 'dropped.txt'), 'utf8')).toBe('dropped bytes');
    await table.getByText('dropped.txt').waitFor();
    await screenshot(page, 'device-file-browser');

    // A symlink leading out of the grant is refused by the device, and nothing of the outside shows.
    await table.getByRole('button', { name: 'Open escape' }).click();
    await page.getByRole('alert').filter({ hasText: 'Access denied' }).waitFor();
    expect(await page.getByText('secret.txt').count()).toBe(0);
    await expectNoErrorsAndClose();
  });

  it('is usable at phone width: the listing fits and folders open', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user, viewport: PHONE, touch: true, at: `/devices/${device}` });
    const table = page.getByRole('table', { name: `Files in ${root}` });
    await table.waitFor({ timeout: 20_000 });
    await page.getByRole('heading', { name: 'Files on the device' }).scrollIntoViewIfNeeded();
    expect(await page.evaluate(() => document.documentElement.scrollWidth <= window.innerWidth)).toBe(true);
    await table.getByRole('button', { name: 'Open logs' }).tap();
    await page.getByRole('table', { name: `Files in ${root}/logs` }).waitFor();
    await screenshot(page, 'device-file-browser-phone');
    await expectNoErrorsAndClose();
  });
});
