import http from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A local server speaking the part of Stripe's REST API the broker uses (form-encoded requests,
 * JSON objects and lists, errors as {error:{type,message}}), recording what it was sent.
 */
export interface StripeCall {
  method: string;
  path: string;
  auth: string | undefined;
  form: URLSearchParams;
}

export async function fakeStripe() {
  const calls: StripeCall[] = [];
  const subscriptions = new Map<string, { id: string; customer: string; status: string }>([
    ['sub_theirs', { id: 'sub_theirs', customer: 'cus_someone_else', status: 'active' }],
  ]);
  let customers = 0;
  const server = http.createServer((req, res) => {
    let raw = '';
    req.on('data', (c) => (raw += c));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://stripe.test');
      const form = new URLSearchParams(req.method === 'GET' || req.method === 'DELETE' ? url.search : raw);
      calls.push({ method: req.method ?? '', path: url.pathname, auth: req.headers.authorization, form });
      const send = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json', 'request-id': `req_${calls.length}` });
        res.end(JSON.stringify(body));
      };
      const missing = (what: string) => send(404, { error: { type: 'invalid_request_error', code: 'resource_missing', message: `No such ${what}` } });
      const subscriptionObject = (s: { id: string; customer: string; status: string }) => ({
        id: s.id,
        object: 'subscription',
        customer: s.customer,
        status: s.status,
        cancel_at_period_end: false,
        items: {
          object: 'list',
          data: [{ id: 'si_1', object: 'subscription_item', quantity: 25, price: { id: 'price_seat', object: 'price' }, current_period_end: 1900000000 }],
        },
      });
      const route = `${req.method} ${url.pathname}`;
      if (route === 'POST /v1/customers') {
        customers += 1;
        return send(200, { id: `cus_${customers}`, object: 'customer', name: form.get('name'), email: form.get('email') });
      }
      if (route === 'POST /v1/billing_portal/sessions') {
        return send(200, {
          id: 'bps_1',
          object: 'billing_portal.session',
          customer: form.get('customer'),
          url: 'https://billing.stripe.test/session/bps_1',
          return_url: form.get('return_url'),
        });
      }
      if (route === 'POST /v1/checkout/sessions') {
        if (form.get('line_items[0][price]') === 'price_unknown') {
          return send(400, { error: { type: 'invalid_request_error', code: 'resource_missing', message: 'No such price', param: 'line_items[0][price]' } });
        }
        subscriptions.set('sub_mine', { id: 'sub_mine', customer: form.get('customer') ?? '', status: 'active' });
        return send(200, { id: 'cs_1', object: 'checkout.session', mode: 'subscription', url: 'https://checkout.stripe.test/c/cs_1' });
      }
      if (route === 'GET /v1/subscriptions') {
        const data = [...subscriptions.values()].filter((s) => s.customer === form.get('customer')).map(subscriptionObject);
        return send(200, { object: 'list', data, has_more: false, url: '/v1/subscriptions' });
      }
      const one = /^\/v1\/subscriptions\/([^/]+)$/.exec(url.pathname);
      if (one) {
        const sub = subscriptions.get(decodeURIComponent(one[1]));
        if (!sub) return missing('subscription');
        if (req.method === 'DELETE') sub.status = 'canceled';
        return send(200, subscriptionObject(sub));
      }
      return send(404, { error: { type: 'invalid_request_error', message: `Unrecognized request URL (${route})` } });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, calls, port: (server.address() as AddressInfo).port };
}
