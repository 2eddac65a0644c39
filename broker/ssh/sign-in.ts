/**
 * Signing in to the SSH gateway: a certificate the broker's CA signed at `fleet login` (its
 * sign-in session gives the principal), or, when the operator turns on SSH_USER_KEYS, a public key
 * the user registered (broker/ssh/keys.ts), which opens a sign-in session of its own for the
 * connection so its channels are re-checked like every other (a disabled user, a password change
 * end it), revoked when the connection closes or the key is removed. Every signed-in connection is
 * re-checked every REMOTE_RECHECK_MS and ends once its sign-in session or user does. Refusals are
 * counted per address and audited once per connection.
 */
import type { Logger } from 'pino';
import type { AuthContext } from 'ssh2';
import type { Principal } from '../access/principal.js';
import type { AuditService } from '../audit/service.js';
import type { AuthService } from '../auth/service.js';
import type { Caller } from '../remote/sessions.js';
import { fingerprintOf } from '../../shared/ssh-keys.js';
import { isRefusal } from '../errors.js';
import { verifyUserSignature, type SshAuthority } from './authority.js';
import { parsedKey, type SshKeys } from './keys.js';

/** Failed authentications one address may make in SSH_AUTH_WINDOW_MS; more close at once. */
export const SSH_AUTH_FAILURES_PER_ADDRESS = 20;
const SSH_AUTH_WINDOW_MS = 10 * 60_000;

/**
 * One SSH connection: who signed in, and the device it is bound to: an inner connection's (through
 * -J), or the one its preamble's host names (`target`) once signed in; `unreachable` says why that
 * host names no device the user may reach (the connection then opens nothing).
 */
export interface SshConnection {
  ip: string;
  login: string;
  deviceId?: string;
  target?: string;
  unreachable?: string;
  caller?: Caller;
  /** a sign-in with a registered key: that key, and the sign-in session opened for the connection */
  keyLogin?: { keyId: string; sessionId: string };
  channels: number;
  client: { end(): unknown };
  /** why sign-ins were refused (for the audit entry of a connection that never signed in) */
  refusals: string[];
  refusedAs?: Principal;
}

export interface SshSignInDeps {
  /** remoteRecheckMs (REMOTE_RECHECK_MS): how often signed-in connections are re-checked. */
  config: { sshUserKeys?: boolean; remoteRecheckMs: number };
  logger: Logger;
  authority: Pick<SshAuthority, 'verify'>;
  auth: Pick<AuthService, 'sessionCaller' | 'startSession' | 'revokeSession' | 'userRow' | 'authenticate'>;
  audit: Pick<AuditService, 'recordRefusedAttempt'>;
  keys: Pick<SshKeys, 'byFingerprint' | 'existing'>;
}

export class SshSignIn {
  private readonly failures = new Map<string, { count: number; since: number }>();
  /**
   * Signed-in connections, re-checked every REMOTE_RECHECK_MS: their user still active and their
   * sign-in session live (else the connection ends), their principal refreshed for the channels
   * they open next, and for a key login its key still registered.
   */
  private readonly live = new Set<SshConnection>();
  private timer?: NodeJS.Timeout;

  /** `bind` runs once a connection has signed in, before it is told so: it binds the connection to its preamble's device. */
  constructor(
    private readonly deps: SshSignInDeps,
    private readonly log: Logger,
    private readonly bind: (conn: SshConnection) => Promise<void> = async () => {},
  ) {}

  tooManyFailures(ip: string): boolean {
    const entry = this.failures.get(ip);
    if (!entry) return false;
    if (Date.now() - entry.since > SSH_AUTH_WINDOW_MS) {
      this.failures.delete(ip);
      return false;
    }
    return entry.count >= SSH_AUTH_FAILURES_PER_ADDRESS;
  }

  private failed(ip: string): void {
    const now = Date.now();
    const entry = this.failures.get(ip);
    if (!entry || now - entry.since > SSH_AUTH_WINDOW_MS) {
      // Bounded: forgotten addresses are swept when the table grows.
      if (this.failures.size > 10_000) for (const [key, e] of this.failures) if (now - e.since > SSH_AUTH_WINDOW_MS) this.failures.delete(key);
      this.failures.set(ip, { count: 1, since: now });
    } else entry.count += 1;
  }

  /**
   * A refused sign-in: counted against the address, and kept for the connection's one audit entry
   * (a client offers each of its keys in turn: one entry per connection, not per key).
   */
  private refuse(conn: SshConnection, ctx: AuthContext, reason: string, principal?: Principal): void {
    this.failed(conn.ip);
    if (conn.refusals.length < 5) conn.refusals.push(reason);
    if (principal) conn.refusedAs = principal;
    if (this.tooManyFailures(conn.ip)) {
      ctx.reject([]);
      conn.client.end();
    } else ctx.reject(['publickey']);
  }

  async authenticate(conn: SshConnection, ctx: AuthContext): Promise<void> {
    conn.login = ctx.username;
    if (ctx.method === 'none') return ctx.reject(['publickey']);
    if (conn.caller) return ctx.reject(['publickey']);
    if (ctx.method !== 'publickey' || !ctx.key) {
      return this.refuse(conn, ctx, `${ctx.method} authentication is not accepted: sign in with a certificate from fleet login`);
    }
    const cert = this.deps.authority.verify(ctx.key.algo, ctx.key.data);
    if ('refused' in cert) {
      if (cert.refused === 'not_a_certificate' && this.deps.config.sshUserKeys) return this.keyLogin(conn, ctx, cert.reason);
      // A probe without a signature is answered without an audit entry (ssh offers every key it has).
      return this.refuse(conn, ctx, `${ctx.key.algo} key ${fingerprintOf(ctx.key.data)} refused: ${cert.reason}`);
    }
    // A certificate of this CA, still valid: the client may go on and sign with its key.
    if (!ctx.signature || !ctx.blob) return ctx.accept();
    if (!verifyUserSignature(cert.key, ctx.blob, ctx.signature)) {
      return this.refuse(conn, ctx, `the signature does not match the certificate's key (${cert.keyId})`);
    }
    let caller: { principal: Principal; token: string };
    try {
      caller = await this.deps.auth.sessionCaller(cert.sessionId);
    } catch (err) {
      return this.refuse(conn, ctx, `certificate of ${cert.keyId} refused: ${(err as Error).message}`);
    }
    const { user } = caller.principal;
    if (user.email !== cert.keyId || !cert.principals.includes(user.email)) {
      return this.refuse(conn, ctx, `the certificate names ${cert.keyId}, not the user of its session`, caller.principal);
    }
    conn.caller = { principal: caller.principal, token: caller.token, source: 'ssh', ip: conn.ip };
    this.watch(conn);
    await this.bind(conn);
    ctx.accept();
  }

  /**
   * A plain key (SSH_USER_KEYS on): accepted when a user registered it and signed with it. The SSH
   * user name may name the fleet user (an email), and must then be the key's owner. An active user
   * gets a sign-in session for this connection, as a certificate's session gives its principal.
   */
  private async keyLogin(conn: SshConnection, ctx: AuthContext, certReason: string): Promise<void> {
    const offered = ctx.key as { algo: string; data: Buffer };
    const fingerprint = fingerprintOf(offered.data);
    const registered = await this.deps.keys.byFingerprint(fingerprint);
    const key = registered && parsedKey(registered.public_key);
    if (!registered || !key || !key.getPublicSSH().equals(offered.data)) {
      return this.refuse(conn, ctx, `${offered.algo} key ${fingerprint} refused: ${certReason}, nor a registered key`);
    }
    if (!ctx.signature || !ctx.blob) return ctx.accept();
    if (key.verify(ctx.blob, ctx.signature, ctx.hashAlgo) !== true) {
      return this.refuse(conn, ctx, `the signature does not match the registered key ${fingerprint}`);
    }
    const user = await this.deps.auth.userRow(registered.user_id);
    if (!user) return this.refuse(conn, ctx, `the registered key ${fingerprint} has no user`);
    if (ctx.username.includes('@') && ctx.username.toLowerCase() !== user.email) {
      return this.refuse(conn, ctx, `the registered key ${fingerprint} is not a key of ${ctx.username.slice(0, 320)}`);
    }
    if (user.disabled) return this.refuse(conn, ctx, `the registered key ${fingerprint} refused: its user is disabled`);
    const session = await this.deps.auth.startSession(user.id, conn.ip, `ssh key ${fingerprint}`);
    let caller: { principal: Principal; token: string };
    try {
      caller = await this.deps.auth.sessionCaller(session.sessionId);
    } catch (err) {
      await this.deps.auth.revokeSession(session.sessionId);
      return this.refuse(conn, ctx, `the registered key ${fingerprint} refused: ${(err as Error).message}`);
    }
    conn.caller = { principal: caller.principal, token: caller.token, source: 'ssh', ip: conn.ip };
    conn.keyLogin = { keyId: registered.key_id, sessionId: session.sessionId };
    this.watch(conn);
    await this.bind(conn);
    ctx.accept();
  }

  private watch(conn: SshConnection): void {
    this.live.add(conn);
    if (this.timer) return;
    this.timer = setInterval(() => void this.recheck(), this.deps.config.remoteRecheckMs);
    this.timer.unref();
  }

  /**
   * Every signed-in connection: a key login whose key was removed has its sign-in session revoked
   * (the remote sessions' re-check then withdraws its channels) and ends; a connection whose user
   * was disabled or whose sign-in session ended ends; the others get their principal as of now.
   */
  async recheck(): Promise<void> {
    if (this.live.size === 0) {
      clearInterval(this.timer);
      this.timer = undefined;
      return;
    }
    const conns = [...this.live];
    const keyIds = [...new Set(conns.flatMap((c) => (c.keyLogin ? [c.keyLogin.keyId] : [])))];
    let present: Set<string>;
    try {
      present = await this.deps.keys.existing(keyIds);
    } catch (err) {
      // A database that cannot answer for now ends no connection.
      return void this.log.warn({ err }, 'ssh connections not re-checked');
    }
    for (const conn of conns) {
      const caller = conn.caller;
      if (!caller || !this.live.has(conn)) continue;
      let why: string | undefined;
      if (conn.keyLogin && !present.has(conn.keyLogin.keyId)) why = 'its registered key was removed';
      else {
        try {
          caller.principal = await this.deps.auth.authenticate(caller.token, { allowExpired: true });
        } catch (err) {
          // Only a refusal ends a connection: a database that cannot answer for now ends none.
          if (isRefusal(err)) why = err.message;
          else this.log.warn({ err }, 'ssh connection not re-checked');
        }
      }
      if (!why) continue;
      this.log.info({ user: caller.principal.user.id, reason: why }, 'ssh connection ended');
      await this.closed(conn);
      conn.client.end();
    }
  }

  /** The connection closed: a key login's sign-in session ends with it. */
  async closed(conn: SshConnection): Promise<void> {
    if (!this.live.delete(conn) || !conn.keyLogin) return;
    await this.deps.auth.revokeSession(conn.keyLogin.sessionId).catch((err: unknown) => this.log.warn({ err }, 'ssh key login session not revoked'));
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** A connection that never signed in is an attempt too: audited as denied, with why. */
  async auditRefusedConnection(conn: SshConnection): Promise<void> {
    await this.deps.audit.recordRefusedAttempt({
      event: 'remote.ssh',
      principal: conn.refusedAs,
      deviceId: conn.deviceId ?? '',
      action: 'connect',
      options: { login: conn.login.slice(0, 64), ...(conn.target ? { host: conn.target } : {}) },
      reason: `sign-in refused: ${conn.refusals.join('; ')}`,
      ip: conn.ip,
      source: 'ssh',
    });
  }
}
