import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { fakeStripe } from '../support/stripe.js';

describe('billing without a Stripe key', () => {
  let t: TestBroker;
  beforeAll(async () => {
    t = await startTestBroker({ env: { SEATS: '7' } });
    await t.addDevice();
    await t.addDevice();
  });
  afterAll(async () => {
    await t?.close();
  });

  it('reports the seats in force and what uses them', async () => {
    const r = await t.api('GET', '/api/v2/stripe/subscriptions', { token: t.adminToken });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ seats: 7, seats_used: 1, usage: { users: 1, devices: 2 }, billing_configured: false, subscriptions: [] });
  });

  it('answers 409 billing_not_configured for every Stripe call, never a fake success', async () => {
    for (const [method, path, body] of [
      ['POST', '/api/v2/stripe/create-customer-portal', {}],
      ['POST', '/api/v2/stripe/create-checkout-session', { price_id: 'price_x', success_url: 'https://x.test/ok', cancel_url: 'https://x.test/no' }],
      ['DELETE', '/api/v2/stripe/cancel-subscription/sub_1', undefined],
    ] as const) {
      const r = await t.api(method, path, { token: t.adminToken, body });
      expect(r.status, path).toBe(409);
      expect(r.body).toMatchObject({ code: 409, error: 'billing_not_configured' });
      expect(r.body.message).toMatch(/billing is not configured on this installation/i);
    }
  });

  it('refuses callers without the billing permissions', async () => {
    const reader = await t.tokenWith([{ permission: 'billing:read' }]);
    const nobody = await t.tokenWith([{ permission: 'company:read' }]);
    expect((await t.api('GET', '/api/v2/stripe/subscriptions', { token: nobody })).status).toBe(403);
    expect((await t.api('GET', '/api/v2/stripe/subscriptions', { token: reader })).status).toBe(200);
    expect((await t.api('POST', '/api/v2/stripe/create-customer-portal', { token: reader, body: {} })).status).toBe(403);
    expect((await t.api('DELETE', '/api/v2/stripe/cancel-subscription/sub_1', { token: reader })).status).toBe(403);
  });
});

describe('billing through Stripe (a local server speaking its REST shapes)', () => {
  let t: TestBroker;
  let stripe: Awaited<ReturnType<typeof fakeStripe>>;
  beforeAll(async () => {
    stripe = await fakeStripe();
    t = await startTestBroker({
      env: {
        STRIPE_SECRET_KEY: 'sk_test_local',
        STRIPE_API_BASE: `http://127.0.0.1:${stripe.port}`,
        STRIPE_PRICE_ID: 'price_seat',
        SEATS: '25',
        PUBLIC_URL: 'https://fleet.example.test',
      },
    });
    const company = (await t.api('GET', '/api/v2/company', { token: t.adminToken })).body;
    await t.api('PATCH', `/api/v2/company/${company.id}`, { token: t.adminToken, body: { name: 'Acme', contact_email: 'billing@acme.example' } });
  });
  afterAll(async () => {
    await t?.close();
    stripe?.server.close();
  });

  it('has no subscriptions before the first checkout, and asks Stripe nothing for that', async () => {
    const r = await t.api('GET', '/api/v2/stripe/subscriptions', { token: t.adminToken });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ seats: 25, billing_configured: true, subscriptions: [] });
    expect(stripe.calls).toEqual([]);
  });

  it('opens a checkout session for the seats, making the customer from the company record once', async () => {
    const r = await t.api('POST', '/api/v2/stripe/create-checkout-session', { token: t.adminToken, body: {} });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ id: 'cs_1', url: 'https://checkout.stripe.test/c/cs_1' });
    const [customer, checkout] = stripe.calls;
    expect(customer).toMatchObject({ method: 'POST', path: '/v1/customers', auth: 'Bearer sk_test_local' });
    expect(customer.form.get('name')).toBe('Acme');
    expect(customer.form.get('email')).toBe('billing@acme.example');
    expect(checkout.path).toBe('/v1/checkout/sessions');
    expect(Object.fromEntries(checkout.form)).toMatchObject({
      mode: 'subscription',
      customer: 'cus_1',
      'line_items[0][price]': 'price_seat',
      'line_items[0][quantity]': '25',
      success_url: 'https://fleet.example.test',
      cancel_url: 'https://fleet.example.test',
    });
    // The customer is made once.
    const again = await t.api('POST', '/api/v2/stripe/create-customer-portal', {
      token: t.adminToken,
      body: { return_url: 'https://fleet.example.test/web/billing' },
    });
    expect(again.status).toBe(200);
    expect(again.body).toEqual({ id: 'bps_1', url: 'https://billing.stripe.test/session/bps_1' });
    expect(stripe.calls.filter((c) => c.path === '/v1/customers')).toHaveLength(1);
    expect(stripe.calls.at(-1)!.form.get('return_url')).toBe('https://fleet.example.test/web/billing');
  });

  it('lists the customer’s subscriptions', async () => {
    const r = await t.api('GET', '/api/v2/stripe/subscriptions', { token: t.adminToken });
    expect(r.body.subscriptions).toEqual([
      { id: 'sub_mine', status: 'active', quantity: 25, price_id: 'price_seat', current_period_end: 1900000000, cancel_at_period_end: false },
    ]);
    expect(stripe.calls.at(-1)!.form.get('customer')).toBe('cus_1');
  });

  it('passes Stripe’s refusals on as 400, keeps bad input from Stripe', async () => {
    const before = stripe.calls.length;
    const refused = await t.api('POST', '/api/v2/stripe/create-checkout-session', { token: t.adminToken, body: { price_id: 'price_unknown' } });
    expect(refused.status).toBe(400);
    expect(refused.body).toMatchObject({ error: 'stripe_refused' });
    for (const body of [{ quantity: 0 }, { success_url: 'javascript:alert(1)' }, { price_id: 'p', extra: 1 }]) {
      expect((await t.api('POST', '/api/v2/stripe/create-checkout-session', { token: t.adminToken, body })).status).toBe(400);
    }
    expect((await t.api('DELETE', '/api/v2/stripe/cancel-subscription/..%2Fcustomers', { token: t.adminToken })).status).toBe(400);
    expect(stripe.calls.length).toBe(before + 1);
  });

  it('cancels only subscriptions of this installation’s customer', async () => {
    const theirs = await t.api('DELETE', '/api/v2/stripe/cancel-subscription/sub_theirs', { token: t.adminToken });
    expect(theirs.status).toBe(404);
    expect(stripe.calls.some((c) => c.method === 'DELETE' && c.path === '/v1/subscriptions/sub_theirs')).toBe(false);
    expect((await t.api('DELETE', '/api/v2/stripe/cancel-subscription/sub_nothere', { token: t.adminToken })).status).toBe(404);
    const mine = await t.api('DELETE', '/api/v2/stripe/cancel-subscription/sub_mine', { token: t.adminToken });
    expect(mine.status).toBe(200);
    expect(mine.body).toEqual({ id: 'sub_mine', status: 'canceled' });
    const audited = await t.broker.services.store.db.selectFrom('audit').select(['event', 'result']).where('event', '=', 'billing.cancel').execute();
    expect(audited.filter((a) => a.result === 'ok')).toHaveLength(1);
  });

  it('answers 502 when Stripe cannot be reached', async () => {
    const down = await startTestBroker({
      env: { STRIPE_SECRET_KEY: 'sk_test_local', STRIPE_API_BASE: 'http://127.0.0.1:1', PUBLIC_URL: 'https://fleet.example.test' },
    });
    try {
      const r = await down.api('POST', '/api/v2/stripe/create-customer-portal', { token: down.adminToken, body: {} });
      expect(r.status).toBe(502);
      expect(r.body).toMatchObject({ code: 502, error: 'billing_unavailable' });
    } finally {
      await down.close();
    }
  });
});
