import crypto from 'node:crypto';

export const TICKET_TTL_SECONDS = 60;
const MAX_OPEN_TICKETS = 10_000;

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
 */
export class TicketStore {
  private readonly entries = new Map<string, TicketEntry>();

  issue(token: string, userId: string, now = Date.now()): { ticket: string; expires_in: number } {
    this.sweep(now);
    if (this.entries.size >= MAX_OPEN_TICKETS) {
      // Oldest first (insertion order): a flood of unused tickets cannot grow memory without bound.
      const oldest = this.entries.keys().next().value;
      if (oldest !== undefined) this.entries.delete(oldest);
    }
    const ticket = crypto.randomBytes(24).toString('base64url');
    this.entries.set(digest(ticket), { token, userId, expiresAt: now + TICKET_TTL_SECONDS * 1000 });
    return { ticket, expires_in: TICKET_TTL_SECONDS };
  }

  /** The token behind a ticket, once: the ticket is spent whether or not it is still valid. */
  redeem(ticket: string, now = Date.now()): string | undefined {
    const key = digest(ticket);
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    this.entries.delete(key);
    return entry.expiresAt > now ? entry.token : undefined;
  }

  get size(): number {
    return this.entries.size;
  }

  private sweep(now: number): void {
    for (const [key, entry] of this.entries) {
      if (entry.expiresAt <= now) this.entries.delete(key);
      else break; // insertion order is expiry order
    }
  }
}
