import { z } from 'zod';
import type { SubscriptionsAnswer, SubscriptionView } from '../../shared/api-types.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import type { BillingService } from './service.js';

const httpUrl = z
  .string()
  .max(2048)
  .regex(/^https?:\/\/\S+$/, 'must be an http(s) URL');

const NOT_CONFIGURED =
  'Without STRIPE_SECRET_KEY: 409 `billing_not_configured` ("billing is not configured on this installation"), and nothing happens. Stripe unreachable: 502 `billing_unavailable`.';

const subscription = z.object({
  id: z.string(),
  status: z.string(),
  quantity: z.number(),
  price_id: z.string().nullable(),
  current_period_end: z.number().nullable().describe('Unix seconds'),
  cancel_at_period_end: z.boolean(),
}) satisfies z.ZodType<SubscriptionView>;

/** What the billing routes use. */
export interface BillingRouteDeps {
  billing: BillingService;
}

export const billingRoutes: RouteSpec<BillingRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/stripe/subscriptions',
    tag: 'billing',
    summary: 'The subscription in force',
    description:
      '`seats` is the SEATS setting (users allowed), `seats_used` the active users that take them (disabled users do not count); `usage` adds the approved devices. ' +
      '`billing_configured` says whether STRIPE_SECRET_KEY is set; with it, `subscriptions` lists the Stripe subscriptions of this installation’s customer (empty before the first checkout).',
    access: 'billing:read',
    response: z.object({
      seats: z.number(),
      seats_used: z.number(),
      usage: z.object({ users: z.number(), devices: z.number() }),
      billing_configured: z.boolean(),
      subscriptions: z.array(subscription),
    }) satisfies z.ZodType<SubscriptionsAnswer>,
    handler: async ({ deps }) => deps.billing.subscriptions(),
  }),
  defineRoute({
    method: 'post',
    path: '/stripe/create-customer-portal',
    tag: 'billing',
    summary: 'Open the Stripe customer portal',
    description:
      'A Stripe billing portal session for this installation’s customer (made on first use from the company record): `{url, id}`; `return_url` defaults to PUBLIC_URL. ' +
      NOT_CONFIGURED,
    access: 'billing:manage',
    body: z.object({ return_url: httpUrl.optional() }),
    response: z.object({ url: z.string(), id: z.string() }),
    transaction: false,
    audit: 'billing.portal',
    handler: async ({ body, deps }) => deps.billing.customerPortal(body),
  }),
  defineRoute({
    method: 'post',
    path: '/stripe/create-checkout-session',
    tag: 'billing',
    summary: 'Start a subscription checkout',
    description:
      'A Stripe Checkout session in subscription mode: `price_id` (default STRIPE_PRICE_ID; 400 when neither), `quantity` seats (default SEATS), `success_url` and `cancel_url` (default PUBLIC_URL). Answers `{url, id}`. ' +
      NOT_CONFIGURED,
    access: 'billing:manage',
    body: z.object({
      price_id: z.string().min(1).max(255).optional(),
      quantity: z.number().int().min(1).max(1_000_000).optional(),
      success_url: httpUrl.optional(),
      cancel_url: httpUrl.optional(),
    }),
    response: z.object({ url: z.string().nullable(), id: z.string() }),
    transaction: false,
    audit: 'billing.checkout',
    handler: async ({ body, deps }) => deps.billing.checkout(body),
  }),
  defineRoute({
    method: 'delete',
    path: '/stripe/cancel-subscription/{uuid}',
    tag: 'billing',
    summary: 'Cancel a subscription',
    description:
      "Cancels a Stripe subscription of this installation's customer at once: `{id, status}`. One of another customer, or unknown: 404. " + NOT_CONFIGURED,
    access: 'billing:manage',
    params: z.object({ uuid: z.string().regex(/^[A-Za-z0-9_]{1,255}$/, 'must be a Stripe subscription id') }),
    response: z.object({ id: z.string(), status: z.string() }),
    transaction: false,
    audit: 'billing.cancel',
    handler: async ({ params, deps }) => deps.billing.cancel(params.uuid),
  }),
];
