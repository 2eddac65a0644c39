import crypto from 'node:crypto';
import type { Db } from '../db/database.js';
import { rateLimited } from '../errors.js';

export const TICKET_TTL_SECONDS = 60;
/** Open tickets of one user: issuing more drops that user's oldest (a browser needs one per socket). */
export const MAX_OPEN_TICKETS_PER_USER = 32;
/** Open tickets of everyone: past it, new tickets are refused (429) rather than evicting anyone's. */
export const MAX_OPEN_TICKETS = 10_000;

function digest(ticket: string): string {
  return crypto.createHash('sha256').update(ticket).digest('hex');
}

/**
 * Single-use, short-lived tickets for WebSocket connections from browsers, which cannot set an
 * Authorization header. A ticket stands for the session of the token it was issued with: using
 * it re-checks that session (revoked, user disabled) and the roles as of then.
 *
 * Tickets live in the database (`remote_tickets`), so a ticket issued by one broker opens a
 * connection on any other broker of the same database. Only the ticket's sha256 is kept, with the
 * bearer token it stands for (whoever reads the database could mint tokens anyway: the signing
 * secret is there too). Redeeming is one `DELETE … RETURNING`: of two brokers redeeming the same
 * ticket at once, exactly one gets the token.
 *
 * Bounded per user and in total, and one user can never void another user's ticket: a user past
 * their own cap loses their own oldest ticket, and a full store refuses new tickets. Expired rows
 * are deleted by the periodic sweep (broker/db/expiry.ts).
 */
export class TicketStore {
  constructor(
    private readonly db: Db,
    private readonly perUser = MAX_OPEN_TICKETS_PER_USER,
    private readonly total = MAX_OPEN_TICKETS,
  ) {}

  async issue(token: string, userId: string, now = Date.now()): Promise<{ ticket: string; expires_in: number }> {
    const open = await this.db
      .selectFrom('remote_tickets')
      .select((eb) => [
        eb.fn.countAll<number | string>().as('all'),
        eb.fn.sum<number | string | null>(eb.case().when('user_id', '=', userId).then(1).else(0).end()).as('mine'),
      ])
      .where('expires_at', '>', now)
      .executeTakeFirstOrThrow();
    const mine = Number(open.mine ?? 0);
    let all = Number(open.all);
    if (mine >= this.perUser) {
      const oldest = this.db
        .selectFrom('remote_tickets')
        .select('ticket_hash')
        .where('user_id', '=', userId)
        .where('expires_at', '>', now)
        .orderBy('issued_at')
        .limit(mine - this.perUser + 1);
      const dropped = await this.db.deleteFrom('remote_tickets').where('ticket_hash', 'in', oldest).executeTakeFirst();
      all -= Number(dropped.numDeletedRows);
    }
    if (all >= this.total) {
      throw rateLimited('too_many_tickets', `The brokers hold ${this.total} unused remote-access tickets; try again in a minute.`, TICKET_TTL_SECONDS);
    }
    const ticket = crypto.randomBytes(24).toString('base64url');
    await this.db
      .insertInto('remote_tickets')
      .values({ ticket_hash: digest(ticket), token, user_id: userId, issued_at: now, expires_at: now + TICKET_TTL_SECONDS * 1000 })
      .execute();
    return { ticket, expires_in: TICKET_TTL_SECONDS };
  }

  /** The token behind a ticket, once: the ticket is spent whether or not it is still valid. */
  async redeem(ticket: string, now = Date.now()): Promise<string | undefined> {
    const row = await this.db.deleteFrom('remote_tickets').where('ticket_hash', '=', digest(ticket)).returning(['token', 'expires_at']).executeTakeFirst();
    if (!row) return undefined;
    return Number(row.expires_at) > now ? row.token : undefined;
  }

  /** Open (unexpired) tickets of everyone. */
  async size(now = Date.now()): Promise<number> {
    const row = await this.db
      .selectFrom('remote_tickets')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('expires_at', '>', now)
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }

  /** Open (unexpired) tickets of one user. */
  async openFor(userId: string, now = Date.now()): Promise<number> {
    const row = await this.db
      .selectFrom('remote_tickets')
      .select((eb) => eb.fn.countAll<number | string>().as('n'))
      .where('user_id', '=', userId)
      .where('expires_at', '>', now)
      .executeTakeFirstOrThrow();
    return Number(row.n);
  }
}
