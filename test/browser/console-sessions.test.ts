/**
 * The console day to day, against a real agent: a reload re-attaches to the same session, several
 * consoles open as tabs, and an operator watches a user's console read-only while the user sees
 * who is watching.
 */
import type { Locator, Page, WebSocketRoute } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';

let agent: TestAgent;
let device: string;

const suite = useBrowserSuite();

beforeAll(async () => {
  ({ agent, device } = await startEnrolledAgent(suite.t));
});

afterAll(async () => {
  await agent?.close();
});

/** The console shown (the active tab). */
function shown(page: Page): Locator {
  return page.locator('[data-testid=console-panel]:not(.inactive)');
}

function screenText(panel: Locator): Promise<string> {
  return panel.locator('.xterm-rows').innerText();
}

async function typeCommand(page: Page, panel: Locator, command: string): Promise<void> {
  await panel.locator('.xterm-helper-textarea').focus();
  await page.keyboard.type(command);
  await page.keyboard.press('Enter');
}

async function connected(panel: Locator, label = 'Connected'): Promise<void> {
  await expect.poll(() => panel.getByTestId('console-status').textContent(), { timeout: 20_000 }).toBe(label);
}

type Live = { id: string; user: { email: string }; device: { id: string }; attached?: boolean };

async function liveConsoles(email: string): Promise<Live[]> {
  const r = await suite.t.api('GET', '/api/v2/remote/sessions', { token: suite.t.adminToken });
  return (r.body.items as Live[]).filter((s) => s.user.email === email && s.device.id === device);
}

describe('console sessions in the web console', () => {
  it('re-attaches to the same session after a reload, with its recent output', async () => {
    const user = await suite.t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: { email: user.email, password: user.password }, at: `/console/${device}` });
    await connected(shown(page));
    await typeCommand(page, shown(page), 'echo before-$((2*3))');
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('before-6');
    const [first] = await liveConsoles(user.email);

    await page.reload();
    await connected(shown(page));
    // The same session: its recent output is drawn again, and it takes input.
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('before-6');
    await typeCommand(page, shown(page), 'echo after-$((3*3))');
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('after-9');
    expect((await liveConsoles(user.email)).map((s) => s.id)).toEqual([first.id]);
    const attaches = await suite.t.api('GET', '/api/v2/commitlist?event=remote.console.attach', { token: suite.t.adminToken });
    expect((attaches.body.items as { options: { session: string }; result: string }[]).filter((e) => e.options.session === first.id)).toEqual([
      expect.objectContaining({ result: 'allowed' }),
    ]);
    await screenshot(page, 'console-reattached');

    // Leaving the console ends it.
    await page.getByRole('link', { name: '← Device' }).click();
    await expect.poll(() => liveConsoles(user.email)).toEqual([]);
    await expectNoErrorsAndClose();
  });

  it('re-attaches by itself when the connection drops', async () => {
    const user = await suite.t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: { email: user.email, password: user.password } });
    // Every console socket passes through here, so the test can cut one as a network would.
    const links: { page: WebSocketRoute; server: WebSocketRoute }[] = [];
    await page.routeWebSocket(/\/api\/v2\/remote\/console/, (ws) => {
      links.push({ page: ws, server: ws.connectToServer() });
    });
    await page.goto(`/console/${device}`);
    await connected(shown(page));
    await typeCommand(page, shown(page), 'echo blip-$((1+2))');
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('blip-3');
    const [first] = await liveConsoles(user.email);

    await links[0].server.close({ code: 1001 });
    await links[0].page.close({ code: 1012, reason: 'network gone' });
    await expect.poll(() => links.length, { timeout: 15_000 }).toBe(2);
    await connected(shown(page));
    await typeCommand(page, shown(page), 'echo back-$((2+5))');
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('back-7');
    expect((await liveConsoles(user.email)).map((s) => s.id)).toEqual([first.id]);
    await expectNoErrorsAndClose();
  });

  it('opens several consoles as tabs and switches between them without losing either', async () => {
    const user = await suite.t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: { email: user.email, password: user.password }, at: `/console/${device}` });
    await connected(shown(page));
    await typeCommand(page, shown(page), 'echo tab-one-$((1+1))');
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('tab-one-2');

    await page.getByTestId('console-new-tab').click();
    await expect.poll(() => page.getByTestId('console-tab').count()).toBe(2);
    await connected(shown(page));
    await typeCommand(page, shown(page), 'echo tab-two-$((2+2))');
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('tab-two-4');
    expect(await screenText(shown(page))).not.toContain('tab-one-2');
    await expect.poll(async () => (await liveConsoles(user.email)).length).toBe(2);
    await screenshot(page, 'console-tabs');

    // Back to the first: its screen and its shell are as they were.
    await page.getByTestId('console-tab').first().click();
    expect(await screenText(shown(page))).toContain('tab-one-2');
    await typeCommand(page, shown(page), 'echo again-one-$((5+5))');
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('again-one-10');

    // Both survive a reload, each on its own session.
    const before = (await liveConsoles(user.email)).map((s) => s.id).sort();
    await page.reload();
    await expect.poll(() => page.getByTestId('console-tab').count()).toBe(2);
    await connected(shown(page));
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('again-one-10');
    await page.getByTestId('console-tab').nth(1).click();
    await connected(shown(page));
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('tab-two-4');
    expect((await liveConsoles(user.email)).map((s) => s.id).sort()).toEqual(before);

    // Closing a tab ends its session; the other runs on.
    await page.getByRole('button', { name: 'Close console 2' }).click();
    await expect.poll(async () => (await liveConsoles(user.email)).length).toBe(1);
    await connected(shown(page));
    await typeCommand(page, shown(page), 'echo last-$((4+4))');
    await expect.poll(() => screenText(shown(page)), { timeout: 15_000 }).toContain('last-8');
    await expectNoErrorsAndClose();
  });

  it("lets an operator watch a user's console read-only from the sessions page; the user sees who watches", async () => {
    const user = await suite.t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const owner = await suite.open({ as: { email: user.email, password: user.password } });
    await owner.page.goto(`/console/${device}`);
    await connected(shown(owner.page));
    await typeCommand(owner.page, shown(owner.page), 'echo watched-$((7*6))');
    await expect.poll(() => screenText(shown(owner.page)), { timeout: 15_000 }).toContain('watched-42');

    const operator = await suite.open();
    await operator.page.goto('/sessions');
    const row = operator.page.locator('tbody tr', { hasText: user.email });
    await row.getByTestId('watch-session').click();
    await expect.poll(() => new URL(operator.page.url()).pathname).toMatch(/^\/watch\/[0-9a-f-]{36}$/);
    const watch = operator.page.getByTestId('watch-panel');
    await connected(watch, 'Watching (read-only)');
    await expect.poll(() => screenText(watch), { timeout: 15_000 }).toContain('watched-42');

    // The owner sees who is watching.
    await expect.poll(() => shown(owner.page).getByTestId('console-watchers').textContent(), { timeout: 15_000 }).toBe('Watched by admin@example.com');
    await screenshot(owner.page, 'console-watched');

    // The watcher's keys go nowhere; the owner's output reaches the watcher live.
    await watch.locator('.xterm-helper-textarea').focus();
    await operator.page.keyboard.type('echo from-watcher-$((8*8))');
    await operator.page.keyboard.press('Enter');
    await typeCommand(owner.page, shown(owner.page), 'echo live-$((9*9))');
    await expect.poll(() => screenText(watch), { timeout: 15_000 }).toContain('live-81');
    expect(await screenText(shown(owner.page))).not.toContain('from-watcher');
    await screenshot(operator.page, 'console-watching');

    // The sessions page lists the watcher.
    const list = await suite.open();
    await list.page.goto('/sessions');
    await expect
      .poll(() => list.page.locator('tbody tr', { hasText: user.email }).getByTestId('session-watchers').textContent(), { timeout: 15_000 })
      .toBe('watched by admin@example.com');
    await list.expectNoErrorsAndClose();

    // The watcher leaves: the owner sees nobody watching.
    await operator.expectNoErrorsAndClose();
    await expect.poll(() => shown(owner.page).getByTestId('console-watchers').count(), { timeout: 15_000 }).toBe(0);
    await owner.expectNoErrorsAndClose();
  });
});
