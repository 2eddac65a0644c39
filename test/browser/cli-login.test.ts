import { describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';

const suite = useBrowserSuite();
const FORM = { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': 'qbee-cli/browser-test' };
const GRANT = 'urn:ietf:params:oauth:grant-type:device_code';

describe('command-line sign-in page', () => {
  it('shows where a code comes from and approves it: the terminal then gets a session of the approving user', async () => {
    const started = await suite.t.api('POST', '/oauth2/devicecode', { headers: FORM });
    expect(started.status).toBe(200);
    const user = await suite.t.userWith([{ permission: 'files:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user, at: `/cli-login?code=${started.body.user_code}` });
    await page.getByRole('heading', { level: 1, name: 'Command-line sign-in' }).waitFor();
    expect(await page.getByLabel('Code').inputValue()).toBe(started.body.user_code);
    await page.getByRole('button', { name: 'Look up' }).click();
    await page.getByText('qbee-cli/browser-test').waitFor();
    await screenshot(page, 'cli-login');
    await page.getByRole('button', { name: 'Approve' }).click();
    await page.getByText(`the terminal showing ${started.body.user_code} is now signed in as you`).waitFor();

    const tokens = await suite.t.api('POST', '/oauth2/token', {
      headers: FORM,
      body: new URLSearchParams({ grant_type: GRANT, device_code: started.body.device_code }).toString(),
    });
    expect(tokens.status).toBe(200);
    const profile = await suite.t.api('GET', '/api/v2/profile', { token: tokens.body.access_token });
    expect(profile.body.email).toBe(user.email);
    await expectNoErrorsAndClose();
  });

  it('declines a code, and says so for an unknown one', async () => {
    const started = await suite.t.api('POST', '/oauth2/devicecode', { headers: FORM });
    const { page, expectNoErrorsAndClose } = await suite.open({ at: '/cli-login' });
    await page.getByLabel('Code').fill('BCDF-GHJK');
    await page.getByRole('button', { name: 'Look up' }).click();
    await page.getByText(/not found/i).waitFor();
    await page.getByLabel('Code').fill(started.body.user_code.toLowerCase());
    await page.getByRole('button', { name: 'Look up' }).click();
    await page.getByRole('button', { name: 'Decline' }).click();
    await page.getByText(`Declined ${started.body.user_code}.`).waitFor();
    const r = await suite.t.api('POST', '/oauth2/token', {
      headers: FORM,
      body: new URLSearchParams({ grant_type: GRANT, device_code: started.body.device_code }).toString(),
    });
    expect(r.body.error).toBe('authorization_declined');
    await expectNoErrorsAndClose();
  });
});
