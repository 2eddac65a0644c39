/**
 * The Order subscription area: the seats in force and used, the Stripe subscriptions through a
 * local server speaking Stripe's REST shapes, checkout and the customer portal (to the URL Stripe
 * answers), cancelling (asked first); a reader without billing:manage is offered no action, and an
 * installation without a Stripe key says so and offers nothing.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { screenshot, useBrowserSuite } from '../support/browser.js';
import { fakeStripe } from '../support/stripe.js';

let stripe: Awaited<ReturnType<typeof fakeStripe>>;
beforeAll(async () => {
  stripe = await fakeStripe();
});
afterAll(() => {
  stripe?.server.close();
});

const suite = useBrowserSuite({
  env: () => ({ STRIPE_SECRET_KEY: 'sk_test_local', STRIPE_API_BASE: `http://127.0.0.1:${stripe.port}`, STRIPE_PRICE_ID: 'price_seat', SEATS: '25' }),
});

describe('Order subscription with Stripe configured', () => {
  it('shows the seats, orders through checkout, lists the subscription and cancels it after asking', async () => {
    await suite.t.addDevice({ name: 'billed-1' });
    const { page, expectNoErrorsAndClose } = await suite.open();
    // Stripe's pages are not reachable from the test: the browser is answered for them here.
    await page.route('https://checkout.stripe.test/**', (route) => route.fulfill({ contentType: 'text/html', body: '<h1>Stripe checkout</h1>' }));
    await page.route('https://billing.stripe.test/**', (route) => route.fulfill({ contentType: 'text/html', body: '<h1>Stripe portal</h1>' }));
    await page.getByRole('link', { name: 'Subscription' }).click();
    await page.getByRole('heading', { name: 'Order subscription' }).waitFor();
    expect(await page.getByTestId('seats-total').textContent()).toBe('25');
    expect(await page.getByTestId('seats-used').textContent()).toBe('1');
    expect(await page.getByTestId('usage').textContent()).toBe('1 active user, 1 approved device');
    await page.getByText('No subscription yet.').waitFor();

    await page.getByRole('button', { name: 'Order 25 seats' }).click();
    await page.waitForURL('https://checkout.stripe.test/c/cs_1');
    const checkout = stripe.calls.find((c) => c.path === '/v1/checkout/sessions');
    expect(checkout?.form.get('line_items[0][quantity]')).toBe('25');
    expect(checkout?.form.get('success_url')).toBe(`${suite.t.url}/subscription`);

    await page.goto('/subscription');
    const row = page.getByTestId('subscription-row');
    await expect.poll(() => row.count()).toBe(1);
    expect(await row.textContent()).toContain('sub_mine');
    expect(await row.textContent()).toContain('active');
    await screenshot(page, 'subscription');

    await row.getByRole('button', { name: 'Cancel subscription' }).click();
    // Asked first: nothing is cancelled until confirmed.
    expect(stripe.calls.some((c) => c.method === 'DELETE')).toBe(false);
    await row.getByRole('button', { name: 'Cancel', exact: true }).click();
    expect(stripe.calls.some((c) => c.method === 'DELETE')).toBe(false);
    await row.getByRole('button', { name: 'Cancel subscription' }).click();
    await row.getByRole('button', { name: 'Yes, cancel it' }).click();
    await expect.poll(() => row.textContent()).toContain('canceled');
    expect(stripe.calls.filter((c) => c.method === 'DELETE').map((c) => c.path)).toEqual(['/v1/subscriptions/sub_mine']);
    expect(await row.getByRole('button', { name: 'Cancel subscription' }).count()).toBe(0);

    await page.getByRole('button', { name: 'Open customer portal' }).click();
    await page.waitForURL('https://billing.stripe.test/session/bps_1');
    expect(stripe.calls.at(-1)?.form.get('return_url')).toBe(`${suite.t.url}/subscription`);
    await expectNoErrorsAndClose();
  });

  it('shows a holder of billing:read alone the subscription without any action, and the API refuses them', async () => {
    const reader = await suite.t.userWith([{ permission: 'billing:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: reader });
    await page.getByRole('link', { name: 'Subscription' }).click();
    await expect.poll(() => page.getByTestId('subscription-row').count()).toBe(1);
    expect(
      await page
        .getByRole('button')
        .filter({ hasText: /Order|portal|Cancel subscription/ })
        .count(),
    ).toBe(0);
    expect((await suite.t.api('POST', '/api/v2/stripe/create-checkout-session', { token: reader.token, body: {} })).status).toBe(403);
    expect((await suite.t.api('DELETE', '/api/v2/stripe/cancel-subscription/sub_mine', { token: reader.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });

  it('hides the area from a user without billing:read, and the API refuses them', async () => {
    const other = await suite.t.userWith([{ permission: 'company:read' }]);
    const { page, expectNoErrorsAndClose } = await suite.open({ as: other });
    expect(await page.getByRole('link', { name: 'Subscription' }).count()).toBe(0);
    await page.goto('/subscription');
    await page.getByText('Access denied').waitFor();
    expect((await suite.t.api('GET', '/api/v2/stripe/subscriptions', { token: other.token })).status).toBe(403);
    await expectNoErrorsAndClose();
  });
});

describe('Order subscription without a Stripe key', () => {
  let bare: TestBroker;
  beforeAll(async () => {
    bare = await startTestBroker({ env: { SEATS: '7' } });
  });
  afterAll(async () => {
    await bare?.close();
  });

  it('says billing is not configured and offers nothing to order, even to a manager', async () => {
    const { page, expectNoErrorsAndClose } = await suite.open({ broker: bare });
    await page.getByRole('link', { name: 'Subscription' }).click();
    await page.getByText('Billing is not configured on this installation').waitFor();
    expect(await page.getByTestId('seats-total').textContent()).toBe('7');
    expect(await page.getByTestId('seats-used').textContent()).toBe('1');
    expect(
      await page
        .getByRole('button')
        .filter({ hasText: /Order|portal|Cancel subscription/ })
        .count(),
    ).toBe(0);
    await screenshot(page, 'subscription-unconfigured');
    // The API refuses the Stripe calls plainly too.
    const r = await bare.api('POST', '/api/v2/stripe/create-checkout-session', { token: bare.adminToken, body: {} });
    expect(r.status).toBe(409);
    expect(r.body.error).toBe('billing_not_configured');
    await expectNoErrorsAndClose();
  });
});
