import crypto from 'node:crypto';
import { compilePolicies, type CompiledPolicy, type Policy } from '../../shared/resources.js';
import { Principal } from '../access/principal.js';
import type { Config } from '../config.js';
import type { Db } from '../db/database.js';
import { ApiError } from '../http/errors.js';
import type { MailService } from '../mail/service.js';
import type { SettingsStore } from '../settings.js';
import { digest, randomToken, verifyPassword } from './passwords.js';
import { RateLimiter } from './ratelimit.js';
import { TokenSigner } from './tokens.js';

export interface IssuedSession {
  token: string;
  refreshToken: string;
  sessionId: string;
  refreshMaxAgeSeconds: number;
}

const loginFailed = () => new ApiError(401, 'invalid_credentials', 'The email or password is wrong.');

/** Sign-in, tokens and their revocation; turns a bearer token into the request's Principal. */
export class AuthService {
  readonly perAccount = new RateLimiter(10, 15 * 60_000);
  readonly perAddress = new RateLimiter(50, 15 * 60_000);
  private signer!: TokenSigner;
  private readonly compiled = new Map<string, CompiledPolicy[]>();

  constructor(
    private readonly db: Db,
    private readonly config: Config,
    private readonly settings: SettingsStore,
    private readonly mail: MailService,
  ) {}

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

  /** Every call but login: a valid, unrevoked token of an active user; roles as of now. */
  async authenticate(token: string): Promise<Principal> {
    const claims = this.signer.verify(token);
    const row = await this.db
      .selectFrom('sessions')
      .innerJoin('users', 'users.id', 'sessions.user_id')
      .select(['sessions.revoked_at', 'sessions.expires_at', 'users.id', 'users.email', 'users.fname', 'users.lname', 'users.disabled'])
      .where('sessions.id', '=', claims.sid)
      .executeTakeFirst();
    if (!row || row.id !== claims.sub || row.revoked_at || row.expires_at < new Date().toISOString()) {
      throw new ApiError(401, 'token_revoked', 'This token was revoked (signed out, password changed or user removed); sign in again.');
    }
    if (row.disabled) throw new ApiError(401, 'user_disabled', 'This user is disabled.');
    const roles = await this.db
      .selectFrom('user_roles')
      .innerJoin('roles', 'roles.id', 'user_roles.role_id')
      .select(['roles.id', 'roles.policies', 'roles.updated_at'])
      .where('user_roles.user_id', '=', row.id)
      .execute();
    const policies = roles.flatMap((r) => this.policiesOf(r.id, r.updated_at, r.policies));
    return new Principal({ id: row.id, email: row.email, fname: row.fname, lname: row.lname }, claims.sid, policies);
  }

  /**
   * Checks email and password with rate limits per account and per address.
   * Returns the user id; throws 401/429. Second factors are the caller's next step.
   */
  async checkPassword(email: string, password: string, ip: string): Promise<string> {
    const normalized = email.trim().toLowerCase();
    this.perAddress.hit(`ip:${ip}`);
    this.perAccount.hit(`account:${normalized}`);
    const user = await this.db.selectFrom('users').select(['id', 'password_hash', 'disabled']).where('email', '=', normalized).executeTakeFirst();
    const ok = await verifyPassword(password, user?.password_hash ?? null);
    if (!user || !ok) throw loginFailed();
    if (user.disabled) throw new ApiError(401, 'user_disabled', 'This user is disabled; ask an administrator to enable it.');
    this.perAccount.reset(`account:${normalized}`);
    return user.id;
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
      await trx.updateTable('users').set({ last_login: now.toISOString() }).where('id', '=', userId).execute();
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
      const row = await this.db
        .selectFrom('sessions')
        .innerJoin('users', 'users.id', 'sessions.user_id')
        .select(['sessions.id', 'sessions.user_id', 'sessions.revoked_at', 'sessions.expires_at', 'users.disabled'])
        .where('sessions.refresh_hash', '=', digest(input.refreshToken))
        .executeTakeFirst();
      if (!row || row.revoked_at || row.expires_at < new Date().toISOString() || row.disabled) {
        throw new ApiError(401, 'token_revoked', 'The session has ended; sign in again.');
      }
      return this.signer.sign(row.user_id, row.id);
    }
    throw new ApiError(401, 'unauthorized', 'Send the refresh cookie or a still-valid bearer token.');
  }

  /**
   * The welcome mail of a new user. A user created without a password gets a single-use link to
   * set one (and cannot sign in before); one created with a password can sign in at once.
   * (First version: the link flow is completed in the sign-in work.)
   */
  async sendWelcomeMail(user: { id: string; email: string; fname: string; lname: string }, options: { hasPassword: boolean }): Promise<void> {
    await this.mail.send({
      to: user.email,
      subject: 'Welcome to Fleet',
      text: `Hello ${user.fname},\n\nan account was created for you.${options.hasPassword ? ' Sign in with the password you were given.' : ''}\n`,
    });
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
