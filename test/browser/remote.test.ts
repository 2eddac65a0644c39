/**
 * The web console against a real agent process: the xterm.js console (typing, output, resize,
 * flow control, end of session), file transfer both ways with progress, and agent reload.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { downloaded, screenshot, useBrowserSuite } from '../support/browser.js';

let agent: TestAgent;
let device: string;
let work: string;

const suite = useBrowserSuite();

// After the suite's broker is up, a real agent enrols with an auto-accept key and connects.
beforeAll(async () => {
  ({ agent, device } = await startEnrolledAgent(suite.t));
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-browser-remote-'));
});

afterAll(async () => {
  await agent?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

/** What the terminal shows, row by row (xterm's DOM renderer). */
function screenText(page: Page): Promise<string> {
  return page.locator('.xterm-rows').innerText();
}

async function typeCommand(page: Page, command: string): Promise<void> {
  // Typed only once the terminal holds the focus: keys that reach the login-user select instead pick
  // an option by typeahead (the "d" of `id` chose "daemon") and switch the console's user.
  await expect
    .poll(async () => {
      await page.locator('.xterm-helper-textarea').focus();
      return page.evaluate(() => document.activeElement?.classList.contains('xterm-helper-textarea') ?? false);
    })
    .toBe(true);
  await page.keyboard.type(command);
  await page.keyboard.press('Enter');
}

describe('console to a real agent', () => {
  it('opens from the device page, runs a typed command, follows the window size and ends with a clear message', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}` });
    await page.getByTestId('open-console').click();
    await expect.poll(() => page.getByTestId('console-status').textContent(), { timeout: 20_000 }).toBe('Connected');
    expect(new URL(page.url()).pathname).toBe(`/console/${device}`);

    await typeCommand(page, 'echo fleet-$((6*7))');
    await expect.poll(() => screenText(page), { timeout: 15_000 }).toContain('fleet-42');
    await screenshot(page, 'console');

    // The terminal fills the window and follows its size.
    await typeCommand(page, 'echo size-$(stty size | tr " " x)');
    await expect.poll(async () => /size-(\d+x\d+)/.exec(await screenText(page))?.[1], { timeout: 15_000 }).toBeDefined();
    const before = /size-(\d+x\d+)/.exec(await screenText(page))?.[1];
    await page.setViewportSize({ width: 900, height: 560 });
    await typeCommand(page, 'clear; echo resized-$(stty size | tr " " x)');
    const after = await eventually(async () => /resized-(\d+x\d+)/.exec(await screenText(page))?.[1], 15_000, 'the new size');
    expect(after).not.toBe(before);
    const [rows, cols] = (after as string).split('x').map(Number);
    expect(cols).toBeLessThan(Number((before as string).split('x')[1]));
    expect(rows).toBeLessThan(Number((before as string).split('x')[0]));

    // Flow control: 2 MB of output passes only if the console acknowledges what it rendered
    // (the broker holds the shell after 1 MiB un-acknowledged).
    await typeCommand(page, 'seq 1 300000; echo flood-$((5+5))-done');
    await expect.poll(() => screenText(page), { timeout: 60_000, interval: 250 }).toContain('flood-10-done');
    await typeCommand(page, 'echo still-$((1+1))-responsive');
    await expect.poll(() => screenText(page), { timeout: 15_000 }).toContain('still-2-responsive');

    await typeCommand(page, 'exit 3');
    const banner = page.locator('.console-banner');
    await banner.waitFor({ timeout: 15_000 });
    expect(await banner.textContent()).toBe('Session ended (exit code 3).');
    expect(await page.getByTestId('console-status').textContent()).toBe('Session ended (exit code 3).');
    await screenshot(page, 'console-ended');

    // Reconnect opens a new session.
    await page.getByRole('button', { name: 'Reconnect' }).click();
    await expect.poll(() => page.getByTestId('console-status').textContent(), { timeout: 20_000 }).toBe('Connected');
    await typeCommand(page, 'echo again-$((2*3))');
    await expect.poll(() => screenText(page), { timeout: 15_000 }).toContain('again-6');
    await expectNoErrorsAndClose();

    const entries = await suite.t.api('GET', `/api/v2/commitlist?device_id=${device}&action=console`, { token: suite.t.adminToken });
    expect(entries.body.items.filter((e: { result: string; source: string }) => e.result === 'allowed' && e.source === 'web').length).toBeGreaterThanOrEqual(2);
  });

  it('pastes once with Ctrl+Shift+V and with Ctrl+V, and the next Enter ends the line', async () => {
    const { page, context, expectNoErrorsAndClose } = await suite.open();
    await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: suite.t.url });
    await page.goto(`/console/${device}`);
    await expect.poll(() => page.getByTestId('console-status').textContent(), { timeout: 20_000 }).toBe('Connected');
    // The shell reads one line and shows exactly what arrived, between brackets.
    for (const [keys, text] of [
      ['Control+Shift+V', 'pasted-one'],
      ['Control+V', 'pasted-two'],
    ]) {
      await typeCommand(page, 'read -r line; echo "got[$line]"');
      await page.evaluate((t) => navigator.clipboard.writeText(t), text);
      await page.locator('.xterm-helper-textarea').focus();
      await page.keyboard.press(keys);
      // A ^V sent to the device would make this Enter a literal ^M and the line would not end.
      await page.keyboard.press('Enter');
      await expect.poll(() => screenText(page), { timeout: 15_000 }).toContain(`got[${text}]`);
      expect(await screenText(page)).not.toContain(`${text}${text}`);
    }
    await expectNoErrorsAndClose();
  });

  it("draws underscores: the rows are tall enough for the font's underscore", async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/console/${device}` });
    await expect.poll(() => page.getByTestId('console-status').textContent(), { timeout: 20_000 }).toBe('Connected');
    await typeCommand(page, 'clear; printf "%s\\n" "$(printf "_%.0s" 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20)" container_info.json');
    const row = page.locator('.xterm-rows > div', { hasText: /^_{20}\s*$/ });
    await row.waitFor({ timeout: 15_000 });
    await screenshot(page, 'console-underscores');
    const box = await row.boundingBox();
    if (!box) throw new Error('the row of underscores has no box');
    // This row's own box only: what the user sees of it (the clip stops where the next row starts).
    const shot = await page.screenshot({ clip: { x: box.x, y: box.y, width: Math.min(box.width, 120), height: box.height } });
    // The terminal's background is #111418; an underscore is drawn in a light colour.
    const lit = await page.evaluate(async (png) => {
      const image = new Image();
      image.src = `data:image/png;base64,${png}`;
      await image.decode();
      const canvas = document.createElement('canvas');
      canvas.width = image.width;
      canvas.height = image.height;
      const context = canvas.getContext('2d') as CanvasRenderingContext2D;
      context.drawImage(image, 0, 0);
      const { data } = context.getImageData(0, 0, image.width, image.height);
      let count = 0;
      for (let i = 0; i < data.length; i += 4) if (data[i] + data[i + 1] + data[i + 2] > 3 * 120) count++;
      return count;
    }, shot.toString('base64'));
    expect(lit).toBeGreaterThan(20);
    await expectNoErrorsAndClose();
  });

  it('a role allowing consoles only as given users opens them as the first, and offers the others', async () => {
    const operator = await suite.t.userWith([
      { permission: 'device:read' },
      { permission: 'remote-access:connect', resources: ['*/console(user=daemon,nobody)'] },
    ]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: operator, at: `/console/${device}` });
    await expect.poll(() => page.getByTestId('console-status').textContent(), { timeout: 20_000 }).toBe('Connected');
    expect(await page.getByTestId('console-user').inputValue()).toBe('daemon');
    await typeCommand(page, 'echo "as-$(id -un)"');
    await expect.poll(() => screenText(page), { timeout: 15_000 }).toContain('as-daemon');
    const previous = await page.locator('.xterm-helper-textarea').elementHandle();
    await page.getByTestId('console-user').selectOption('nobody');
    // A new terminal and session, after the next frame: until then the old terminal is still there,
    // and keys given its focus would go to the old session (the first ones of the command were lost
    // so). Typed as soon as the new one is there, while it still connects: the console holds the
    // keys and sends them when the session is ready (it used to drop them, and the command's start
    // with them).
    await page.waitForFunction((element) => !element?.isConnected, previous);
    await typeCommand(page, 'echo "as-$(id -un)"');
    await expect.poll(() => screenText(page), { timeout: 15_000 }).toContain('as-nobody');
    expect(await page.getByTestId('console-status').textContent()).toBe('Connected');
    expect(await screenText(page)).not.toContain('as-daemon');
    // A new session as the new user, not a re-attach to the old one (which the switch ended).
    expect(await screenText(page)).not.toContain('previous session had ended');
    await expectNoErrorsAndClose();
  });

  it('shows "Access denied" in the console when the role allows only other devices', async () => {
    const operator = await suite.t.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['tag:elsewhere/console'] }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: operator, at: `/console/${device}` });
    await page.getByRole('alert').waitFor();
    expect(await page.getByRole('alert').textContent()).toContain('Access denied');
    await expectNoErrorsAndClose();
    // The broker decided and recorded it, though the device page knew the answer beforehand.
    const entries = await suite.t.api('GET', `/api/v2/commitlist?device_id=${device}&action=console&result=denied`, { token: suite.t.adminToken });
    expect(entries.body.items.filter((e: { user_id: string }) => e.user_id === operator.id)).toHaveLength(1);
  });
});

describe('console on a phone', () => {
  it('taps Esc, Tab, arrows, a sticky Ctrl with a typed key, and ^C on the key bar: the device reads their bytes', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 }, touch: true, at: `/console/${device}` });
    await expect.poll(() => page.getByTestId('console-status').textContent(), { timeout: 20_000 }).toBe('Connected');
    // Raw mode: every byte reaches od as sent (no line editing, no signal for ^C), printed in hex.
    await typeCommand(page, 'clear; stty raw -echo; od -An -tx1 -N10; stty sane; echo; echo keybar-done');
    const bar = page.getByTestId('keybar');
    for (const key of ['esc', 'tab', 'up', 'left', 'ctrl']) await bar.locator(`[data-key="${key}"]`).tap();
    expect(await bar.locator('[data-key="ctrl"]').getAttribute('aria-pressed')).toBe('true');
    await page.keyboard.type('a'); // the phone keyboard's "a", with the sticky Ctrl: 0x01
    expect(await bar.locator('[data-key="ctrl"]').getAttribute('aria-pressed')).toBe('false');
    await bar.locator('[data-key="ctrl-c"]').tap();
    await expect.poll(() => screenText(page), { timeout: 15_000 }).toContain('keybar-done');
    expect((await screenText(page)).replace(/\s+/g, ' ')).toContain('1b 09 1b 5b 41 1b 5b 44 01 03');
    await screenshot(page, 'console-phone-keybar');
    await expectNoErrorsAndClose();
  });

  it('keeps table actions on screen at phone width', async () => {
    await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: { width: 390, height: 844 }, touch: true, at: '/users' });
    await page.locator('td.actions-cell').first().waitFor();
    const buttons = await page.locator('td.actions-cell').locator('button, a').all();
    expect(buttons.length).toBeGreaterThan(2);
    for (const button of buttons) {
      const box = await button.boundingBox();
      expect(box).not.toBeNull();
      expect(box!.x).toBeGreaterThanOrEqual(0);
      expect(box!.x + box!.width).toBeLessThanOrEqual(390);
    }
    await screenshot(page, 'users-phone');
    await expectNoErrorsAndClose();
  });
});

describe('file transfer with a real agent', () => {
  it('uploads a file to the device and downloads it back, with progress', async () => {
    const content = crypto.randomBytes(5 * 1024 * 1024);
    const target = path.join(work, 'upload');
    fs.mkdirSync(target);
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}` });
    await page.getByRole('heading', { name: 'File transfer' }).waitFor();
    await page.getByLabel('File to send').setInputFiles({ name: 'firmware.bin', mimeType: 'application/octet-stream', buffer: content });
    await page.getByLabel('Destination on the device').fill(`${target}/`);
    const sawProgress = page.waitForSelector('.transfer-progress progress', { timeout: 10_000 }).then(() => true);
    await page.getByRole('button', { name: 'Upload to device' }).click();
    expect(await sawProgress).toBe(true);
    await page.getByText(`Uploaded ${content.length} bytes to ${target}/firmware.bin.`).waitFor({ timeout: 30_000 });
    expect(fs.readFileSync(path.join(target, 'firmware.bin')).equals(content)).toBe(true);
    await screenshot(page, 'device-file-transfer');

    await page.getByLabel('File to fetch from the device').fill(`${target}/firmware.bin`);
    const [download] = await Promise.all([
      page.waitForEvent('download', { timeout: 30_000 }),
      page.getByRole('button', { name: 'Download from device' }).click(),
    ]);
    expect(download.suggestedFilename()).toBe('firmware.bin');
    expect((await downloaded(download)).equals(content)).toBe(true);
    await page.getByText(`Downloaded ${content.length} bytes`).waitFor();

    // A path that does not exist: the device's refusal is shown, not a blank page.
    await page.getByLabel('File to fetch from the device').fill(`${target}/missing.bin`);
    await page.getByRole('button', { name: 'Download from device' }).click();
    await page.getByRole('alert').waitFor();
    expect(((await page.getByRole('alert').textContent()) ?? '').length).toBeGreaterThan('Transfer failed'.length);

    // The audit view shows that copy as refused by the device, on its own line, not just as "allowed".
    const failed = page.locator('main table tbody tr', { hasText: 'missing.bin', has: page.getByTestId('audit-end-result') });
    // (the session's end entry is written as the channel closes: the list is read again until it is there)
    await expect
      .poll(async () => {
        await page.goto(`/audit?action=copy&device_id=${device}`);
        await page
          .getByRole('status')
          .filter({ hasText: /Entries|No entries/ })
          .waitFor();
        return failed.count();
      })
      .toBeGreaterThan(0);
    expect(await failed.first().getByTestId('audit-end-result').textContent()).toMatch(/^(denied|error)$/);
    expect(await failed.first().textContent()).toMatch(/refused by the device|not.found|No such file/i);
    await screenshot(page, 'audit-failed-copy');
    await expectNoErrorsAndClose();
  });

  it('saves a download under the exact name of the file on the device, with no extension added', async () => {
    const source = path.join(work, 'hostname');
    fs.writeFileSync(source, 'gateway-01\n');
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}` });
    await page.getByLabel('File to fetch from the device').fill(source);
    const [download] = await Promise.all([
      page.waitForEvent('download', { timeout: 30_000 }),
      page.getByRole('button', { name: 'Download from device' }).click(),
    ]);
    expect(download.suggestedFilename()).toBe('hostname');
    expect((await downloaded(download)).toString('utf8')).toBe('gateway-01\n');
    await expectNoErrorsAndClose();
  });

  it('reloads the agent from the device page after asking, since it ends every session on the device', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/devices/${device}` });
    await page.getByRole('button', { name: 'Reload agent' }).click();
    // It asks first, saying that every user's sessions on the device end; Cancel sends nothing.
    const question = page.getByRole('group', { name: /Reload the agent\?/ });
    await question.waitFor();
    expect(await question.textContent()).toContain('for every user');
    await screenshot(page, 'device-reload-confirm');
    await question.getByRole('button', { name: 'Cancel' }).click();
    const none = await suite.t.api('GET', `/api/v2/commitlist?device_id=${device}&action=reload`, { token: suite.t.adminToken });
    expect(none.body.items).toEqual([]);
    await page.getByRole('button', { name: 'Reload agent' }).click();
    await page.getByRole('button', { name: 'Yes, reload' }).click();
    await page.getByText('The agent is reloading.').waitFor({ timeout: 20_000 });
    const entries = await suite.t.api('GET', `/api/v2/commitlist?device_id=${device}&action=reload&result=allowed`, { token: suite.t.adminToken });
    expect(entries.body.items[0]).toMatchObject({ result: 'allowed', source: 'web' });
    await expectNoErrorsAndClose();
  });
});
