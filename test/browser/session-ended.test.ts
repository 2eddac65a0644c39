/**
 * When someone else ends your console, the console says who and why ("Ended by … (reason)"),
 * not "Access denied"; when your grant is withdrawn it says your access was withdrawn. Against a
 * real agent, on a desktop and a phone.
 */
import type { Locator, Page } from 'playwright-core';
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

function shown(page: Page): Locator {
  return page.locator('[data-testid=console-panel]:not(.inactive)');
}

async function openConsoleAs(user: { email: string; password: string }, phone = false) {
  const opened = await suite.open({ as: user, ...(phone ? { viewport: { width: 390, height: 844 }, touch: true } : {}) });
  await opened.page.goto(`/console/${device}`);
  await expect.poll(() => shown(opened.page).getByTestId('console-status').textContent(), { timeout: 20_000 }).toBe('Connected');
  return opened;
}

async function liveSessionOf(email: string): Promise<string> {
  let id = '';
  await expect
    .poll(async () => {
      const r = await suite.t.api('GET', '/api/v2/remote/sessions', { token: suite.t.adminToken });
      id = (r.body.items as { id: string; user: { email: string } }[]).find((s) => s.user.email === email)?.id ?? '';
      return id;
    })
    .not.toBe('');
  return id;
}

describe('a console ended by someone else', () => {
  it('says who ended it and why when an operator ends it from the sessions page', async () => {
    const user = await suite.t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const victim = await openConsoleAs(user);
    await liveSessionOf(user.email);

    const operator = await suite.open();
    await operator.page.goto('/sessions');
    const row = operator.page.locator('tbody tr', { hasText: user.email });
    await row.getByRole('button', { name: 'End' }).click();
    await row.getByLabel('Reason (shown to the user)').fill('maintenance window');
    await row.getByRole('button', { name: 'Yes, end it' }).click();

    const panel = shown(victim.page);
    const banner = panel.locator('.console-banner');
    await expect.poll(() => banner.textContent(), { timeout: 20_000 }).toMatch(/^Ended by .*admin@example\.com>? \(maintenance window\)\.$/);
    expect(await panel.textContent()).not.toContain('Access denied');
    expect(await panel.getByTestId('console-status').textContent()).toContain('Ended by');
    await screenshot(victim.page, 'console-ended-by-operator');
    await victim.expectNoErrorsAndClose();
    await operator.expectNoErrorsAndClose();
  });

  it('says so at phone width, ended through the API without a reason', async () => {
    const user = await suite.t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const victim = await openConsoleAs(user, true);
    const id = await liveSessionOf(user.email);
    expect((await suite.t.api('DELETE', `/api/v2/remote/sessions/${id}`, { token: suite.t.adminToken })).status).toBe(204);
    const banner = shown(victim.page).locator('.console-banner');
    await expect.poll(() => banner.textContent(), { timeout: 20_000 }).toMatch(/^Ended by .*admin@example\.com>?\.$/);
    const box = (await banner.boundingBox())!;
    expect(box.x + box.width).toBeLessThanOrEqual(390);
    await screenshot(victim.page, 'phone-console-ended');
    await victim.expectNoErrorsAndClose();
  });

  it('says the access was withdrawn when the grant goes', async () => {
    const user = await suite.t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const victim = await openConsoleAs(user);
    await liveSessionOf(user.email);
    await suite.t.broker.services.store.db
      .updateTable('roles')
      .set({ policies: JSON.stringify([{ permission: 'device:read' }]), updated_at: new Date().toISOString() })
      .where('id', '=', user.roleId)
      .execute();
    const banner = shown(victim.page).locator('.console-banner');
    await expect.poll(() => banner.textContent(), { timeout: 30_000 }).toMatch(/^Your access was withdrawn \(.+\)\.$/);
    expect(await shown(victim.page).textContent()).not.toContain('Access denied');
    await victim.expectNoErrorsAndClose();
  });
});
