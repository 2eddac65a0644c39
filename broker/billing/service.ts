import Stripe from 'stripe';
import type { SubscriptionsAnswer } from '../../shared/api-types.js';
import type { Logger } from 'pino';
import type { CompanyService } from '../company/service.js';
import type { Config } from '../environment.js';
import type { Db } from '../db/database.js';
import { countApprovedDevices } from '../devices/directory.js';
import { conflict, DomainError, invalid, notFound, upstreamFailed } from '../errors.js';
import type { SettingsStore } from '../settings.js';
import type { UsersService } from '../users/service.js';

/** Where the Stripe customer of this installation is kept once made. */
export const STRIPE_CUSTOMER_KEY = 'billing.stripe_customer';
/** Stripe answers within this time or the call fails with 502. */
const STRIPE_TIMEOUT_MS = 15_000;

/** The answer of GET /stripe/subscriptions: declared once for the broker and the console. */
export type { SubscriptionView, SubscriptionsAnswer } from '../../shared/api-types.js';

export interface BillingDeps {
  db: Db;
  logger: Logger;
  config: Pick<Config, 'seats' | 'stripeSecretKey' | 'stripeApiBase' | 'stripePriceId' | 'publicUrl'>;
  settings: Pick<SettingsStore, 'get' | 'set'>;
  users: Pick<UsersService, 'seats'>;
  company: Pick<CompanyService, 'id' | 'get'>;
}

function notConfigured(): DomainError {
  return conflict('billing_not_configured', 'Billing is not configured on this installation: set STRIPE_SECRET_KEY to use Stripe.');
}

/**
 * The subscription of a self-hosted installation: its seats (SEATS) and what uses them, and, when
 * STRIPE_SECRET_KEY is set, Stripe's customer portal, checkout and cancellation through the
 * official SDK (STRIPE_API_BASE points it elsewhere, e.g. a test server). Without a key the Stripe
 * calls answer 409 billing_not_configured: nothing is pretended.
 */
export class BillingService {
  private readonly stripe: Stripe | undefined;
  private readonly log: Logger;

  constructor(private readonly deps: BillingDeps) {
    this.log = deps.logger.child({ module: 'billing' });
    const key = deps.config.stripeSecretKey;
    if (key) {
      const base = deps.config.stripeApiBase ? new URL(deps.config.stripeApiBase) : undefined;
      this.stripe = new Stripe(key, {
        maxNetworkRetries: 0,
        timeout: STRIPE_TIMEOUT_MS,
        telemetry: false,
        ...(base
          ? { host: base.hostname, port: base.port || (base.protocol === 'https:' ? 443 : 80), protocol: base.protocol === 'https:' ? 'https' : 'http' }
          : {}),
      });
    }
  }

  get configured(): boolean {
    return this.stripe !== undefined;
  }

  private client(): Stripe {
    if (!this.stripe) throw notConfigured();
    return this.stripe;
  }

  /** Stripe's refusals as API errors: its 404 is ours, its 400 names Stripe's reason, the rest is 502. */
  private async call<T>(what: string, work: () => Promise<T>): Promise<T> {
    try {
      return await work();
    } catch (err) {
      if (err instanceof DomainError) throw err;
      const e = err as { statusCode?: number; code?: string; message?: string; type?: string };
      if (e.statusCode === 404) throw notFound(`The Stripe object (${what})`);
      if (e.statusCode === 400 || e.statusCode === 402) {
        throw new DomainError('invalid', 'stripe_refused', `Stripe refused ${what}: ${e.message ?? 'invalid request'}`, { stripe_code: e.code ?? null });
      }
      this.log.warn({ err: { type: e.type, status: e.statusCode, message: e.message } }, `stripe ${what} failed`);
      throw upstreamFailed('billing_unavailable', `Stripe could not be reached for ${what}; try again later.`);
    }
  }

  private async customerId(create: boolean): Promise<string | undefined> {
    const known = await this.deps.settings.get<string>(STRIPE_CUSTOMER_KEY);
    if (known || !create) return known;
    const company = await this.deps.company.get(await this.deps.company.id());
    const customer = await this.call('customer creation', () =>
      this.client().customers.create({
        name: company.name || undefined,
        email: company.contact_email || undefined,
        metadata: { company_id: company.id },
      }),
    );
    await this.deps.settings.set(STRIPE_CUSTOMER_KEY, customer.id);
    return customer.id;
  }

  /** `GET /stripe/subscriptions`. */
  async subscriptions(): Promise<SubscriptionsAnswer> {
    const seats = await this.deps.users.seats();
    const devices = await countApprovedDevices(this.deps.db);
    const answer: SubscriptionsAnswer = {
      seats: this.deps.config.seats,
      seats_used: seats.used,
      usage: { users: seats.used, devices },
      billing_configured: this.configured,
      subscriptions: [],
    };
    if (!this.stripe) return answer;
    const customer = await this.customerId(false);
    if (!customer) return answer;
    const list = await this.call('the subscription list', () => this.client().subscriptions.list({ customer, status: 'all', limit: 100 }));
    answer.subscriptions = list.data.map((s) => {
      const item = s.items?.data?.[0];
      const end =
        (item as { current_period_end?: number } | undefined)?.current_period_end ?? (s as unknown as { current_period_end?: number }).current_period_end;
      return {
        id: s.id,
        status: s.status,
        quantity: item?.quantity ?? 0,
        price_id: item?.price?.id ?? null,
        current_period_end: typeof end === 'number' ? end : null,
        cancel_at_period_end: s.cancel_at_period_end === true,
      };
    });
    return answer;
  }

  private returnUrl(given: string | undefined, field: string): string {
    const url = given ?? this.deps.config.publicUrl;
    if (!url) throw invalid(`Give ${field}: this installation has no PUBLIC_URL to send people back to.`, { field });
    return url;
  }

  /** `POST /stripe/create-customer-portal`: a Stripe billing portal session for the installation's customer. */
  async customerPortal(body: { return_url?: string }): Promise<{ url: string; id: string }> {
    this.client();
    const customer = (await this.customerId(true)) as string;
    const returnUrl = this.returnUrl(body.return_url, 'return_url');
    const session = await this.call('the customer portal', () => this.client().billingPortal.sessions.create({ customer, return_url: returnUrl }));
    return { url: session.url, id: session.id };
  }

  /** `POST /stripe/create-checkout-session`: a subscription checkout for `quantity` seats. */
  async checkout(body: { price_id?: string; quantity?: number; success_url?: string; cancel_url?: string }): Promise<{ url: string | null; id: string }> {
    this.client();
    const price = body.price_id ?? this.deps.config.stripePriceId;
    if (!price) throw invalid('Give price_id: STRIPE_PRICE_ID is not set on this installation.', { field: 'price_id' });
    const successUrl = this.returnUrl(body.success_url, 'success_url');
    const cancelUrl = this.returnUrl(body.cancel_url, 'cancel_url');
    const customer = (await this.customerId(true)) as string;
    const session = await this.call('the checkout session', () =>
      this.client().checkout.sessions.create({
        mode: 'subscription',
        customer,
        line_items: [{ price, quantity: body.quantity ?? this.deps.config.seats }],
        success_url: successUrl,
        cancel_url: cancelUrl,
      }),
    );
    return { url: session.url, id: session.id };
  }

  /**
   * `DELETE /stripe/cancel-subscription/{uuid}`: cancels a subscription of this installation's
   * customer (one of another customer is 404, as is an unknown one).
   */
  async cancel(subscriptionId: string): Promise<{ id: string; status: string }> {
    const stripe = this.client();
    const customer = await this.customerId(false);
    if (!customer) throw notFound(`Subscription ${subscriptionId}`);
    const sub = await this.call('the subscription', () => stripe.subscriptions.retrieve(subscriptionId));
    const owner = typeof sub.customer === 'string' ? sub.customer : sub.customer?.id;
    if (owner !== customer) throw notFound(`Subscription ${subscriptionId}`);
    const cancelled = await this.call('the cancellation', () => stripe.subscriptions.cancel(subscriptionId));
    return { id: cancelled.id, status: cancelled.status };
  }
}
