/**
 * Order subscription: the seats in force (the SEATS setting), the seats used and what uses them
 * (GET /stripe/subscriptions, billing:read) and, when the installation has a Stripe key, its
 * subscriptions. With billing:manage: checkout (to Stripe's page), the customer portal and cancelling
 * a subscription (asked first). Without a key the screen says so and offers no Stripe action.
 */
import type { SubscriptionsAnswer } from '../../../shared/api-types.js';
import { api } from '../api.js';
import { allowed } from '../areas.js';
import { ConfirmButton, ErrorBox, Loading, Notice, PageTitle, Table, formatTime, useAction, useLoad } from '../ui.js';

/** Where Stripe sends the browser back to: this screen. */
function here(): string {
  return `${location.origin}/subscription`;
}

export function SubscriptionScreen() {
  const billing = useLoad(() => api.get<SubscriptionsAnswer>('/stripe/subscriptions'), []);
  const action = useAction();
  const mayManage = allowed('subscriptionManage');
  const data = billing.data;

  if (billing.error) return <ErrorBox error={billing.error} />;
  if (!data) return <Loading what="the subscription" />;

  const go = (path: string, body: Record<string, unknown>) =>
    void action.run(async () => {
      const r = await api.post<{ url: string | null; id: string }>(path, body);
      if (r.url) location.assign(r.url);
    });

  return (
    <section>
      <PageTitle>Order subscription</PageTitle>
      <dl class="kv" data-testid="seats">
        <dt>Seats in force</dt>
        <dd data-testid="seats-total">{data.seats}</dd>
        <dt>Seats used</dt>
        <dd data-testid="seats-used">{data.seats_used}</dd>
        <dt>Usage</dt>
        <dd data-testid="usage">
          {data.usage.users} active {data.usage.users === 1 ? 'user' : 'users'}, {data.usage.devices} approved {data.usage.devices === 1 ? 'device' : 'devices'}
        </dd>
      </dl>
      {!data.billing_configured ? (
        <Notice>
          Billing is not configured on this installation (no Stripe key is set), so there is nothing to order here. The seats in force come from the SEATS
          setting.
        </Notice>
      ) : (
        <>
          <h2>Stripe subscriptions</h2>
          {data.subscriptions.length === 0 ? (
            <p>No subscription yet.</p>
          ) : (
            <Table columns={['Subscription', 'Status', 'Seats', 'Price', 'Current period ends', mayManage && 'Actions']} caption="Stripe subscriptions">
              {data.subscriptions.map((s) => (
                <tr key={s.id} data-testid="subscription-row">
                  <td>
                    <code>{s.id}</code>
                  </td>
                  <td>{s.cancel_at_period_end ? `${s.status} (ends with the period)` : s.status}</td>
                  <td>{s.quantity}</td>
                  <td>{s.price_id ?? '—'}</td>
                  <td>{s.current_period_end ? formatTime(s.current_period_end) : '—'}</td>
                  {mayManage && (
                    <td>
                      {s.status !== 'canceled' && (
                        <ConfirmButton
                          label="Cancel subscription"
                          question={`Cancel ${s.id} now? Stripe ends it at once.`}
                          confirmLabel="Yes, cancel it"
                          disabled={action.busy}
                          onConfirm={() =>
                            void action.run(async () => {
                              await api.del(`/stripe/cancel-subscription/${encodeURIComponent(s.id)}`);
                              billing.reload();
                            })
                          }
                        />
                      )}
                    </td>
                  )}
                </tr>
              ))}
            </Table>
          )}
          {mayManage && (
            <div class="button-row">
              <button
                type="button"
                class="primary"
                disabled={action.busy}
                onClick={() => go('/stripe/create-checkout-session', { success_url: here(), cancel_url: here() })}
              >
                Order {data.seats} seats
              </button>
              <button type="button" disabled={action.busy} onClick={() => go('/stripe/create-customer-portal', { return_url: here() })}>
                Open customer portal
              </button>
            </div>
          )}
        </>
      )}
      <ErrorBox error={action.error} title="Stripe did not accept this" />
    </section>
  );
}
