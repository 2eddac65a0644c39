import { describe, expect, it } from 'vitest';
import { ApiError } from '../http/errors.js';
import { MAX_OPEN_TICKETS, MAX_OPEN_TICKETS_PER_USER, TICKET_TTL_SECONDS, TicketStore } from './tickets.js';

describe('TicketStore', () => {
  it('redeems a ticket once, and not after it expired', () => {
    const store = new TicketStore();
    const now = 1_000_000;
    const { ticket } = store.issue('token-a', 'alice', now);
    expect(store.redeem(ticket, now + 1)).toBe('token-a');
    expect(store.redeem(ticket, now + 2)).toBeUndefined();
    const late = store.issue('token-a', 'alice', now).ticket;
    expect(store.redeem(late, now + TICKET_TTL_SECONDS * 1000)).toBeUndefined();
  });

  it("never voids another user's ticket when one user issues more than the global cap", () => {
    const store = new TicketStore();
    const now = 1_000_000;
    const bobs = store.issue('token-b', 'bob', now).ticket;
    for (let i = 0; i < MAX_OPEN_TICKETS + 1; i++) store.issue('token-a', 'alice', now);
    expect(store.openFor('alice')).toBe(MAX_OPEN_TICKETS_PER_USER);
    expect(store.size).toBe(MAX_OPEN_TICKETS_PER_USER + 1);
    expect(store.redeem(bobs, now + 1)).toBe('token-b');
  });

  it("drops the user's own oldest ticket past the per-user cap", () => {
    const store = new TicketStore(3, 100);
    const first = store.issue('t', 'alice', 0).ticket;
    const rest = [1, 2, 3].map(() => store.issue('t', 'alice', 0).ticket);
    expect(store.redeem(first, 1)).toBeUndefined();
    for (const ticket of rest) expect(store.redeem(ticket, 1)).toBe('t');
    expect(store.openFor('alice')).toBe(0);
  });

  it('stays bounded in total: a full store refuses new tickets with 429 and keeps the open ones', () => {
    const store = new TicketStore(2, 4);
    const open = ['a', 'b'].flatMap((user) => [store.issue(user, user, 0).ticket, store.issue(user, user, 0).ticket]);
    let refused: unknown;
    try {
      store.issue('c', 'carol', 0);
    } catch (err) {
      refused = err;
    }
    expect(refused).toBeInstanceOf(ApiError);
    expect((refused as ApiError).status).toBe(429);
    expect(store.size).toBe(4);
    for (const ticket of open) expect(store.redeem(ticket, 1)).toBeDefined();
    // Expired tickets make room again.
    store.issue('a', 'a', 0);
    expect(() => store.issue('c', 'carol', TICKET_TTL_SECONDS * 1000 + 1)).not.toThrow();
  });
});
