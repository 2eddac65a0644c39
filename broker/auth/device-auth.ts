import crypto from 'node:crypto';
import type { ExpressionBuilder } from 'kysely';
import type { PendingSignIn } from '../../shared/api-types.js';
import type { Db } from '../db/database.js';
import type { Database, DeviceCodesTable } from '../db/schema.js';
import { conflict, DomainError, notFound, rateLimited, unavailable } from '../errors.js';
import { RateLimiter, type LimitStore } from './ratelimit.js';
import type { IssuedSession } from './service.js';

/** How long a device code and its user code live (RFC 8628 `expires_in`). */
export const DEVICE_CODE_TTL_SECONDS = 600;
/** Seconds a client waits between polls of the token endpoint (RFC 8628 `interval`). */
export const DEVICE_CODE_INTERVAL_SECONDS = 5;
/** Requests waiting for approval at once, in all and per address: beyond, 429. */
export const MAX_PENDING_DEVICE_CODES = 1000;
export const MAX_PENDING_PER_ADDRESS = 10;
/**
 * Look-ups, approvals and declines of user codes one signed-in user may make in
 * DEVICE_CODE_LOOKUP_WINDOW_MS, and one address; beyond, 429. With at most 1000 codes open among
 * 20^8 (2.6·10^10), one guess finds one with odds of 1 in 2.6·10^7: about 35 years of guessing at
 * the per-user rate, 12 at the per-address one, for one hit on average.
 */
export const DEVICE_CODE_LOOKUPS_PER_USER = 20;
export const DEVICE_CODE_LOOKUPS_PER_ADDRESS = 60;
export const DEVICE_CODE_LOOKUP_WINDOW_MS = 15 * 60_000;

/** RFC 8628 §6.1: consonants only (no vowels: no words; no look-alikes such as 0/O, 1/I). */
const USER_CODE_ALPHABET = 'BCDFGHJKLMNPQRSTVWXZ';

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
const tokenError = (error: string, message: string) => new DomainError('invalid', error, message);

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
 * polling the token endpoint gets a session of that user. Requests live ten minutes in the database
 * (`device_codes`), so the client may poll one broker while the user approves on another; the
 * device code is kept as a hash and is single-use (a decided request is taken with one
 * `DELETE … RETURNING`: of two polls at once, one gets the session). Expired rows are deleted by
 * the periodic sweep (broker/db/expiry.ts) and when a request is started.
 */
export class DeviceAuthService {
  constructor(
    private readonly db: Db,
    private readonly sessions: {
      startSession(userId: string, ip: string, userAgent: string): Promise<IssuedSession>;
      isActiveUser(userId: string): Promise<boolean>;
    },
    private readonly settings: { publicUrl?: string; tokenTtlSeconds: number },
    private readonly now: () => number = Date.now,
    /** Counts a look-up or decision of this caller (per user, per address); throws 429 past the limit. None: not limited. */
    private readonly countLookup?: (caller: { userId: string; ip: string }) => Promise<void>,
  ) {}

  /** POST /oauth2/devicecode */
  async start(clientIp: string, userAgent: string): Promise<DeviceAuthorization> {
    const now = this.now();
    await this.db.deleteFrom('device_codes').where('expires_at', '<=', now).execute();
    const counts = await this.db
      .selectFrom('device_codes')
      .select((eb) => [
        eb.fn.countAll<number | string>().as('all'),
        eb.fn.sum<number | string | null>(eb.case().when('client_ip', '=', clientIp).then(1).else(0).end()).as('mine'),
      ])
      .executeTakeFirstOrThrow();
    if (Number(counts.all) >= MAX_PENDING_DEVICE_CODES) {
      throw rateLimited('too_many_requests', 'Too many sign-ins wait for approval; try again in a few minutes.');
    }
    if (Number(counts.mine ?? 0) >= MAX_PENDING_PER_ADDRESS) {
      throw rateLimited('too_many_requests', 'Too many sign-ins from this address wait for approval; finish or let them expire first.');
    }
    const deviceCode = crypto.randomBytes(32).toString('base64url');
    const agent = userAgent.slice(0, 300);
    let userCode = '';
    // 20^8 codes: a clash with one of at most 1000 open ones is rare; the unique index decides.
    for (let attempt = 0; ; attempt++) {
      const letters = Array.from({ length: 8 }, () => USER_CODE_ALPHABET[crypto.randomInt(USER_CODE_ALPHABET.length)]);
      userCode = normalizeUserCode(letters.join('')) as string;
      const inserted = await this.db
        .insertInto('device_codes')
        .values({
          device_code_hash: digest(deviceCode),
          user_code: userCode,
          client_ip: clientIp,
          user_agent: agent,
          expires_at: now + DEVICE_CODE_TTL_SECONDS * 1000,
          decision: null,
          user_id: null,
          claimed_by: null,
        })
        .onConflict((oc) => oc.column('user_code').doNothing())
        .returning('user_code')
        .executeTakeFirst();
      if (inserted) break;
      if (attempt >= 5) throw unavailable('try_again', 'No free sign-in code was found; try again.');
    }
    const verification = `${this.settings.publicUrl?.replace(/\/$/, '') ?? ''}/cli-login`;
    return {
      device_code: deviceCode,
      user_code: userCode,
      verification_uri: verification,
      verification_uri_complete: `${verification}?code=${userCode}`,
      expires_in: DEVICE_CODE_TTL_SECONDS,
      interval: DEVICE_CODE_INTERVAL_SECONDS,
      client_ip: clientIp,
      user_agent: agent,
    };
  }

  /** POST /oauth2/token with the device_code grant. */
  async token(deviceCode: string, ip: string, userAgent: string): Promise<DeviceCodeTokens> {
    const hash = digest(deviceCode);
    const entry = await this.db.selectFrom('device_codes').selectAll().where('device_code_hash', '=', hash).executeTakeFirst();
    if (!entry) throw usedCode();
    if (Number(entry.expires_at) <= this.now()) {
      await this.db.deleteFrom('device_codes').where('device_code_hash', '=', hash).execute();
      throw tokenError('expired_token', 'The sign-in request expired; start it again.');
    }
    if (!entry.decision) throw tokenError('authorization_pending', 'Waiting for a user to approve the code in the web console.');
    // Taken once: a concurrent poll (on this broker or another) finds nothing left.
    const taken = await this.db
      .deleteFrom('device_codes')
      .where('device_code_hash', '=', hash)
      .where('decision', 'is not', null)
      .returning(['decision', 'user_id'])
      .executeTakeFirst();
    if (!taken) throw usedCode();
    if (taken.decision !== 'approved' || !taken.user_id) throw tokenError('authorization_declined', 'The sign-in was declined.');
    if (!(await this.sessions.isActiveUser(taken.user_id))) throw tokenError('authorization_declined', 'The approving user can no longer sign in.');
    const session = await this.sessions.startSession(taken.user_id, ip, userAgent);
    return { access_token: session.token, token_type: 'Bearer', expires_in: this.settings.tokenTtlSeconds, refresh_token: session.refreshToken };
  }

  /**
   * What the console shows before the user decides: where the request came from. The first
   * signed-in user to enter a pending code claims it: from then on it is theirs alone to look up,
   * approve or decline; to anyone else it answers 404 like a code that does not exist.
   */
  async describe(userCode: string, caller: { userId: string; ip: string }): Promise<PendingSignIn> {
    const entry = await this.find(userCode, caller);
    return {
      user_code: entry.user_code,
      client_ip: entry.client_ip,
      user_agent: entry.user_agent,
      expires_in: Math.max(0, Math.round((Number(entry.expires_at) - this.now()) / 1000)),
    };
  }

  /**
   * The user who entered the code (see describe) approves it (the client gets a session of theirs)
   * or declines it. Decided once.
   */
  async decide(userCode: string, caller: { userId: string; ip: string }, decision: 'approved' | 'declined'): Promise<{ user_code: string }> {
    const entry = await this.find(userCode, caller);
    const decided = await this.db
      .updateTable('device_codes')
      .set({ decision, user_id: decision === 'approved' ? caller.userId : null })
      .where('device_code_hash', '=', entry.device_code_hash)
      .where('claimed_by', '=', caller.userId)
      .where('decision', 'is', null)
      .executeTakeFirst();
    if (Number(decided.numUpdatedRows) !== 1) throw conflict('already_decided', 'This code was approved or declined already.');
    return { user_code: entry.user_code };
  }

  /**
   * A pending code as the caller may see it: counted against their look-ups (and their address's),
   * claimed for them when nobody entered it before; unknown, expired and another user's codes all
   * answer the same 404.
   */
  private async find(userCode: string, caller: { userId: string; ip: string }): Promise<DeviceCodesTable> {
    await this.countLookup?.(caller);
    const missing = notFound('Sign-in code');
    const normalized = normalizeUserCode(userCode);
    if (!normalized) throw missing;
    const open = (eb: ExpressionBuilder<Database, 'device_codes'>) => eb.and([eb('user_code', '=', normalized), eb('expires_at', '>', this.now())]);
    // Claimed by the first to enter it: one conditional update, so of two users at once one gets it.
    await this.db.updateTable('device_codes').set({ claimed_by: caller.userId }).where(open).where('claimed_by', 'is', null).execute();
    const entry = await this.db.selectFrom('device_codes').selectAll().where(open).executeTakeFirst();
    if (!entry || entry.claimed_by !== caller.userId) throw missing;
    return entry;
  }
}

/** The look-up limits of DEVICE_CODE_LOOKUPS_PER_USER and _PER_ADDRESS, counted in the database (every broker counts the same). */
export function deviceCodeLookupLimit(store: LimitStore): (caller: { userId: string; ip: string }) => Promise<void> {
  const perUser = new RateLimiter(store, 'device-code-user', DEVICE_CODE_LOOKUPS_PER_USER, DEVICE_CODE_LOOKUP_WINDOW_MS);
  const perAddress = new RateLimiter(store, 'device-code-ip', DEVICE_CODE_LOOKUPS_PER_ADDRESS, DEVICE_CODE_LOOKUP_WINDOW_MS);
  return async (caller) => {
    await perUser.hit(caller.userId);
    await perAddress.hit(caller.ip);
  };
}

const usedCode = () => tokenError('bad_verification_code', 'Unknown or used device code; start the sign-in again.');
