/**
 * Device web UIs in the browser (a router page, Node-RED, Grafana): HTTP and WebSocket requests on
 * `<device>-<port>.<APPS_HOST>` are proxied over the tunnel channel to the device's 127.0.0.1:<port>.
 *
 * Never on the broker's origin: the operator's tokens live there. The console asks for a ticket
 * (POST /remote/apps/{device_id}, decided as a tunnel), opens the app's own origin with it, and that
 * origin trades it once for an app session: a random secret in a host-only, HttpOnly, SameSite=Lax
 * cookie, good for that device and port only, for APP_SESSION_SECONDS. The bearer token never
 * leaves the broker's origin. Entering is audited like a tunnel (`remote.tunnel.start|denied`,
 * `via: "web_app"`), its end with the bytes of every request; the session is re-authorized at
 * most every REMOTE_RECHECK_MS while used, and its open connections are cut once access is withdrawn.
 * Here, the sessions; moving each request to the device and back is proxy.ts's.
 */
import crypto from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { Channel } from '../../shared/mux.js';
import type { RemoteRequest } from '../../shared/resources.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { AgentLocator } from '../agents/locator.js';
import type { AuditService } from '../audit/service.js';
import type { AuthService } from '../auth/service.js';
import type { Config } from '../environment.js';
import type { LiveSessionView } from '../remote/sessions.js';
import { conflict, forbidden, notFound } from '../errors.js';
import { APP_ENTER_PATH, appOrigin, appSessionCookie, appSessionOf, parseAppHost, samePath, type AppTarget } from './origin.js';
import { APP_DESTINATION, fromItself, OTHER_SITE, page, proxyRequest, rawPage, relayUpgrade } from './proxy.js';

/** How long an app session (its cookie) lasts; the console opens a new one after. */
export const APP_SESSION_SECONDS = 1800;
/** App sessions of one user (entering more ends their oldest) and of everyone (more are refused). */
const MAX_SESSIONS_PER_USER = 32;
const MAX_SESSIONS = 10_000;
/** Requests and WebSockets of one session open at once: each is a tunnel channel. */
const MAX_OPEN_PER_SESSION = 64;

interface AppSession {
  /** listed in GET /remote/sessions (never the cookie's secret) */
  id: string;
  ip: string;
  deviceId: string;
  port: number;
  user: { id: string; email: string };
  /** the sign-in session's token, for re-authorizing (never sent anywhere) */
  token: string;
  auditId: number;
  startedAt: number;
  expiresAt: number;
  checkedAt: number;
  bytesIn: number;
  bytesOut: number;
  /** channels open now (requests in flight, WebSockets) */
  open: Set<Channel>;
  ended: boolean;
}

export interface AppsServiceDeps {
  /** remoteRecheckMs (REMOTE_RECHECK_MS): a used session is re-authorized at most this often, open connections re-checked this often. */
  config: Pick<Config, 'appsHost' | 'publicUrl' | 'tlsCertFile' | 'trustProxy' | 'remoteRecheckMs'>;
  logger: Logger;
  auth: Pick<AuthService, 'authenticate'>;
  access: Pick<AccessService, 'decide'>;
  audit: Pick<AuditService, 'recordRemoteStart' | 'recordRemoteEnd'>;
  locator: AgentLocator;
  tickets: { issue(token: string, userId: string): Promise<{ ticket: string; expires_in: number }>; redeem(ticket: string): Promise<string | undefined> };
}

const digest = (secret: string) => crypto.createHash('sha256').update(secret).digest('hex');
const tunnelRequest = (port: number): RemoteRequest => ({ action: 'tunnel', proto: 'tcp', port, dst: APP_DESTINATION });

export class AppsService {
  /** by the sha256 of the cookie's secret */
  private readonly sessions = new Map<string, AppSession>();
  private readonly sweep: NodeJS.Timeout;
  private closing = false;
  private rechecking = false;

  constructor(private readonly deps: AppsServiceDeps) {
    this.sweep = setInterval(() => void this.recheckOpen(), deps.config.remoteRecheckMs);
    this.sweep.unref();
  }

  /** The live sessions, as the operator's list shows them (a tunnel, from the web). */
  list(): LiveSessionView[] {
    return [...this.sessions.values()].map((s) => ({
      id: s.id,
      user: s.user,
      deviceId: s.deviceId,
      kind: 'tunnel',
      source: 'web',
      ip: s.ip,
      startedAt: s.startedAt,
      bytesIn: s.bytesIn,
      bytesOut: s.bytesOut,
      request: tunnelRequest(s.port),
    }));
  }

  /** Ends a session on an operator's word (authorized by the caller); its end entry names them. */
  async endById(id: string, by: { id: string; email: string }): Promise<boolean> {
    const key = [...this.sessions].find(([, s]) => s.id === id)?.[0];
    if (!key) return false;
    await this.end(key, `ended by ${by.email} (user ${by.id})`);
    return true;
  }

  /** App sessions held now (tests, metrics). */
  get size(): number {
    return this.sessions.size;
  }

  private get scheme(): 'http' | 'https' {
    return this.deps.config.tlsCertFile || this.deps.config.publicUrl?.startsWith('https:') ? 'https' : 'http';
  }

  /** The device and port a request is for, when it came to the apps host; undefined for the broker's own origin. */
  target(req: IncomingMessage): AppTarget | undefined {
    return parseAppHost(req.headers.host, this.deps.config.appsHost);
  }

  private clientIp(req: IncomingMessage): string {
    const forwarded = req.headers['x-forwarded-for'];
    if (this.deps.config.trustProxy && typeof forwarded === 'string' && forwarded.trim()) return forwarded.split(',')[0].trim();
    return (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
  }

  /**
   * A ticket to open the device's web UI on `port`, and the URL that trades it on the app's own
   * origin. Decided as the tunnel would be (a refusal is audited); entering decides again.
   */
  async issue(
    principal: Principal,
    bearer: string,
    deviceId: string,
    port: number,
    path: string,
    brokerHost: string,
    ip: string,
  ): Promise<{ url: string; expires_in: number }> {
    const appsHost = this.deps.config.appsHost;
    if (!appsHost)
      throw conflict(
        'apps_host_not_configured',
        "Device web UIs need their own origin: set APPS_HOST on the broker to a host whose subdomains all reach it (a wildcard DNS name such as apps.example.com, with a certificate for *.apps.example.com; in development, APPS_HOST=localhost), then restart it. See the broker's documentation on device web UIs.",
      );
    const decision = await this.deps.access.decide(principal, 'remote-access:connect', deviceId, tunnelRequest(port));
    if (!decision.allowed) {
      await this.auditStart(principal, deviceId, port, ip, false, decision.reason).catch(() => 0);
      if (decision.code === 'no_such_device') throw notFound(`Device ${deviceId}`);
      throw forbidden(`Not allowed: ${decision.reason}.`, { permission: 'remote-access:connect', device_id: deviceId });
    }
    const { ticket, expires_in } = await this.deps.tickets.issue(bearer, principal.user.id);
    const origin = appOrigin({ scheme: this.scheme, appsHost, brokerHost, deviceId, port });
    const query = new URLSearchParams({ ticket, device: deviceId, path: samePath(path) });
    return { url: `${origin}${APP_ENTER_PATH}?${query}`, expires_in };
  }

  private auditStart(principal: Principal | undefined, deviceId: string, port: number, ip: string, allowed: boolean, reason: string): Promise<number> {
    return this.deps.audit.recordRemoteStart({
      event: 'remote.tunnel',
      user: principal?.user,
      deviceId,
      action: 'tunnel',
      options: { proto: 'tcp', port, dst: APP_DESTINATION, via: 'web_app' },
      allowed,
      reason,
      ip,
      source: 'web',
      sessionId: principal?.sessionId,
    });
  }

  /** Serves a request that came to the apps host: the ticket's trade, or the device's answer. */
  async handle(req: IncomingMessage, res: ServerResponse, target: AppTarget): Promise<void> {
    try {
      const url = new URL(req.url ?? '/', 'http://app.invalid');
      if (url.pathname === APP_ENTER_PATH) return await this.enter(req, res, target, url);
      if (!fromItself(req, false)) return page(res, 403, OTHER_SITE);
      const session = await this.sessionFor(req, target);
      if (typeof session === 'string') return page(res, session === 'expired' ? 401 : 403, this.refusalText(session));
      await this.proxy(req, res, session);
    } catch (err) {
      this.deps.logger.error({ err }, 'device web UI request failed');
      page(res, 500, 'The broker failed to serve this request; the error is logged.');
    }
  }

  private refusalText(why: 'none' | 'expired' | 'other_origin' | 'withdrawn' | 'busy'): string {
    switch (why) {
      case 'none':
      case 'expired':
        return 'Not signed in to this device web UI (or its session expired): open it again from the device page of the Fleet console.';
      case 'other_origin':
        return 'This session is for another device or port.';
      case 'withdrawn':
        return 'Access to this device web UI was withdrawn; the session has ended.';
      case 'busy':
        return 'Too many requests of this session are open at once; try again shortly.';
    }
  }

  /** Trades a ticket for an app session on this origin, decided and audited as a tunnel. */
  private async enter(req: IncomingMessage, res: ServerResponse, target: AppTarget, url: URL): Promise<void> {
    const ip = this.clientIp(req);
    const deviceId = url.searchParams.get('device') ?? '';
    if (!/^[0-9a-f]{64}$/.test(deviceId) || !deviceId.startsWith(target.prefix)) return page(res, 400, 'This link names another device than its host.');
    const token = await this.deps.tickets.redeem(url.searchParams.get('ticket') ?? '');
    let principal: Principal | undefined;
    try {
      principal = token ? await this.deps.auth.authenticate(token, { allowExpired: true }) : undefined;
    } catch {
      principal = undefined;
    }
    if (!token || !principal) {
      await this.auditStart(undefined, deviceId, target.port, ip, false, 'invalid_ticket: the ticket is unknown, used or expired').catch(() => 0);
      return page(res, 401, 'This link has been used or has expired: open the web UI again from the device page of the Fleet console.');
    }
    const decision = await this.deps.access.decide(principal, 'remote-access:connect', deviceId, tunnelRequest(target.port));
    const full = decision.allowed && this.sessions.size >= MAX_SESSIONS;
    let auditId: number;
    try {
      auditId = await this.auditStart(
        principal,
        deviceId,
        target.port,
        ip,
        decision.allowed && !full,
        full ? 'too many device web UI sessions on this broker' : decision.reason,
      );
    } catch {
      return page(res, 500, 'The attempt could not be written to the audit log, so it was refused. Try again shortly.');
    }
    if (!decision.allowed) return page(res, decision.code === 'no_such_device' ? 404 : 403, `Not allowed: ${decision.reason}.`);
    if (full) return page(res, 429, 'Too many device web UI sessions are open on this broker; try again later.');
    const now = Date.now();
    if (!this.deps.locator.isConnected(deviceId)) {
      await this.deps.audit
        .recordRemoteEnd(auditId, { durationMs: 0, bytesIn: 0, bytesOut: 0, reason: 'device not connected', result: 'error' })
        .catch(() => {});
      return page(res, 404, 'The device is not connected to the broker; try again when it is online.');
    }
    const mine = [...this.sessions.entries()].filter(([, s]) => s.user.id === principal.user.id).sort((a, b) => a[1].startedAt - b[1].startedAt);
    for (const [key] of mine.slice(0, Math.max(0, mine.length - MAX_SESSIONS_PER_USER + 1))) await this.end(key, 'replaced by a newer session of the user');
    const secret = crypto.randomBytes(32).toString('base64url');
    this.sessions.set(digest(secret), {
      id: crypto.randomUUID(),
      ip,
      deviceId,
      port: target.port,
      user: { id: principal.user.id, email: principal.user.email },
      token,
      auditId,
      startedAt: now,
      expiresAt: now + APP_SESSION_SECONDS * 1000,
      checkedAt: now,
      bytesIn: 0,
      bytesOut: 0,
      open: new Set(),
      ended: false,
    });
    res.writeHead(303, {
      Location: samePath(url.searchParams.get('path') ?? '/'),
      'Set-Cookie': appSessionCookie(secret, this.scheme === 'https', APP_SESSION_SECONDS),
      'Cache-Control': 'no-store',
      'Referrer-Policy': 'no-referrer',
    });
    res.end();
  }

  /** The session a request's cookie names, re-authorized when due; or why there is none. */
  private async sessionFor(req: IncomingMessage, target: AppTarget): Promise<AppSession | 'none' | 'expired' | 'other_origin' | 'withdrawn' | 'busy'> {
    const secret = appSessionOf(req.headers.cookie);
    const key = secret ? digest(secret) : undefined;
    const session = key ? this.sessions.get(key) : undefined;
    if (!key || !session) return 'none';
    // A cookie copied to another app host opens nothing there: one session, one device and port.
    if (!session.deviceId.startsWith(target.prefix) || session.port !== target.port) return 'other_origin';
    if (Date.now() >= session.expiresAt) {
      await this.end(key, 'app session expired');
      return 'expired';
    }
    if (Date.now() - session.checkedAt >= this.deps.config.remoteRecheckMs && !(await this.recheck(key, session))) return 'withdrawn';
    if (session.open.size >= MAX_OPEN_PER_SESSION) return 'busy';
    return session;
  }

  /** Is the session still allowed (user active and signed in, grant still there)? Ends it when not. */
  private async recheck(key: string, session: AppSession): Promise<boolean> {
    session.checkedAt = Date.now();
    let reason: string | undefined;
    try {
      const who = await this.deps.auth.authenticate(session.token, { allowExpired: true });
      const decision = await this.deps.access.decide(who, 'remote-access:connect', session.deviceId, tunnelRequest(session.port));
      if (!decision.allowed) reason = decision.reason;
    } catch (err) {
      reason = (err as Error).message;
    }
    if (reason === undefined) return true;
    await this.end(key, `access withdrawn: ${reason.replace(/\.$/, '')}`);
    return false;
  }

  /** Sessions with open connections (WebSockets, long responses) are re-checked every REMOTE_RECHECK_MS; expired ones end. */
  private async recheckOpen(): Promise<void> {
    if (this.rechecking) return;
    this.rechecking = true;
    try {
      for (const [key, session] of [...this.sessions]) {
        if (Date.now() >= session.expiresAt && session.open.size === 0) await this.end(key, 'app session expired');
        else if (session.open.size > 0 && Date.now() - session.checkedAt >= this.deps.config.remoteRecheckMs) await this.recheck(key, session);
      }
    } catch (err) {
      this.deps.logger.error({ err }, 'device web UI sessions could not be re-checked');
    } finally {
      this.rechecking = false;
    }
  }

  /** One request, one tunnel channel (proxy.ts). */
  private async proxy(req: IncomingMessage, res: ServerResponse, session: AppSession): Promise<void> {
    let channel: Channel;
    try {
      channel = await this.openChannel(session);
    } catch (err) {
      return page(res, 502, `The device did not accept the connection to port ${session.port}: ${(err as Error).message}`);
    }
    proxyRequest(req, res, channel, { port: session.port, scheme: this.scheme });
  }

  /** Ends a session: its connections cut, its end audited with the bytes of all its requests. */
  private async end(key: string, reason: string): Promise<void> {
    const session = this.sessions.get(key);
    if (!session || session.ended) return;
    session.ended = true;
    this.sessions.delete(key);
    for (const channel of session.open) channel.destroy();
    await this.deps.audit
      .recordRemoteEnd(session.auditId, {
        durationMs: Date.now() - session.startedAt,
        bytesIn: session.bytesIn,
        bytesOut: session.bytesOut,
        reason,
      })
      .catch((err) => this.deps.logger.error({ err }, 'end of device web UI session not audited'));
  }

  private async openChannel(session: AppSession): Promise<Channel> {
    const { channel } = await this.deps.locator.open(session.deviceId, 'tunnel', { proto: 'tcp', port: session.port, dst: APP_DESTINATION });
    session.open.add(channel);
    channel.once('close', () => {
      session.open.delete(channel);
      session.bytesIn += channel.stats.bytesOut;
      session.bytesOut += channel.stats.bytesIn;
    });
    return channel;
  }

  /** A WebSocket (or other upgrade) on the apps host: the request goes to the device as it came (rewritten), then bytes both ways. */
  async handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, target: AppTarget): Promise<void> {
    socket.on('error', () => {});
    if (this.closing) return void socket.destroy();
    try {
      if (!fromItself(req, true)) return rawPage(socket, 403, 'Forbidden', OTHER_SITE);
      const session = await this.sessionFor(req, target);
      if (typeof session === 'string') return rawPage(socket, session === 'busy' ? 503 : 403, 'Forbidden', this.refusalText(session));
      let channel: Channel;
      try {
        channel = await this.openChannel(session);
      } catch (err) {
        return rawPage(socket, 502, 'Bad Gateway', `The device did not accept the connection: ${(err as Error).message}`);
      }
      relayUpgrade(req, socket, head, channel, { port: session.port, scheme: this.scheme });
    } catch (err) {
      this.deps.logger.error({ err }, 'device web UI upgrade failed');
      socket.destroy();
    }
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.sweep);
    for (const key of [...this.sessions.keys()]) await this.end(key, 'broker shut down');
  }
}
