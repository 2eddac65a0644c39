import crypto from 'node:crypto';
import { ApiError, notFound } from '../http/errors.js';
import type { IssuedSession } from './service.js';

/** How long a device code and its user code live (RFC 8628 `expires_in`). */
export const DEVICE_CODE_TTL_SECONDS = 600;
/** Seconds a client waits between polls of the token endpoint (RFC 8628 `interval`). */
export const DEVICE_CODE_INTERVAL_SECONDS = 5;
/** Requests waiting for approval at once, in all and per address: beyond, 429. */
export const MAX_PENDING_DEVICE_CODES = 1000;
export const MAX_PENDING_PER_ADDRESS = 10;

/** RFC 8628 §6.1: consonants only (no vowels: no words; no look-alikes such as 0/O, 1/I). */
const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';

interface Pending {
  deviceCodeHash: string;
  userCode: string;
  clientIp: string;
  userAgent: string;
  expiresAt: number;
  /** Set when a signed-in user approved or declined the request. */
  decision?: { kind: 'approved'; userId: string } | { kind: 'declined' };
}

export interface DeviceAuthorization {
  device_code: string;
  user_code: string;
  verification_uri: string;
  verification_uri_complete: string;
  expires_in: number;
  interval: number;
  client_ip: string;
  user_agent: string;
}

export interface DeviceCodeTokens {
  access_token: string;
  token_type: 'Bearer';
  expires_in: number;
  refresh_token: string;
}

/** The errors RFC 8628 §3.5 names, with the `error` codes qbee-cli branches on. */
const tokenError = (error: string, message: string) => new ApiError(400, error, message);

const digest = (v: string) => crypto.createHash('sha256').update(v).digest('hex');

/** "bcdf-ghjk", "BCDFGHJK" → "BCDF-GHJK"; undefined when it cannot be a user code. */
export function normalizeUserCode(input: string): string | undefined {
  const letters = input.toUpperCase().replace(/[\s-]/g, '');
  if (letters.length !== 8 || [...letters].some((c) => !USER_CODE_ALPHABET.includes(c))) return undefined;
  return `${letters.slice(0, 4)}-${letters.slice(4)}`;
}

/**
 * The OAuth 2.0 device authorization grant (RFC 8628) for command-line clients: a client asks for
 * a device code, a signed-in user approves its short user code in the web console, and the client
 * polling the token endpoint gets a session of that user. Requests live in memory for ten minutes
 * (a restart only makes the client start over); the device code is kept as a hash and is single-use.
 */
export class DeviceAuthService {
  private readonly pending = new Map<string, Pending>();
  private readonly byUserCode = new Map<string, Pending>();

  constructor(
    private readonly sessions: {
      startSession(userId: string, ip: string, userAgent: string): Promise<IssuedSession>;
      isActiveUser(userId: string): Promise<boolean>;
    },
    private readonly settings: { publicUrl?: string; tokenTtlSeconds: number },
    private readonly now: () => number = Date.now,
  ) {}

  /** POST /oauth2/devicecode */
  start(clientIp: string, userAgent: string): DeviceAuthorization {
    this.sweep();
    if (this.pending.size >= MAX_PENDING_DEVICE_CODES) {
      throw new ApiError(429, 'too_many_requests', 'Too many sign-ins wait for approval; try again in a few minutes.');
    }
    let fromAddress = 0;
    for (const p of this.pending.values()) if (p.clientIp === clientIp) fromAddress++;
    if (fromAddress >= MAX_PENDING_PER_ADDRESS) {
      throw new ApiError(429, 'too_many_requests', 'Too many sign-ins from this address wait for approval; finish or let them expire first.');
    }
    const deviceCode = crypto.randomBytes(32).toString('base64url');
    let userCode: string;
    do {
      const letters = Array.from({ length: 8 }, () => USER_CODE_ALPHABET[crypto.randomInt(USER_CODE_ALPHABET.length)]);
      userCode = normalizeUserCode(letters.join('')) as string;
    } while (this.byUserCode.has(userCode));
    const entry: Pending = {
      deviceCodeHash: digest(deviceCode),
      userCode,
      clientIp,
      userAgent: userAgent.slice(0, 300),
      expiresAt: this.now() + DEVICE_CODE_TTL_SECONDS * 1000,
    };
    this.pending.set(entry.deviceCodeHash, entry);
    this.byUserCode.set(userCode, entry);
    const verification = `${this.settings.publicUrl?.replace(/\/$/, '') ?? ''}/cli-login`;
    return {
      device_code: deviceCode,
      user_code: userCode,
      verification_uri: verification,
      verification_uri_complete: `${verification}?code=${userCode}`,
      expires_in: DEVICE_CODE_TTL_SECONDS,
      interval: DEVICE_CODE_INTERVAL_SECONDS,
      client_ip: clientIp,
      user_agent: entry.userAgent,
    };
  }

  /** POST /oauth2/token with the device_code grant. */
  async token(deviceCode: string, ip: string, userAgent: string): Promise<DeviceCodeTokens> {
    const entry = this.pending.get(digest(deviceCode));
    if (!entry) throw tokenError('bad_verification_code', 'Unknown or used device code; start the sign-in again.');
    if (entry.expiresAt <= this.now()) {
      this.forget(entry);
      throw tokenError('expired_token', 'The sign-in request expired; start it again.');
    }
    if (!entry.decision) throw tokenError('authorization_pending', 'Waiting for a user to approve the code in the web console.');
    this.forget(entry);
    if (entry.decision.kind === 'declined') throw tokenError('authorization_declined', 'The sign-in was declined.');
    if (!(await this.sessions.isActiveUser(entry.decision.userId))) throw tokenError('authorization_declined', 'The approving user can no longer sign in.');
    const session = await this.sessions.startSession(entry.decision.userId, ip, userAgent);
    return { access_token: session.token, token_type: 'Bearer', expires_in: this.settings.tokenTtlSeconds, refresh_token: session.refreshToken };
  }

  /** What the console shows before the user decides: where the request came from. */
  describe(userCode: string): { user_code: string; client_ip: string; user_agent: string; expires_in: number } {
    const entry = this.find(userCode);
    return {
      user_code: entry.userCode,
      client_ip: entry.clientIp,
      user_agent: entry.userAgent,
      expires_in: Math.max(0, Math.round((entry.expiresAt - this.now()) / 1000)),
    };
  }

  /** A signed-in user approves (the client gets a session of theirs) or declines. Decided once. */
  decide(userCode: string, decision: { kind: 'approved'; userId: string } | { kind: 'declined' }): { user_code: string } {
    const entry = this.find(userCode);
    if (entry.decision) throw new ApiError(409, 'already_decided', 'This code was approved or declined already.');
    entry.decision = decision;
    return { user_code: entry.userCode };
  }

  private find(userCode: string): Pending {
    const normalized = normalizeUserCode(userCode);
    const entry = normalized ? this.byUserCode.get(normalized) : undefined;
    if (!entry || entry.expiresAt <= this.now()) throw notFound('Sign-in code');
    return entry;
  }

  private forget(entry: Pending): void {
    this.pending.delete(entry.deviceCodeHash);
    this.byUserCode.delete(entry.userCode);
  }

  private sweep(): void {
    const now = this.now();
    for (const entry of this.pending.values()) if (entry.expiresAt <= now) this.forget(entry);
  }
}
