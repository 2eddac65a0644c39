import { Secret, TOTP } from 'otpauth';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { screenshot, useBrowserSuite } from '../support/browser.js';
import { startTestSmtp, type TestSmtp } from '../support/smtp.js';

let smtp: TestSmtp;

const totpCode = (secret: string, timestamp: number) =>
  new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 }).generate({ timestamp });

// The mail server starts before the broker that sends to it and stops after it (after hooks run in reverse).
beforeAll(async () => {
  smtp = await startTestSmtp();
});

afterAll(async () => {
  await smtp?.close();
});

const suite = useBrowserSuite({ env: () => ({ SMTP_URL: smtp.url }) });

describe('two-factor sign-in', () => {
  it('enrols an authenticator app from the profile (QR code) and then signs in with its code', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user, at: '/profile' });
    await page.getByRole('button', { name: 'Set up an authenticator app' }).click();
    const qr = page.getByTestId('totp-qr');
    await qr.waitFor();
    expect(await qr.getAttribute('src')).toMatch(/^data:image\/png;base64,/);
    expect(await qr.evaluate((img: HTMLImageElement) => img.naturalWidth)).toBeGreaterThan(0);
    const secret = ((await page.getByTestId('totp-secret').textContent()) ?? '').trim();
    expect(secret).toMatch(/^[A-Z2-7]+$/);
    await screenshot(page, 'profile-totp-enrol');

    const enrolledAt = Date.now();
    await page.getByLabel('Code').fill(totpCode(secret, enrolledAt));
    await page.getByRole('button', { name: 'Confirm' }).click();
    await page.getByText('The authenticator app is set up and the second factor is on').waitFor();
    // The panel and the server agree: enrolling turned the second factor on for this user.
    await expect.poll(() => page.getByTestId('two-factor-state').textContent()).toBe('yes');
    const profile = await suite.t.api('GET', '/api/v2/profile', { token: user.token });
    expect(profile.body.two_factor).toEqual({ enabled: true, providers: ['email', 'google'] });

    // The next sign-in asks for it, with no administrator turning it on.
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('button', { name: 'Sign in' }).waitFor();
    expect(await page.getByText('You are signed out.').isVisible()).toBe(true);

    await page.getByLabel('Email').fill(user.email);
    await page.getByLabel('Password').fill(user.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Second factor' }).waitFor();
    // The stale sign-out notice is gone, and the enrolled app is offered before a mailed code.
    expect(await page.getByText('You are signed out.').count()).toBe(0);
    expect(await page.getByRole('form', { name: 'Second factor' }).locator('.stack button').allTextContents()).toEqual([
      'Authenticator app',
      'Email me a code',
    ]);
    await screenshot(page, 'sign-in-provider');
    await page.getByRole('button', { name: 'Authenticator app' }).click();
    await page.getByRole('heading', { name: 'Enter your code' }).waitFor();

    await page.getByLabel('Code').fill('000000');
    await page.getByRole('button', { name: 'Verify' }).click();
    await page.getByRole('alert').waitFor();
    expect(await page.getByRole('alert').textContent()).toMatch(/code/i);
    await screenshot(page, 'sign-in-code-refused');

    // A code is accepted once: use the next time step's code, valid within the ±1 step window.
    await page.getByLabel('Code').fill(totpCode(secret, Math.max(Date.now(), enrolledAt) + 30_000));
    await page.getByRole('button', { name: 'Verify' }).click();
    await page.locator('header.topbar').waitFor();
    await page.getByRole('heading', { level: 1, name: 'Devices' }).waitFor();
    await expectNoErrorsAndClose();
  });

  it('shows ten recovery codes once at enrolment, and signs in with one, saying how many are left', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user, at: '/profile' });
    await page.getByRole('button', { name: 'Set up an authenticator app' }).click();
    const secret = ((await page.getByTestId('totp-secret').textContent()) ?? '').trim();
    await page.getByLabel('Code').fill(totpCode(secret, Date.now()));
    await page.getByRole('button', { name: 'Confirm' }).click();

    const shown = page.getByTestId('recovery-codes').locator('li');
    await expect.poll(() => shown.count()).toBe(10);
    const codes = (await shown.allTextContents()).map((c) => c.trim());
    for (const code of codes) expect(code).toMatch(/^[0-9a-z]{4}(-[0-9a-z]{4}){3}$/);
    const region = page.getByRole('region', { name: 'Recovery codes' });
    expect(await region.getByRole('button', { name: 'Copy codes' }).isVisible()).toBe(true);
    const [download] = await Promise.all([page.waitForEvent('download'), region.getByRole('button', { name: 'Download' }).click()]);
    expect(download.suggestedFilename()).toBe('fleet-recovery-codes.txt');
    await screenshot(page, 'profile-recovery-codes');
    await page.getByRole('button', { name: 'I have saved them' }).click();
    // Shown once: gone from the page, and the profile counts them.
    expect(await page.getByTestId('recovery-codes').count()).toBe(0);
    await expect.poll(() => page.getByTestId('recovery-codes-left').textContent()).toBe('10');

    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByLabel('Email').fill(user.email);
    await page.getByLabel('Password').fill(user.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('button', { name: 'Authenticator app' }).click();
    await page.getByRole('button', { name: 'Use a recovery code' }).click();
    await page.getByLabel('Recovery code', { exact: true }).fill(codes[3]);
    await page.getByRole('button', { name: 'Verify' }).click();
    await expect.poll(() => page.getByTestId('recovery-codes-left').textContent()).toMatch(/^9 recovery codes left\./);
    await screenshot(page, 'sign-in-recovery-code');
    await page.getByRole('button', { name: 'Continue' }).click();
    await page.getByRole('heading', { level: 1, name: 'Devices' }).waitFor();
    const audit = await suite.t.api('GET', `/api/v2/commitlist?user_id=${user.id}&event=session.login`, { token: suite.t.adminToken });
    expect(audit.body.items[0].options).toMatchObject({ method: 'password+recovery_code', recovery_codes_left: 9 });
    await expectNoErrorsAndClose();
  });

  it('signs in with a code mailed to the user', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    expect((await suite.t.api('PATCH', `/api/v2/user/${user.id}`, { token: suite.t.adminToken, body: { two_factor: { enabled: true } } })).status).toBe(200);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: null, at: '/login' });
    await page.getByLabel('Email').fill(user.email);
    await page.getByLabel('Password').fill(user.password);
    await page.getByRole('button', { name: 'Sign in' }).click();
    // Only the email provider: the choice is skipped.
    await page.getByRole('heading', { name: 'Enter your code' }).waitFor();
    const mail = await smtp.next(user.email);
    const code = /\b(\d{6})\b/.exec(mail.text)?.[1];
    expect(code).toBeDefined();
    await page.getByLabel('Code').fill(code as string);
    await page.getByRole('button', { name: 'Verify' }).click();
    await page.getByRole('heading', { level: 1, name: 'Devices' }).waitFor();
    await expectNoErrorsAndClose();
  });
});

describe('password links', () => {
  it('creates a user without a password: the welcome link sets one, then the user signs in', async () => {
    const admin = await suite.open();
    await admin.page.goto('/users');
    await admin.page.getByRole('button', { name: 'New user' }).click();
    const form = admin.page.getByRole('form', { name: 'New user' });
    await form.getByLabel('First name').fill('Wendy');
    await form.getByLabel('Last name').fill('Welcome');
    await form.getByLabel('Email').fill('wendy@example.com');
    await form.getByLabel('Administrator').check();
    await form.getByRole('button', { name: 'Create user' }).click();
    await admin.page.getByText('a welcome email with a link to set a password was sent').waitFor();
    await admin.expectNoErrorsAndClose();

    const mail = await smtp.next('wendy@example.com');
    const link = new URL(/https?:\/\/\S+set-password\?token=\S+/.exec(mail.text)?.[0] as string);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: null, at: link.pathname + link.search });
    await page.getByRole('heading', { name: 'Set your password' }).waitFor();
    await screenshot(page, 'set-password');
    await page.getByLabel('New password', { exact: true }).fill('wendys-password-1');
    await page.getByLabel('New password again').fill('wendys-password-1');
    await page.getByRole('button', { name: 'Set password' }).click();
    await page.getByText('Your password is set.').waitFor();
    await page.getByRole('link', { name: 'Sign in' }).click();
    expect(await page.getByLabel('Email').inputValue()).toBe('wendy@example.com');
    await page.getByLabel('Password').fill('wendys-password-1');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.locator('header.topbar').waitFor();

    // The link works once.
    await page.goto(link.pathname + link.search);
    await page.getByLabel('New password', { exact: true }).fill('another-password-2');
    await page.getByLabel('New password again').fill('another-password-2');
    await page.getByRole('button', { name: 'Set password' }).click();
    await page.getByRole('alert').waitFor();
    expect(await page.getByRole('alert').textContent()).toContain('The link cannot be used');
    await expectNoErrorsAndClose();
  });

  it('mails a reset link from the sign-in page', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: null, at: '/login' });
    await page.getByRole('button', { name: 'Forgot your password?' }).click();
    await page.getByLabel('Email').fill(user.email);
    await page.getByRole('button', { name: 'Send the link' }).click();
    await page.getByRole('status').waitFor();
    const mail = await smtp.next(user.email);
    expect(mail.text).toContain('/set-password?token=');
    await expectNoErrorsAndClose();
  });
});

describe('profile', () => {
  it('changes the name and the password; a wrong current password is shown at its field', async () => {
    const user = await suite.t.userWith([{ permission: 'device:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: user });
    await page.getByRole('link', { name: /^Profile/ }).click();
    await page.getByRole('heading', { level: 1, name: 'Profile' }).waitFor();
    await page.getByLabel('First name').fill('Grace');
    await page.getByLabel('Last name').fill('Hopper');
    await page.getByRole('form', { name: 'Your name' }).getByRole('button', { name: 'Save' }).click();
    // The Profile link carries the new name (its title).
    await expect.poll(() => page.getByRole('link', { name: /^Profile/ }).getAttribute('title')).toBe(`Grace Hopper · ${user.email}`);
    expect((await suite.t.api('GET', '/api/v2/profile', { token: user.token })).body).toMatchObject({ fname: 'Grace', lname: 'Hopper' });

    await page.getByLabel('Current password').fill('not-the-password');
    await page.getByLabel('New password', { exact: true }).fill('a-new-password-42');
    await page.getByLabel('New password again').fill('a-new-password-42');
    await page.getByRole('button', { name: 'Change password' }).click();
    const current = page.locator('.field', { has: page.getByLabel('Current password') });
    await current.locator('.field-error').waitFor();
    await screenshot(page, 'profile-password-refused');

    await page.getByLabel('Current password').fill(user.password);
    await page.getByRole('button', { name: 'Change password' }).click();
    await page.getByText('Your password was changed.').waitFor();
    expect(await suite.t.login(user.email, 'a-new-password-42')).toMatch(/^ey/);
    await expectNoErrorsAndClose();
  });

  it('saves the name of the first administrator, who has no last name', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open();
    expect((await suite.t.api('GET', '/api/v2/profile', { token: suite.t.adminToken })).body.lname).toBe('');
    await page.goto('/profile');
    await page.getByLabel('First name').fill('Ada');
    await page.getByRole('form', { name: 'Your name' }).getByRole('button', { name: 'Save' }).click();
    await page.getByText('Saved.').waitFor();
    expect((await suite.t.api('GET', '/api/v2/profile', { token: suite.t.adminToken })).body).toMatchObject({ fname: 'Ada', lname: '' });
    await page.getByLabel('First name').fill('Admin');
    await page.getByRole('form', { name: 'Your name' }).getByRole('button', { name: 'Save' }).click();
    await expect.poll(async () => (await suite.t.api('GET', '/api/v2/profile', { token: suite.t.adminToken })).body.fname).toBe('Admin');
    await expectNoErrorsAndClose();
  });
});
