import crypto from 'node:crypto';
import { recordingModeOf } from '../access/recording.js';
import type { SecondFactorProvider, TwoFactorState } from '../../shared/api-types.js';
import { compilePolicies, type CompiledPolicy, type Policy } from '../../shared/resources.js';
import { Principal } from '../access/principal.js';
import type { Config } from '../environment.js';
import type { Db } from '../db/database.js';
import type { UsersTable } from '../db/schema.js';
import { DomainError, invalid, unavailable } from '../errors.js';
import { EpochCache, type ChangeEpoch } from '../cache.js';
import type { MailService } from '../mail/service.js';
import { passwordResetMail, signInCodeMail, welcomeMail } from '../mail/templates.js';
import type { SettingsStore } from '../settings.js';
import { rolesForSignIn } from '../roles/store.js';
import {
  activeUserIds,
  findUser,
  findUserByEmail,
  recordTotpStep,
  roleIdsOfUser,
  setOwnAccountFields,
  signedInUser,
  userIdsWithEmail,
} from '../users/directory.js';
import { ChallengeStore, codeMatches } from './challenges.js';
import { PasswordLinks } from './password-links.js';
import { digest, randomToken, verifyPassword } from './passwords.js';
import { ProfileService } from './profile.js';
import { RateLimiter, type LimitStore } from './ratelimit.js';
import { looksLikeRecoveryCode, RecoveryCodes } from './recovery-codes.js';
import { SignInThrottle } from './sign-in-throttle.js';
import { TokenSigner } from './tokens.js';
import { totpStep } from './totp.js';
import { providersOf, secondFactorApplies, twoFactorState, TWO_FACTOR_POLICY_KEY, type TwoFactorPolicy } from './two-factor.js';

export interface IssuedSession {
  token: string;
  refreshToken: string;
  sessionId: string;
  refreshMaxAgeSeconds: number;
}

export type UserRow = UsersTable;

/** A session started by a second-factor code; `recoveryCodesLeft` when that code was a recovery code. */
export interface VerifiedSession extends IssuedSession {
  recoveryCodesLeft?: number;
}

const MINUTE = 60_000;

const loginFailed = () => new DomainError('unauthenticated', 'invalid_credentials', 'The email or password is wrong.');
const disabledUser = () => new DomainError('unauthenticated', 'user_disabled', 'This user is disabled; ask an administrator to enable it.');

/** Result of checking an authenticator-app code. */
export type TotpCheck = 'ok' | 'invalid' | 'reused';

/**
 * Sign-in (password, then a second factor when it applies), tokens and their revocation,
 * password links; turns a bearer token into the request's Principal. The profile of the
 * signed-in user is `profile`.
 */
export class AuthService {
  /** Wrong passwords per account and per (account, address); see SignInThrottle for the rule. */
  readonly signIn: SignInThrottle;
  /** Sign-in attempts per source address; successful ones are given back. */
  readonly perAddress: RateLimiter;
  /** Wrong second-factor codes per user, across challenges (a fresh challenge does not reset it). */
  readonly perUserCodes: RateLimiter;
  /** Sign-in code mails per user. */
  readonly codeMails: RateLimiter;
  /** "Forgot password" requests per address and per email address. */
  readonly forgotPerAddress: RateLimiter;
  readonly forgotPerAccount: RateLimiter;
  /** Password or code checks of a signed-in user (password change, authenticator removal). */
  readonly reauth: RateLimiter;

  readonly challenges: ChallengeStore;
  readonly recoveryCodes: RecoveryCodes;
  readonly links: PasswordLinks;
  readonly profile: ProfileService;
  private signer!: TokenSigner;
  private readonly compiled = new Map<string, CompiledPolicy[]>();
  /** token → principal, emptied by any change through the API (see broker/cache.ts) */
  private readonly principals: EpochCache<string, { principal: Principal; expiresAt: number }>;

  constructor(
    private readonly db: Db,
    private readonly config: Config,
    private readonly settings: SettingsStore,
    private readonly mail: MailService,
    epoch: ChangeEpoch,
    /** Where the limits count (the database: shared by every broker on it). */
    limits: LimitStore,
  ) {
    this.perAddress = new RateLimiter(limits, 'signin-ip', 50, 15 * MINUTE);
    this.perUserCodes = new RateLimiter(limits, '2fa-user', 10, 15 * MINUTE);
    this.codeMails = new RateLimiter(limits, '2fa-mail', 5, 15 * MINUTE);
    this.forgotPerAddress = new RateLimiter(limits, 'forgot-ip', 20, 15 * MINUTE);
    this.forgotPerAccount = new RateLimiter(limits, 'forgot-account', 5, 60 * MINUTE);
    this.reauth = new RateLimiter(limits, 'reauth-user', 10, 15 * MINUTE);
    this.principals = new EpochCache(epoch);
    this.challenges = new ChallengeStore(db);
    this.recoveryCodes = new RecoveryCodes(db);
    this.links = new PasswordLinks(db, (config.publicUrl ?? `http://localhost:${config.port}`).replace(/\/+$/, ''));
    this.profile = new ProfileService(db, this);
    this.signIn = new SignInThrottle(limits, (account) => this.lastSignInAddress(account));
  }

  async init(): Promise<void> {
    const secret = this.config.jwtSecret ?? (await this.settings.getOrCreate('jwt_secret', () => crypto.randomBytes(48).toString('base64url')));
    this.signer = new TokenSigner(secret, this.config.tokenTtlSeconds);
  }

  /** Policies of a role, parsed once per version of the role. */
  private policiesOf(roleId: string, updatedAt: string, json: string): CompiledPolicy[] {
    const key = `${roleId}@${updatedAt}`;
    let compiled = this.compiled.get(key);
    if (!compiled) {
      compiled = compilePolicies(JSON.parse(json) as Policy[]);
      if (this.compiled.size > 10_000) this.compiled.clear();
      this.compiled.set(key, compiled);
    }
    return compiled;
  }

  /**
   * Every call but login: a valid, unrevoked token of an active user; roles as of now.
   * `allowExpired` re-checks a token that was valid when a long-lived session (a remote console)
   * started: its sign-in session must still be live, only the access token's own expiry is waived.
   */
  async authenticate(token: string, options: { allowExpired?: boolean } = {}): Promise<Principal> {
    // The very same token string was verified when it was cached: only its expiry can have changed.
    const cached = this.principals.get(token);
    if (cached && (options.allowExpired === true || cached.expiresAt > Date.now())) return cached.principal;
    const claims = this.signer.verify(token, { ignoreExpiration: options.allowExpired === true });
    const principal = await this.loadPrincipal(claims.sub, claims.sid);
    this.principals.set(token, { principal, expiresAt: claims.exp * 1000 });
    return principal;
  }

  /**
   * The caller behind an SSH certificate: the sign-in session it names, which must still be live
   * and its user active (checked on every SSH connection, not only the certificate's expiry), and
   * an access token of that session, so that live sessions are re-checked like every other.
   */
  async sessionCaller(sessionId: string): Promise<{ principal: Principal; token: string }> {
    const row = await this.db.selectFrom('sessions').select('user_id').where('id', '=', sessionId).executeTakeFirst();
    if (!row) throw new DomainError('unauthenticated', 'token_revoked', 'The sign-in session behind this certificate has ended; sign in again.');
    const principal = await this.loadPrincipal(row.user_id, sessionId);
    return { principal, token: this.signer.sign(principal.user.id, sessionId) };
  }

  /** When a live sign-in session ends (ISO 8601). */
  async sessionExpiry(sessionId: string): Promise<string> {
    const row = await this.db.selectFrom('sessions').select(['expires_at', 'revoked_at']).where('id', '=', sessionId).executeTakeFirst();
    if (!row || row.revoked_at) throw new DomainError('unauthenticated', 'token_revoked', 'This sign-in session has ended; sign in again.');
    return row.expires_at;
  }

  /** The session's user and the union of their roles' policies, as stored now. */
  private async loadPrincipal(userId: string, sessionId: string): Promise<Principal> {
    const claims = { sub: userId, sid: sessionId };
    // The user of the session while it is live: one query, the session's part a subquery of ours.
    const liveSession = this.db
      .selectFrom('sessions')
      .select('user_id')
      .where('id', '=', claims.sid)
      .where('revoked_at', 'is', null)
      .where('expires_at', '>=', new Date().toISOString());
    const row = await signedInUser(this.db, liveSession);
    if (!row || row.id !== claims.sub) {
      throw new DomainError('unauthenticated', 'token_revoked', 'This token was revoked (signed out, password changed or user removed); sign in again.');
    }
    if (row.disabled) throw new DomainError('unauthenticated', 'user_disabled', 'This user is disabled.');
    const roles = await rolesForSignIn(this.db, roleIdsOfUser(this.db, row.id));
    const perRole = roles.map((r) => ({ recording: recordingModeOf(r.recording), policies: this.policiesOf(r.id, r.updated_at, r.policies) }));
    const policies = perRole.flatMap((r) => r.policies);
    return new Principal({ id: row.id, email: row.email, fname: row.fname, lname: row.lname }, claims.sid, policies, perRole);
  }

  async userRow(userId: string): Promise<UserRow | undefined> {
    return findUser(this.db, userId);
  }

  /**
   * Checks email and password with rate limits per address and per account (SignInThrottle).
   * Returns the user id; throws 401/429. Second factors are the caller's next step (see `login`).
   * An unknown email and a user without a password yet answer exactly like a wrong password, after
   * the same scrypt work, so neither the answer nor its timing tells which accounts exist.
   */
  async checkPassword(email: string, password: string, ip: string): Promise<string> {
    const normalized = email.trim().toLowerCase();
    await this.perAddress.hit(`ip:${ip}`);
    await this.signIn.admit(normalized, ip);
    const user = await findUserByEmail(this.db, normalized);
    const ok = await verifyPassword(password, user?.password_hash ?? null);
    if (!user || !ok) throw loginFailed();
    if (user.disabled) throw disabledUser();
    await this.signIn.succeeded(normalized, ip);
    await this.perAddress.release(`ip:${ip}`);
    return user.id;
  }

  /** The address of the account's latest sign-in session, for SignInThrottle. */
  private async lastSignInAddress(email: string): Promise<string | undefined> {
    const row = await this.db
      .selectFrom('sessions')
      .select('ip')
      .where('user_id', 'in', userIdsWithEmail(this.db, email))
      .orderBy('created_at', 'desc')
      .limit(1)
      .executeTakeFirst();
    return row?.ip ?? undefined;
  }

  /**
   * Password sign-in. Returns the session, or — when a second factor applies to the user —
   * throws 401 `2fa_required` carrying a challenge and the user's providers.
   */
  async login(email: string, password: string, ip: string, userAgent: string): Promise<IssuedSession> {
    const userId = await this.checkPassword(email, password, ip);
    const user = await this.userRow(userId);
    if (!user) throw loginFailed();
    if (secondFactorApplies(user.two_factor, await this.twoFactorPolicy())) {
      const challenge = await this.challenges.open(userId);
      throw new DomainError(
        'unauthenticated',
        '2fa_required',
        'A second factor is required: send the challenge and a provider to POST /api/v2/challenge-get, then the code to POST /api/v2/challenge-verify.',
        { challenge, providers: providersOf(user) },
      );
    }
    return this.startSession(userId, ip, userAgent);
  }

  /**
   * Second step: the user picks a provider. `email` mails a fresh 6-digit code; `google` expects
   * a code of the authenticator app. Spends the given challenge and returns the next one.
   */
  async requestCode(challenge: string, provider: SecondFactorProvider, ip: string): Promise<string> {
    await this.perAddress.hit(`ip:${ip}`);
    const row = await this.challenges.find(challenge);
    const user = await this.userRow(row.user_id);
    if (!user) throw new DomainError('unauthenticated', 'invalid_challenge', 'The challenge is unknown; sign in again to get a new one.');
    if (user.disabled) throw disabledUser();
    if (provider === 'google') {
      if (!user.totp_secret) {
        throw invalid(
          'This user has no authenticator app set up; use the email provider.',
          { field: 'preferProvider', providers: providersOf(user) },
          'provider_unavailable',
        );
      }
      await this.perAddress.release(`ip:${ip}`);
      return this.challenges.renew(row, 'google', null);
    }
    await this.codeMails.hit(`user:${user.id}`);
    const code = crypto.randomInt(0, 1_000_000).toString().padStart(6, '0');
    // Mailed before the challenge is renewed: when the mail fails, the given challenge stays usable.
    try {
      await this.mail.send(signInCodeMail(user, code));
    } catch {
      throw unavailable('mail_failed', 'The sign-in code could not be mailed; try again shortly or use another provider.');
    }
    await this.perAddress.release(`ip:${ip}`);
    return this.challenges.renew(row, 'email', code);
  }

  /**
   * Last step: the code for a challenge from `requestCode`. Returns the session. For the `google`
   * provider a recovery code (recovery-codes.ts) stands in for an app code, under the same limits:
   * a wrong one counts against the challenge and the user like a wrong app code.
   */
  async verifyCode(challenge: string, code: string, ip: string, userAgent: string): Promise<VerifiedSession> {
    await this.perAddress.hit(`ip:${ip}`);
    const row = await this.challenges.find(challenge);
    if (row.stage !== 'code') {
      throw invalid('Choose a provider first: send this challenge to POST /api/v2/challenge-get.', { field: 'challenge' }, 'provider_not_chosen');
    }
    await this.perUserCodes.hit(`user:${row.user_id}`);
    const attemptsLeft = await this.challenges.countAttempt(row);
    const user = await this.userRow(row.user_id);
    if (!user) throw new DomainError('unauthenticated', 'invalid_challenge', 'The challenge is unknown; sign in again to get a new one.');
    if (user.disabled) throw disabledUser();
    let check: TotpCheck;
    let recoveryCodesLeft: number | undefined;
    if (row.provider === 'google' && looksLikeRecoveryCode(code)) {
      const left = user.totp_secret ? await this.recoveryCodes.use(user.id, code) : null;
      check = left === null ? 'invalid' : 'ok';
      recoveryCodesLeft = left ?? undefined;
    } else if (row.provider === 'google') {
      check = user.totp_secret ? await this.acceptTotp(user.id, user.totp_secret, code) : 'invalid';
    } else {
      check = codeMatches(row, code.trim()) ? 'ok' : 'invalid';
    }
    if (check !== 'ok') {
      const after = attemptsLeft > 0 ? `${attemptsLeft} attempt${attemptsLeft === 1 ? '' : 's'} left.` : 'No attempts left: sign in again.';
      if (check === 'reused') {
        throw new DomainError('unauthenticated', 'code_already_used', `This code was already used; wait for the next one of your authenticator app. ${after}`, {
          attempts_left: attemptsLeft,
        });
      }
      throw new DomainError('unauthenticated', 'invalid_code', `The code is wrong. ${after}`, { attempts_left: attemptsLeft });
    }
    await this.challenges.spend(row);
    await this.perUserCodes.reset(`user:${user.id}`);
    await this.perAddress.release(`ip:${ip}`);
    const session = await this.startSession(user.id, ip, userAgent);
    return recoveryCodesLeft === undefined ? session : { ...session, recoveryCodesLeft };
  }

  /**
   * Checks an authenticator-app code and records its time step, atomically: a code (or an older
   * one) is never accepted twice, also not by two brokers at once.
   */
  async acceptTotp(userId: string, secret: string, code: string): Promise<TotpCheck> {
    const step = totpStep(secret, code.trim());
    if (step === null) return 'invalid';
    return (await recordTotpStep(this.db, userId, step)) ? 'ok' : 'reused';
  }

  /** Opens a login session for a user whose credentials (and second factor) were checked. */
  async startSession(userId: string, ip: string, userAgent: string): Promise<IssuedSession> {
    const sessionId = crypto.randomUUID();
    const refreshToken = randomToken();
    const now = new Date();
    await this.db.transaction().execute(async (trx) => {
      await trx
        .insertInto('sessions')
        .values({
          id: sessionId,
          user_id: userId,
          refresh_hash: digest(refreshToken),
          created_at: now.toISOString(),
          expires_at: new Date(now.getTime() + this.config.sessionTtlSeconds * 1000).toISOString(),
          revoked_at: null,
          ip,
          user_agent: userAgent.slice(0, 300),
        })
        .execute();
      await setOwnAccountFields(trx, userId, { last_login: now.toISOString() });
    });
    return { token: this.signer.sign(userId, sessionId), refreshToken, sessionId, refreshMaxAgeSeconds: this.config.sessionTtlSeconds };
  }

  /** A new access token from the refresh cookie, or from a still-valid bearer token. */
  async refresh(input: { refreshToken?: string; bearer?: string }): Promise<string> {
    if (input.bearer) {
      const principal = await this.authenticate(input.bearer);
      return this.signer.sign(principal.user.id, principal.sessionId);
    }
    if (input.refreshToken) {
      // A session of a disabled or removed user is no session: its user is not among the active ones.
      const row = await this.db
        .selectFrom('sessions')
        .select(['id', 'user_id', 'revoked_at', 'expires_at'])
        .where('refresh_hash', '=', digest(input.refreshToken))
        .where('user_id', 'in', activeUserIds(this.db))
        .executeTakeFirst();
      if (!row || row.revoked_at || row.expires_at < new Date().toISOString()) {
        throw new DomainError('unauthenticated', 'token_revoked', 'The session has ended; sign in again.');
      }
      return this.signer.sign(row.user_id, row.id);
    }
    throw new DomainError('unauthenticated', 'unauthorized', 'Send the refresh cookie or a still-valid bearer token.');
  }

  /** The account-wide second-factor policy (off unless turned on). */
  async twoFactorPolicy(): Promise<boolean> {
    return (await this.settings.get<Partial<TwoFactorPolicy>>(TWO_FACTOR_POLICY_KEY))?.enabled === true;
  }

  async setTwoFactorPolicy(enabled: boolean): Promise<boolean> {
    const policy: TwoFactorPolicy = { enabled };
    await this.settings.set(TWO_FACTOR_POLICY_KEY, policy);
    return enabled;
  }

  /** The `two_factor` part of a user record, under the current policy. */
  async twoFactorOf(user: { two_factor: number | null; totp_secret: string | null }): Promise<TwoFactorState> {
    return twoFactorState(user, await this.twoFactorPolicy());
  }

  /**
   * The welcome mail of a new user. A user created without a password gets a single-use link to
   * set one (valid 72 h; they cannot sign in before); one created with a password can sign in at
   * once. Throws when the mail cannot be sent.
   */
  async sendWelcomeMail(user: { id: string; email: string; fname: string; lname: string }, options: { hasPassword: boolean }): Promise<'sent' | 'outbox'> {
    const link = options.hasPassword ? undefined : (await this.links.issue(user.id, 'welcome')).url;
    return this.mail.send(welcomeMail(user, link));
  }

  /**
   * "Forgot password": mails a reset link when the address belongs to an active user. The answer
   * is the same either way, and the mail leaves in the background so timing does not tell.
   */
  async forgotPassword(email: string, ip: string): Promise<void> {
    const normalized = email.trim().toLowerCase();
    await this.forgotPerAddress.hit(`ip:${ip}`);
    await this.forgotPerAccount.hit(`account:${normalized}`);
    const user = await findUserByEmail(this.db, normalized);
    if (!user || user.disabled) return;
    const link = await this.links.issue(user.id, 'reset');
    this.mail.sendInBackground(passwordResetMail(user, link.url));
  }

  /**
   * An administrator resets someone's password (whether they may is the caller's check): a reset
   * link mailed to the address on record, or — `deliver: 'show'` — the link itself, to hand over.
   * The password stays as it is until the link is used; using it ends every session of the user.
   * Throws 503 `mail_failed` when the mail cannot be sent.
   */
  async issueResetLink(user: { id: string; email: string; fname: string }, deliver: 'mail' | 'show'): Promise<{ url: string; expiresAt: string }> {
    const link = await this.links.issue(user.id, 'reset');
    if (deliver === 'mail') {
      try {
        await this.mail.send(passwordResetMail(user, link.url, 'administrator'));
      } catch {
        // The link's token was in the mail only (the store keeps its hash): nobody holds it.
        throw unavailable('mail_failed', 'The reset mail could not be sent; try again shortly, or create a link to hand over instead.');
      }
    }
    return link;
  }

  /** Sets a password through a welcome or reset link. Every session of the user ends. */
  async setPasswordWithLink(token: string, password: string, ip: string): Promise<{ email: string }> {
    await this.perAddress.hit(`ip:${ip}`);
    const { userId, email } = await this.links.redeem(token, password);
    await this.perAddress.release(`ip:${ip}`);
    await this.revokeUserSessions(userId);
    await this.signIn.cleared(email, ip);
    return { email };
  }

  async revokeSession(sessionId: string): Promise<void> {
    await this.db.updateTable('sessions').set({ revoked_at: new Date().toISOString() }).where('id', '=', sessionId).where('revoked_at', 'is', null).execute();
  }

  /** Disabling, deleting or a password change: every token of the user stops working at once. */
  async revokeUserSessions(userId: string, exceptSessionId?: string): Promise<void> {
    let q = this.db.updateTable('sessions').set({ revoked_at: new Date().toISOString() }).where('user_id', '=', userId).where('revoked_at', 'is', null);
    if (exceptSessionId) q = q.where('id', '!=', exceptSessionId);
    await q.execute();
  }
}
