import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../db/database.js';
import { ExpirySweep } from '../db/expiry.js';
import { DomainError } from '../errors.js';
import { MAX_OPEN_TICKETS_PER_USER, TICKET_TTL_SECONDS, TicketStore } from './tickets.js';

let store: Store;
beforeEach(async () => {
  store = await openStore('sqlite::memory:');
});
afterEach(async () => {
  await store.close();
});

describe('TicketStore', () => {
  it('redeems a ticket once, and not after it expired', async () => {
    const tickets = new TicketStore(store.db);
    const now = 1_000_000;
    const { ticket } = await tickets.issue('token-a', 'alice', now);
    expect(await tickets.redeem(ticket, now + 1)).toBe('token-a');
    expect(await tickets.redeem(ticket, now + 2)).toBeUndefined();
    const late = (await tickets.issue('token-a', 'alice', now)).ticket;
    expect(await tickets.redeem(late, now + TICKET_TTL_SECONDS * 1000)).toBeUndefined();
    expect(await tickets.redeem('made-up', now)).toBeUndefined();
  });

  it('keeps only the ticket digest in the store', async () => {
    const tickets = new TicketStore(store.db);
    const { ticket } = await tickets.issue('token-a', 'alice', 0);
    const rows = await store.db.selectFrom('remote_tickets').selectAll().execute();
    expect(rows).toHaveLength(1);
    expect(JSON.stringify(rows)).not.toContain(ticket);
  });

  it('of two redemptions at once, exactly one gets the token', async () => {
    const tickets = new TicketStore(store.db);
    const { ticket } = await tickets.issue('token-a', 'alice', 0);
    const both = await Promise.all([tickets.redeem(ticket, 1), tickets.redeem(ticket, 1)]);
    expect(both.filter((t) => t === 'token-a')).toHaveLength(1);
  });

  it("never voids another user's ticket when one user issues more than their cap", async () => {
    const tickets = new TicketStore(store.db);
    const bobs = (await tickets.issue('token-b', 'bob', 0)).ticket;
    for (let i = 0; i < MAX_OPEN_TICKETS_PER_USER + 5; i++) await tickets.issue('token-a', 'alice', i);
    expect(await tickets.openFor('alice', 100)).toBe(MAX_OPEN_TICKETS_PER_USER);
    expect(await tickets.size(100)).toBe(MAX_OPEN_TICKETS_PER_USER + 1);
    expect(await tickets.redeem(bobs, 100)).toBe('token-b');
  });

  it("drops the user's own oldest ticket past the per-user cap", async () => {
    const tickets = new TicketStore(store.db, 3, 100);
    const first = (await tickets.issue('t', 'alice', 0)).ticket;
    const rest: string[] = [];
    for (const at of [1, 2, 3]) rest.push((await tickets.issue('t', 'alice', at)).ticket);
    expect(await tickets.redeem(first, 4)).toBeUndefined();
    for (const ticket of rest) expect(await tickets.redeem(ticket, 4)).toBe('t');
    expect(await tickets.openFor('alice', 4)).toBe(0);
  });

  it('stays bounded in total: a full store refuses new tickets with 429 and keeps the open ones', async () => {
    const tickets = new TicketStore(store.db, 2, 4);
    const open: string[] = [];
    for (const user of ['a', 'b']) for (let i = 0; i < 2; i++) open.push((await tickets.issue(user, user, 0)).ticket);
    const refused = await tickets.issue('c', 'carol', 0).catch((err: unknown) => err);
    expect(refused).toBeInstanceOf(DomainError);
    expect((refused as DomainError).kind).toBe('rate_limited');
    expect(await tickets.size(0)).toBe(4);
    for (const ticket of open) expect(await tickets.redeem(ticket, 1)).toBeDefined();
    // Expired tickets make room again, and the sweep deletes them.
    for (let i = 0; i < 4; i++) await tickets.issue(`x${i}`, `u${i}`, 0);
    await expect(tickets.issue('c', 'carol', TICKET_TTL_SECONDS * 1000 + 1)).resolves.toBeDefined();
    expect(await new ExpirySweep(store.db, console).sweep(TICKET_TTL_SECONDS * 1000 + 1)).toBe(4);
    expect(await store.db.selectFrom('remote_tickets').selectAll().execute()).toHaveLength(1);
  });
});
