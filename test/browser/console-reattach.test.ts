/**
 * Re-attaching to a console, against a real agent: the replayed output's terminal queries are
 * not answered into the shell (a reload inside vi leaves the file as it was), and the owner
 * resumes a detached console from another browser through the Sessions screen, while another
 * user is offered no re-attach.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Locator, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

let agent: TestAgent;
let device: string;
let dir: string;

/** busybox vi where there is one, else vim as vi. */
function viCommand(): string {
  try {
    execFileSync('sh', ['-c', 'command -v busybox && busybox vi --help'], { stdio: 'ignore' });
    return 'busybox vi';
  } catch {
    return 'HOME=$PWD vi -i NONE';
  }
}
const editor = viCommand();

const suite = useBrowserSuite();

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'console-reattach-'));
  ({ agent, device } = await startEnrolledAgent(suite.t));
});

afterAll(async () => {
  await agent?.close();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

function shown(page: Page): Locator {
  return page.locator('[data-testid=console-panel]:not(.inactive)');
}

function screenText(panel: Locator): Promise<string> {
  return panel.locator('.xterm-rows').innerText();
}

async function type(page: Page, panel: Locator, text: string): Promise<void> {
  await panel.locator('.xterm-helper-textarea').focus();
  await page.keyboard.type(text);
  await page.keyboard.press('Enter');
}

async function connected(panel: Locator): Promise<void> {
  await expect.poll(() => panel.getByTestId('console-status').textContent(), { timeout: 20_000 }).toBe('Connected');
}

type Live = { id: string; user: { email: string }; device: { id: string }; attached?: boolean };

async function liveConsoles(email: string): Promise<Live[]> {
  const r = await suite.t.api('GET', '/api/v2/remote/sessions', { token: suite.t.adminToken });
  return (r.body.items as Live[]).filter((s) => s.user.email === email && s.device.id === device);
}

describe('re-attaching to a console', () => {
  it("reloads inside vi without the terminal's answers to replayed queries reaching vi", async () => {
    const work = fs.mkdtempSync(path.join(dir, 'vi-'));
    const file = path.join(work, 'notes.txt');
    fs.writeFileSync(file, 'original line one\nsecond line\n');
    const user = await suite.t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: { email: user.email, password: user.password }, at: `/console/${device}` });
    await connected(shown(page));
    // vim as vi with its defaults (nocompatible) asks the terminal for its version, colours and
    // cursor position at start: those queries stay in the kept output. HOME and the viminfo stay in
    // the test's folder.
    // Each editor is followed by an echo on the same line: nothing typed races its exit.
    await type(page, shown(page), `cd ${work} && HOME=${work} vi -i NONE notes.txt; echo "vi-quit-$((1+1))"`);
    await expect.poll(() => screenText(shown(page)), { timeout: 20_000 }).toContain('second line');
    await type(page, shown(page), ':q');
    await expect.poll(() => screenText(shown(page)), { timeout: 20_000 }).toContain('vi-quit-2');
    // Then a vi that takes whatever arrives as commands (vim recognizes late answers; busybox vi,
    // as on many small devices, does not), and the page is reloaded inside it.
    await type(page, shown(page), `${editor} notes.txt; echo "vi-done-$((6*7))"`);
    await expect.poll(() => screenText(shown(page)), { timeout: 20_000 }).toContain('second line');

    await page.reload();
    await connected(shown(page));
    await expect.poll(() => screenText(shown(page)), { timeout: 20_000 }).toContain('second line');
    // Leave vi writing the file: anything the terminal had sent by itself would have changed it.
    await type(page, shown(page), ':wq');
    // Stray answers taken as vi commands (replace mode, a pending motion…) keep vi from quitting as typed.
    await expect.poll(() => screenText(shown(page)), { timeout: 20_000, message: 'vi quits as typed, nothing else reached it' }).toContain('vi-done-42');
    expect(fs.readFileSync(file, 'utf8')).toBe('original line one\nsecond line\n');

    // Back at the prompt, a reload leaves the prompt empty: the next command runs as typed.
    await page.reload();
    await connected(shown(page));
    await expect.poll(() => screenText(shown(page)), { timeout: 20_000 }).toContain('vi-done-42');
    await type(page, shown(page), 'echo "clean-$((2+3))"');
    await expect.poll(() => screenText(shown(page)), { timeout: 20_000 }).toContain('clean-5');
    const text = await screenText(shown(page));
    expect(text).not.toContain('rgb:');
    expect(text).not.toMatch(/command not found|not found/);
    await page.getByRole('link', { name: '← Device' }).click();
    await expect.poll(() => liveConsoles(user.email)).toEqual([]);
    await expectNoErrorsAndClose();
  });

  it('lets the owner re-attach a detached console from another browser through Sessions; another user gets no Re-attach', async () => {
    const user = await suite.t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const first = await suite.open({ as: { email: user.email, password: user.password } });
    await first.page.goto(`/console/${device}`);
    await connected(shown(first.page));
    await type(first.page, shown(first.page), 'echo "earlier-$((4*4))"');
    await expect.poll(() => screenText(shown(first.page)), { timeout: 20_000 }).toContain('earlier-16');
    const [session] = await liveConsoles(user.email);
    // The browser goes away: the console is detached, its shell runs on.
    await first.expectNoErrorsAndClose();
    await expect.poll(async () => (await liveConsoles(user.email)).map((s) => s.attached), { timeout: 20_000 }).toEqual([false]);

    // Another user (who may even end it) sees it, but is offered no re-attach.
    const operator = await suite.t.userWith([{ permission: 'remote-access:manage' }, { permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const other = await suite.open({ as: { email: operator.email, password: operator.password } });
    await other.page.goto('/sessions');
    const theirRow = other.page.locator(`[data-testid="session-${session.id}"]`);
    await theirRow.waitFor();
    expect(await theirRow.getByTestId('reattach-session').count()).toBe(0);
    await other.expectNoErrorsAndClose();

    // The same user signs in in another browser: the device page and Sessions offer Re-attach, and End.
    const second = await suite.open({ as: { email: user.email, password: user.password } });
    await second.page.goto(`/devices/${device}`);
    await second.page.getByTestId('reattach-console').waitFor();
    await second.page.goto('/sessions');
    const row = second.page.locator(`[data-testid="session-${session.id}"]`);
    await row.getByTestId('reattach-session').waitFor();
    await expect.poll(() => row.getByRole('button', { name: 'End' }).count()).toBe(1);
    await screenshot(second.page, 'sessions-reattach');
    await row.getByTestId('reattach-session').click();
    await connected(shown(second.page));
    // The same shell: its earlier output, and it takes input.
    await expect.poll(() => screenText(shown(second.page)), { timeout: 20_000 }).toContain('earlier-16');
    await type(second.page, shown(second.page), 'echo "resumed-$((5*5))"');
    await expect.poll(() => screenText(shown(second.page)), { timeout: 20_000 }).toContain('resumed-25');
    expect(await liveConsoles(user.email)).toEqual([expect.objectContaining({ id: session.id, attached: true })]);
    expect(new URL(second.page.url()).search).toBe('');

    await second.page.getByRole('link', { name: '← Device' }).click();
    await expect.poll(() => liveConsoles(user.email)).toEqual([]);
    await second.expectNoErrorsAndClose();
  });
});
