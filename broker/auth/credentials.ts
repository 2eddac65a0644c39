/**
 * How every caller proves who it is, in one place: the entry-point table (broker/routes.ts,
 * broker/upgrades.ts) names one of these for each REST call, WebSocket upgrade and the event
 * stream, and the pipelines in broker/http/ apply it before the access check and the handler.
 *
 * - `bearer`: `Authorization: Bearer <token>` (REST calls, remote WebSockets from the CLI).
 * - `bearer-or-ticket`: the same, or a single-use `?ticket=` from POST /api/v2/remote/ticket (what a
 *   browser's WebSocket or EventSource can send: no headers).
 * - `token`: qbee's clients send the token bare as the Authorization header; `Bearer ` is accepted too.
 * - `agent-key`: an enrolled device's key signs the broker's challenge, in band after the upgrade
 *   (AgentHub; verifyAgentSignature below).
 * - `peer-hmac`: another broker proves the cluster secret, in band after the upgrade (PeerLinks;
 *   peerMac and macMatches below).
 */
import crypto from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { verifyChallenge } from '../../shared/device-key.js';
import type { Principal } from '../access/principal.js';
import { unauthenticated } from '../errors.js';
import type { AuthService } from './service.js';

export type Credential = 'bearer' | 'bearer-or-ticket' | 'token' | 'agent-key' | 'peer-hmac';

/** The credentials carried by the request itself (the other two are proven after the upgrade). */
export type HeaderCredential = Extract<Credential, 'bearer' | 'bearer-or-ticket' | 'token'>;

export function isHeaderCredential(credential: Credential): credential is HeaderCredential {
  return credential === 'bearer' || credential === 'bearer-or-ticket' || credential === 'token';
}

/** `Authorization: Bearer <token>`, or undefined. */
export function bearerToken(headers: IncomingHttpHeaders): string | undefined {
  const m = /^Bearer\s+(\S+)$/i.exec(headers.authorization ?? '');
  return m ? m[1] : undefined;
}

/** qbee clients send the token bare; a `Bearer ` prefix is accepted too. */
export function bareOrBearerToken(headers: IncomingHttpHeaders): string | undefined {
  const m = /^(?:Bearer\s+)?(\S+)$/i.exec((headers.authorization ?? '').trim());
  return m ? m[1] : undefined;
}

/** Who the request's credential names, as of now, and the token to re-check them with later. */
export interface Authenticated {
  principal: Principal;
  token: string;
  /** true when a ticket was redeemed (a browser's socket or stream) */
  viaTicket: boolean;
}

const MISSING: Record<HeaderCredential, string> = {
  bearer: 'Sign in first: send Authorization: Bearer <token>.',
  'bearer-or-ticket': 'Sign in first: send Authorization: Bearer <token>, or ?ticket= from POST /api/v2/remote/ticket.',
  token: 'Sign in first: send your token as the Authorization header.',
};

export interface AuthenticatorDeps {
  auth: Pick<AuthService, 'authenticate'>;
  /** The token a single-use ticket was issued for, or undefined when it is unknown, used or expired. */
  redeemTicket: (ticket: string) => Promise<string | undefined>;
}

/** Turns a request's credential into the caller; every refusal is a DomainError of kind unauthenticated (401). */
export class Authenticator {
  constructor(private readonly deps: AuthenticatorDeps) {}

  /** `ticket` is the `?ticket=` of the request, read only for `bearer-or-ticket`. */
  async authenticate(credential: HeaderCredential, headers: IncomingHttpHeaders, ticket?: string): Promise<Authenticated> {
    if (credential === 'bearer-or-ticket' && ticket) {
      const token = await this.deps.redeemTicket(ticket);
      if (!token) throw unauthenticated('The ticket is unknown, used or expired; get a new one with POST /api/v2/remote/ticket.', 'invalid_ticket');
      // The ticket was issued with a valid token a minute ago at most: its sign-in session is what counts.
      return { principal: await this.deps.auth.authenticate(token, { allowExpired: true }), token, viaTicket: true };
    }
    const token = credential === 'token' ? bareOrBearerToken(headers) : bearerToken(headers);
    if (!token) throw unauthenticated(MISSING[credential]);
    return { principal: await this.deps.auth.authenticate(token), token, viaTicket: false };
  }
}

/** An agent's proof of its enrolled key: its signature over the broker's challenge. */
export const verifyAgentSignature = verifyChallenge;

/**
 * The proof of the cluster secret: an HMAC over the protocol, the role, the other end's nonce and
 * both broker ids, so a proof is good for one handshake, one direction and one pair only.
 */
export function peerMac(protocol: string, secret: string, role: 'client' | 'server', nonce: string, from: string, to: string): string {
  return crypto.createHmac('sha256', secret).update(`${protocol}|${role}|${nonce}|${from}|${to}`).digest('base64url');
}

/** Constant-time comparison of a proof with the expected one (lengths are not secret). */
export function macMatches(given: unknown, expected: string): boolean {
  if (typeof given !== 'string') return false;
  const a = Buffer.from(given);
  const b = Buffer.from(expected);
  return a.length === b.length && crypto.timingSafeEqual(a, b);
}
