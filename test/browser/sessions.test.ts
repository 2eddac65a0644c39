/**
 * The operator's day to day in the web console, against a real agent: the Active sessions page
 * ends a live console, and the audit view's Play opens the player of its recording.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';
import { connectRemote } from '../support/remote-ws.js';

let agent: TestAgent;
let device: string;

const suite = useBrowserSuite();

beforeAll(async () => {
  ({ agent, device } = await startEnrolledAgent(suite.t));
});

afterAll(async () => {
  await agent?.close();
});

describe('active sessions and recordings', () => {
  it('lists a live console with End for the operator, ends it, and plays its recording from the audit view', async () => {
    const connector = await suite.t.userWith([{ permission: 'remote-access:connect' }]);
    const s = connectRemote(suite.t.url, 'console', { device_id: device, cols: 100, rows: 20 }, connector.token);
    await s.ready;
    s.ws.send(Buffer.from('printf "recorded-%s\\n" "$((6*7))"\n'));
    await s.output('recorded-42');
    s.ws.send(JSON.stringify({ type: 'resize', cols: 110, rows: 22 }));

    // The owner sees their own session with End (ending someone else's needs remote-access:manage).
    const owner = await suite.open({ as: { email: connector.email, password: connector.password } });
    await owner.page.goto('/sessions');
    const ownRow = owner.page.locator('tbody tr', { hasText: connector.email });
    await ownRow.waitFor();
    expect(await ownRow.getByRole('button', { name: 'End' }).count()).toBe(1);
    await owner.expectNoErrorsAndClose();

    const { page, expectNoErrorsAndClose } = await suite.open();
    await page.getByRole('link', { name: 'Sessions' }).click();
    const row = page.locator('tbody tr', { hasText: connector.email });
    await row.waitFor();
    expect(await row.textContent()).toContain('console');
    await screenshot(page, 'sessions');
    await row.getByRole('button', { name: 'End' }).click();
    await page.getByRole('button', { name: 'Yes, end it' }).click();
    expect((await s.closed).code).toBe(4403);
    await expect.poll(() => page.locator('tbody tr', { hasText: connector.email }).count(), { timeout: 15_000 }).toBe(0);

    await page.getByRole('link', { name: 'Audit' }).click();
    await page.getByTestId('audit-play').first().click();
    await expect.poll(() => new URL(page.url()).pathname).toMatch(/^\/recordings\/[0-9a-f-]{36}$/);
    await expect.poll(() => page.locator('.xterm-rows').innerText(), { timeout: 15_000 }).toContain('recorded-42');
    await expect.poll(() => page.getByTestId('player-play').textContent(), { timeout: 15_000 }).toBe('Play');
    await screenshot(page, 'recording-player');
    // Seeking back to the start clears the screen; 4x plays it again to the end.
    await page.getByTestId('player-seek').fill('0');
    await expect.poll(() => page.locator('.xterm-rows').innerText()).not.toContain('recorded-42');
    await page.getByTestId('player-speed-4').click();
    await page.getByTestId('player-play').click();
    await expect.poll(() => page.locator('.xterm-rows').innerText(), { timeout: 15_000 }).toContain('recorded-42');
    await expectNoErrorsAndClose();
  });

  it('keeps Watch and End on screen at phone width, and ends a console from there', async () => {
    const connector = await suite.t.userWith([{ permission: 'remote-access:connect' }]);
    const s = connectRemote(suite.t.url, 'console', { device_id: device, cols: 80, rows: 20 }, connector.token);
    await s.ready;
    const phone = { width: 390, height: 844 };
    const { page, expectNoErrorsAndClose } = await suite.open({ viewport: phone, touch: true, at: '/sessions' });
    const row = page.locator('tbody tr', { hasText: connector.email });
    await row.waitFor();
    const onScreen = async (name: string) => {
      const box = await row.getByRole(name === 'Watch' ? 'link' : 'button', { name }).boundingBox();
      expect(box, name).not.toBeNull();
      expect(box!.x, name).toBeGreaterThanOrEqual(0);
      expect(box!.x + box!.width, name).toBeLessThanOrEqual(phone.width);
      expect(box!.y + box!.height, name).toBeLessThanOrEqual(phone.height);
    };
    await onScreen('Watch');
    await onScreen('End');
    // The pinned column's header goes with it (and covers the headers scrolling under it).
    const header = await page.getByRole('columnheader', { name: 'Actions' }).boundingBox();
    expect(header!.x + header!.width).toBeLessThanOrEqual(phone.width);
    // The page itself does not scroll sideways: the table does, under its pinned actions.
    expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
    await screenshot(page, 'phone-sessions');
    await row.getByRole('button', { name: 'End' }).tap();
    const yes = page.getByRole('button', { name: 'Yes, end it' });
    const box = await yes.boundingBox();
    expect(box!.x + box!.width).toBeLessThanOrEqual(phone.width);
    await yes.tap();
    expect((await s.closed).code).toBe(4403);
    await expect.poll(() => page.locator('tbody tr', { hasText: connector.email }).count(), { timeout: 15_000 }).toBe(0);
    await expectNoErrorsAndClose();
  });

  it("sets a role's console recording in the role editor", async () => {
    const user = await suite.t.userWith([{ permission: 'remote-access:connect' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ at: `/roles/${user.roleId}` });
    await page.getByLabel('Console recording').selectOption('required');
    await screenshot(page, 'role-recording');
    await page.getByRole('button', { name: 'Save role' }).click();
    await page.waitForURL('**/roles');
    const role = await suite.t.api('GET', `/api/v2/role/${user.roleId}`, { token: suite.t.adminToken });
    expect(role.body.recording).toBe('required');
    await expectNoErrorsAndClose();
  });
});
