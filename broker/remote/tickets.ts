import crypto from 'node:crypto';
import { ApiError } from '../http/errors.js';

export const TICKET_TTL_SECONDS = 60;
/** Open tickets of one user: issuing more drops that user's oldest (a browser needs one per socket). */
export const MAX_OPEN_TICKETS_PER_USER = 32;
/** Open tickets of everyone: past it, new tickets are refused (429) rather than evicting anyone's. */
export const MAX_OPEN_TICKETS = 10_000;

interface TicketEntry {
  /** The bearer token the ticket was issued for: redeeming re-authenticates with it. */
  token: string;
  userId: string;
  expiresAt: number;
}

function digest(ticket: string): string {
  return crypto.createHash('sha256').update(ticket).digest('hex');
}

/**
 * Single-use, short-lived tickets for WebSocket connections from browsers, which cannot set an
 * Authorization header. A ticket stands for the session of the token it was issued with: using
 * it re-checks that session (revoked, user disabled) and the roles as of then. Only hashes are
 * kept, in memory: a broker restart voids open tickets, which live a minute anyway.
 *
 * Memory is bounded per user and in total, and one user can never void another user's ticket:
 * a user past their own cap loses their own oldest ticket, and a full store refuses new tickets.
 */
export class TicketStore {
  private readonly entries = new Map<string, TicketEntry>();
  /** Each user's open ticket digests, oldest first. */
  private readonly byUser = new Map<string, string[]>();

  constructor(
    private readonly perUser = MAX_OPEN_TICKETS_PER_USER,
    private readonly total = MAX_OPEN_TICKETS,
  ) {}

  issue(token: string, userId: string, now = Date.now()): { ticket: string; expires_in: number } {
    this.sweep(now);
    const mine = this.byUser.get(userId) ?? [];
    while (mine.length >= this.perUser) this.entries.delete(mine.shift() as string);
    if (this.entries.size >= this.total) {
      throw new ApiError(
        429,
        'too_many_tickets',
        `The broker holds ${this.total} unused remote-access tickets; try again in a minute.`,
        {},
        { 'Retry-After': String(TICKET_TTL_SECONDS) },
      );
    }
    const ticket = crypto.randomBytes(24).toString('base64url');
    const key = digest(ticket);
    this.entries.set(key, { token, userId, expiresAt: now + TICKET_TTL_SECONDS * 1000 });
    mine.push(key);
    this.byUser.set(userId, mine);
    return { ticket, expires_in: TICKET_TTL_SECONDS };
  }

  /** The token behind a ticket, once: the ticket is spent whether or not it is still valid. */
  redeem(ticket: string, now = Date.now()): string | undefined {
    const key = digest(ticket);
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    this.remove(key, entry.userId);
    return entry.expiresAt > now ? entry.token : undefined;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Open tickets of one user. */
  openFor(userId: string): number {
    return this.byUser.get(userId)?.length ?? 0;
  }

  private remove(key: string, userId: string): void {
    this.entries.delete(key);
    const mine = this.byUser.get(userId);
    if (!mine) return;
    const at = mine.indexOf(key);
    if (at >= 0) mine.splice(at, 1);
    if (mine.length === 0) this.byUser.delete(userId);
  }

  private sweep(now: number): void {
    for (const [key, entry] of this.entries) {
      if (entry.expiresAt <= now) this.remove(key, entry.userId);
      else break; // insertion order is expiry order
    }
  }
}
