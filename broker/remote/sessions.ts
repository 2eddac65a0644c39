import crypto from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import WebSocket, { WebSocketServer } from 'ws';
import type { ZodType } from 'zod';
import type { Channel } from '../../shared/mux.js';
import type { ChannelParams, RemoteKind } from '../../shared/protocol.js';
import { isAccessRefusal, refusalCodeOf } from '../../shared/codes.js';
import { MAX_END_REASON, MAX_ENDER_EMAIL, MAX_ENDER_NAME } from '../../shared/remote-frames.js';
import { normalizeDevicePath, type RemoteRequest } from '../../shared/resources.js';
import type { AccessDecision, AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { AgentLocator } from '../agents/locator.js';
import type { AuditService } from '../audit/service.js';
import type { AuthService } from '../auth/service.js';
import type { Config } from '../environment.js';
import { ApiError } from '../http/errors.js';
import type { Authenticated } from '../auth/credentials.js';
import type { UpgradeAttempt } from '../http/upgrade.js';
import { bounded, type RemoteAuditEnd } from '../audit/service.js';
import { errorFrame, refuse, Relay, SessionClose, type ErrorFrame, type RelayOptions } from './relay.js';
import { ConsoleRecorder } from './recordings.js';
import { consoleJoinQuery, consoleQuery, copyQuery, tunnelQuery, type ConsoleQuery, type CopyQuery, type TunnelQuery } from './schemas.js';
import { ConsoleRelay } from './console-relay.js';

/** How often live sessions are re-authorized: a withdrawn grant ends them within this time. */
export const RECHECK_INTERVAL_MS = 2000;
/** Largest frame a client may send (clients chunk their uploads well below this). */
const MAX_CLIENT_FRAME = 4 * 1024 * 1024;
/** Query parameters that carry credentials: never written to the audit trail. */
const CREDENTIAL_PARAMS = new Set(['ticket', 'token', 'access_token', 'authorization']);

/** Who connected: `qbee` is qbee's own clients (qbee-cli) over the native transport (broker/qbee). */
export type RemoteSource = 'api' | 'web' | 'cli' | 'ssh' | 'qbee';

/** What remote sessions use: agents are reached only through the AgentLocator. */
export interface RemoteSessionsDeps {
  config: Pick<Config, 'trustProxy' | 'dataDir' | 'consoleDetachGraceSeconds'>;
  logger: Logger;
  auth: Pick<AuthService, 'authenticate'>;
  access: Pick<AccessService, 'decide' | 'copyRoots' | 'consoleRecording' | 'mayWatchRemoteSession'>;
  audit: Pick<AuditService, 'recordRemoteStart' | 'recordRemoteEnd' | 'recordRemoteJoin'>;
  locator: AgentLocator;
  /** Several brokers: where the sessions of every broker are listed (broker/cluster/sessions.ts). */
  directory?: SessionDirectory;
}

/** The live sessions of every broker of a cluster: this broker tells it of its own. */
export interface SessionDirectory {
  added(view: LiveSessionView): void;
  removed(id: string): void;
  /** A live session held by another broker, with that broker's id. */
  find(id: string): Promise<(LiveSessionView & { broker: string }) | undefined>;
  elsewhere(): Promise<(LiveSessionView & { broker: string })[]>;
  endElsewhere(session: LiveSessionView & { broker: string }, end: SessionEnd): Promise<void>;
}

/** An operator ending a session: who (told to the session's user by email and name) and why, if they said. */
export interface SessionEnd {
  by: { id: string; email: string; name: string };
  /** at most MAX_END_REASON characters, one line (checked at the route) */
  reason?: string;
}

/** Who is asking: the principal as of now, and the token to re-check them with later. */
export interface Caller {
  principal: Principal;
  token: string;
  source: RemoteSource;
  ip: string;
}

/** What a live session must offer to be ended from here: the WebSocket Relay, or a qbee stream relay. */
export interface LiveRelay {
  abort(frame: ErrorFrame, code: number, reason: string): void;
  /** Bytes so far, client to device and device to client (the operator's list shows them). */
  readonly bytesIn: number;
  readonly bytesOut: number;
  readonly done: Promise<{ bytesIn: number; bytesOut: number; reason: string; failed?: boolean }>;
}

/** A console others may watch read-only: the WebSocket console (ConsoleRelay), or an SSH console. */
export interface WatchableRelay extends LiveRelay {
  readonly ending: boolean;
  readonly watching: { user: { id: string; email: string }; since: number }[];
  watch(ws: WebSocket, who: { id: string; email: string }): boolean;
  dropWatcher(userId: string, frame: ErrorFrame, code: number): void;
}

export function isWatchable(relay: LiveRelay): relay is WatchableRelay {
  return typeof (relay as Partial<WatchableRelay>).watch === 'function';
}

interface LiveSession {
  id: string;
  caller: Caller;
  deviceId: string;
  request: RemoteRequest;
  relay: LiveRelay;
  startedAt: number;
  /** the start entry of its audit trail (attach and watch entries point at it) */
  auditId: number;
  /** console only: the callers who joined as watchers (re-authorized with the session) */
  watchedBy: Caller[];
  /** set once access was withdrawn: the relay is ending */
  withdrawn?: boolean;
}

/** A live session as the operator's list shows it (GET /remote/sessions). */
export interface LiveSessionView {
  id: string;
  user: { id: string; email: string };
  deviceId: string;
  kind: RemoteRequest['action'];
  source: RemoteSource;
  ip: string;
  startedAt: number;
  bytesIn: number;
  bytesOut: number;
  /** console only: false while its owner's connection is gone (it waits for a re-attach) */
  attached?: boolean;
  /** console only: who watches it read-only */
  watchers?: { user: { id: string; email: string }; since: number }[];
  /** the request it was opened with (for deciding who may watch it) */
  request: RemoteRequest;
}

/** A re-attach or a watcher joining a live console, decided and audited. */
type JoinPrepared = Refusal | { ok: true; mode: 'attach' | 'watch'; sessionId: string; caller: Caller; size: { cols: number; rows: number } };

export type Refusal = { ok: false; frame: ErrorFrame; code: number };
export type Prepared =
  | Refusal
  | {
      ok: true;
      caller: Caller;
      deviceId: string;
      request: RemoteRequest;
      channel: Channel;
      relayOptions: RelayOptions;
      auditId: number;
      startedAt: number;
      /** The live session's id (and its recording's name). */
      sessionId: string;
      /** console: where it is recorded, unless its roles turn recording off */
      recorder?: ConsoleRecorder;
    };

function refusal(status: number, error: string, message: string, details: Record<string, unknown> = {}): Refusal {
  return { ok: false, frame: errorFrame(status, error, message, details), code: 4000 + status };
}

function fromApiError(err: ApiError): Refusal {
  const { code: _c, error, message, ...details } = err.toJSON() as { code: number; error: string; message: string };
  return refusal(err.status, error, message, details);
}

/** What the audit entry records of a request. */
function auditOptions(request: RemoteRequest, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const { action: _a, ...options } = request as RemoteRequest & Record<string, unknown>;
  return { ...options, ...extra };
}

/**
 * Remote-access sessions over WebSocket: every attempt is authenticated, validated, decided by
 * the access service against the caller's roles at that moment, audited before anything starts,
 * and only then relayed to the device's agent, which is reached through the AgentLocator seam.
 * Live sessions are re-authorized every RECHECK_INTERVAL_MS and ended when the grant is gone.
 */
export class RemoteSessions {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_CLIENT_FRAME, perMessageDeflate: false });
  private readonly live = new Map<string, LiveSession>();
  private readonly log: Logger;
  private recheckTimer?: NodeJS.Timeout;
  private rechecking = false;
  private closing = false;

  constructor(private readonly deps: RemoteSessionsDeps) {
    this.log = deps.logger.child({ module: 'remote' });
  }

  private get locator(): AgentLocator {
    return this.deps.locator;
  }

  init(): void {
    this.recheckTimer = setInterval(() => void this.recheck(), RECHECK_INTERVAL_MS);
    this.recheckTimer.unref();
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.recheckTimer);
    const ending = [...this.live.values()].map((session) => {
      session.relay.abort(errorFrame(503, 'shutting_down', 'The broker is shutting down; reconnect shortly.'), SessionClose.goingAway, 'broker shut down');
      return session.relay.done;
    });
    await Promise.race([Promise.all(ending), new Promise((r) => setTimeout(r, 2000).unref())]);
    for (const ws of this.wss.clients) ws.terminate();
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
  }

  /** Live sessions on this broker (for tests and metrics). */
  get size(): number {
    return this.live.size;
  }

  clientIp(req: IncomingMessage): string {
    const forwarded = req.headers['x-forwarded-for'];
    if (this.deps.config.trustProxy && typeof forwarded === 'string' && forwarded.trim()) return forwarded.split(',')[0].trim();
    return (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
  }

  /** The caller of an upgrade the pipeline authenticated (broker/auth/credentials.ts, `bearer-or-ticket`). */
  private callerOf(attempt: UpgradeAttempt, authenticated: Authenticated): Caller {
    const asked = attempt.url.searchParams.get('source');
    const source: RemoteSource = authenticated.viaTicket ? 'web' : asked === 'cli' || asked === 'web' ? asked : 'api';
    return { principal: authenticated.principal, token: authenticated.token, source, ip: this.clientIp(attempt.req) };
  }

  /** A console's `?attach=` or `?watch=`: joining a live console rather than opening one. */
  private joiningOf(kind: RemoteKind, url: URL): 'attach' | 'watch' | undefined {
    return kind === 'console' ? (url.searchParams.has('attach') ? 'attach' : url.searchParams.has('watch') ? 'watch' : undefined) : undefined;
  }

  /** First step of the upgrade (broker/upgrades.ts): not a WebSocket handshake (or shutting down) is answered by ws before any work. */
  admit(attempt: UpgradeAttempt): boolean {
    const { req, socket, head } = attempt;
    if (this.closing || req.headers.upgrade?.toLowerCase() !== 'websocket' || !req.headers['sec-websocket-key']) {
      if (this.closing) socket.destroy();
      else this.wss.handleUpgrade(req, socket, head, (ws) => ws.close(SessionClose.badRequest));
      return false;
    }
    socket.on('error', () => {});
    return true;
  }

  /** No or bad token, a spent ticket (ApiError 401): audited as a denied attempt and told on the socket. */
  async refused(kind: RemoteKind, attempt: UpgradeAttempt, err: unknown): Promise<void> {
    const { req, socket, head, url } = attempt;
    const ip = this.clientIp(req);
    const joining = this.joiningOf(kind, url);
    if (joining) {
      let prepared: JoinPrepared;
      if (err instanceof ApiError)
        prepared = await this.refuseJoin(`remote.console.${joining}`, url.searchParams.get(joining) ?? '', ip, undefined, fromApiError(err));
      else {
        this.log.error({ err }, 'console join failed');
        prepared = refusal(500, 'internal_error', 'The broker failed to join the console; the error is logged.');
      }
      return this.completeJoin(prepared, req, socket, head);
    }
    let prepared: Prepared;
    if (err instanceof ApiError) prepared = await this.refuseEarly(kind, url, ip, undefined, fromApiError(err));
    else {
      this.log.error({ err, kind }, 'remote session set-up failed');
      prepared = refusal(500, 'internal_error', 'The broker failed to set up the session; the error is logged.');
    }
    this.complete(prepared, req, socket, head);
  }

  /** The caller is known: parse, decide, audit, open, relay (or join a live console). */
  connect(kind: RemoteKind, attempt: UpgradeAttempt, authenticated: Authenticated): void {
    const { req, socket, head, url } = attempt;
    const caller = this.callerOf(attempt, authenticated);
    const joining = this.joiningOf(kind, url);
    if (joining) {
      void this.prepareJoin(joining, caller, url)
        .catch((err): JoinPrepared => {
          this.log.error({ err }, 'console join failed');
          return refusal(500, 'internal_error', 'The broker failed to join the console; the error is logged.');
        })
        .then((prepared) => this.completeJoin(prepared, req, socket, head));
      return;
    }
    void this.prepare(kind, caller, url)
      .catch((err): Prepared => {
        this.log.error({ err, kind }, 'remote session set-up failed');
        return refusal(500, 'internal_error', 'The broker failed to set up the session; the error is logged.');
      })
      .then((prepared) => this.complete(prepared, req, socket, head));
  }

  /** Completes the WebSocket handshake and relays, or reports the refusal on the socket. */
  private complete(prepared: Prepared, req: IncomingMessage, socket: Duplex, head: Buffer): void {
    let upgraded = false;
    if (this.closing) {
      socket.destroy();
    } else {
      this.wss.handleUpgrade(req, socket, head, (ws) => {
        upgraded = true;
        if (!prepared.ok) return refuse(ws, prepared.frame, prepared.code);
        this.relay(ws, prepared);
      });
    }
    // The client left while we were deciding and opening (or the broker is closing): nothing to relay to.
    if (!upgraded && prepared.ok) {
      prepared.channel.destroy();
      void prepared.recorder?.close();
      const reason = this.closing ? 'broker shut down' : 'client went away before the session started';
      void this.finish(prepared.auditId, prepared.startedAt, { bytesIn: 0, bytesOut: 0, reason });
    }
  }

  private relay(ws: WebSocket, prepared: Extract<Prepared, { ok: true }>): void {
    if (prepared.relayOptions.kind === 'console') {
      // A console outlives a dropped connection for its owner to re-attach, and may be watched.
      const relay = new ConsoleRelay(prepared.channel, {
        sessionId: prepared.sessionId,
        graceMs: this.deps.config.consoleDetachGraceSeconds * 1000,
        size: prepared.relayOptions.size ?? { cols: 80, rows: 24 },
        recorder: prepared.relayOptions.recorder,
      });
      this.adopt(prepared, relay);
      relay.start(ws, prepared.caller.principal.user);
      return;
    }
    const relay = new Relay(ws, prepared.channel, prepared.relayOptions);
    this.adopt(prepared, relay);
    relay.start();
  }

  /** Completes the handshake of a re-attach or a watcher, or reports the refusal on the socket. */
  private completeJoin(prepared: JoinPrepared, req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.closing) return void socket.destroy();
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      if (!prepared.ok) return refuse(ws, prepared.frame, prepared.code);
      const session = this.live.get(prepared.sessionId);
      const relay = session?.relay;
      const who = prepared.caller.principal.user;
      let joined = false;
      if (session && relay && prepared.mode === 'watch' && isWatchable(relay)) {
        joined = relay.watch(ws, who);
        session.watchedBy = [...session.watchedBy.filter((c) => relay.watching.some((w) => w.user.id === c.principal.user.id)), prepared.caller];
      } else if (session && relay instanceof ConsoleRelay && prepared.mode === 'attach') {
        if ((joined = relay.reattach(ws, who, prepared.size))) session.caller = prepared.caller;
      }
      // It ended while the join was being decided.
      if (!joined)
        refuse(ws, errorFrame(404, 'session_not_found', `Console session ${prepared.sessionId} has ended; open a new console.`), SessionClose.notFound);
    });
  }

  /**
   * Takes a started session under watch: re-authorized with the others, ended on shutdown, and
   * its end audited when its relay is done. Other transports (broker/qbee) hand theirs in here.
   */
  adopt(prepared: Extract<Prepared, { ok: true }>, relay: LiveRelay): string {
    const id = prepared.sessionId;
    this.live.set(id, {
      id,
      caller: prepared.caller,
      deviceId: prepared.deviceId,
      request: prepared.request,
      relay,
      startedAt: prepared.startedAt,
      auditId: prepared.auditId,
      watchedBy: [],
    });
    const added = this.live.get(id);
    if (added) this.deps.directory?.added(this.view(added));
    const { recorder } = prepared;
    if (recorder) {
      // A required recording that cannot keep up (or be written) ends the session rather than let it run unrecorded.
      recorder.overflow = () =>
        relay.abort(
          errorFrame(503, 'recording_failed', 'The session could not be recorded, and its recording is required: it was ended.'),
          SessionClose.internal,
          'required recording could not be written',
        );
    }
    void relay.done.then(async (end) => {
      this.live.delete(id);
      this.deps.directory?.removed(id);
      await recorder?.close();
      await this.finish(prepared.auditId, prepared.startedAt, { ...end, result: end.failed ? 'error' : 'ended' });
    });
    return id;
  }

  /** Every live session on this broker; who may see which is decided by the caller (broker/access). */
  list(): LiveSessionView[] {
    return [...this.live.values()].map((s) => this.view(s));
  }

  /** One live session, or undefined when it is unknown or has ended. */
  get(id: string): LiveSessionView | undefined {
    const session = this.live.get(id);
    return session && this.view(session);
  }

  /**
   * Ends a live session on an operator's word (authorized by the caller): the client gets an
   * error frame `session_ended` naming who ended it and why (`ended_by`, `reason`) and close 4403,
   * and the end entry of the audit trail says the same. Resolves once the relay is done (the end
   * entry follows), or after a few seconds.
   */
  async end(id: string, { by, reason }: SessionEnd): Promise<boolean> {
    const session = this.live.get(id);
    if (!session) return false;
    const why = reason ? `: ${reason}` : '';
    this.log.info({ deviceId: session.deviceId, user: session.caller.principal.user.id, by: by.id }, 'remote session ended by an operator');
    session.withdrawn = true;
    session.relay.abort(
      errorFrame(403, 'session_ended', `${by.email} ended this session${why}.`, {
        ended_by: { email: by.email.slice(0, MAX_ENDER_EMAIL), name: by.name.slice(0, MAX_ENDER_NAME) },
        ...(reason ? { reason: reason.slice(0, MAX_END_REASON) } : {}),
      }),
      SessionClose.forbidden,
      `ended by ${by.email} (user ${by.id})${why}`,
    );
    await Promise.race([session.relay.done, new Promise((r) => setTimeout(r, 5000).unref())]);
    return true;
  }

  /**
   * Several brokers: the sessions here whose audit another broker ended (it took this one for gone
   * while it was cut off from the database) end here too, their end not written again (the audit
   * writes one end per session). `stillOpen` answers which start entries are still open.
   */
  async endEndedElsewhere(stillOpen: (startIds: number[]) => Promise<Set<number>>): Promise<number> {
    const live = [...this.live.values()].filter((s) => !s.withdrawn);
    if (live.length === 0) return 0;
    const open = await stillOpen(live.map((s) => s.auditId));
    let ended = 0;
    for (const session of live) {
      if (open.has(session.auditId) || !this.live.has(session.id)) continue;
      this.log.warn(
        { deviceId: session.deviceId, session: session.id },
        'remote session ended by the other brokers while this one was cut off from the database: ended here',
      );
      session.withdrawn = true;
      session.relay.abort(
        errorFrame(503, 'session_ended', 'This session was ended while its broker was cut off from the database; open a new one.'),
        SessionClose.goingAway,
        'ended by the cluster while its broker was cut off from the database',
      );
      ended += 1;
    }
    return ended;
  }

  private view(s: LiveSession): LiveSessionView {
    const { user } = s.caller.principal;
    return {
      id: s.id,
      user: { id: user.id, email: user.email },
      deviceId: s.deviceId,
      kind: s.request.action,
      source: s.caller.source,
      ip: s.caller.ip,
      startedAt: s.startedAt,
      bytesIn: s.relay.bytesIn,
      bytesOut: s.relay.bytesOut,
      request: s.request,
      ...(s.request.action === 'console' && isWatchable(s.relay)
        ? { attached: s.relay instanceof ConsoleRelay ? s.relay.attached : true, watchers: s.relay.watching }
        : {}),
    };
  }

  /** Audits the end of a session that was audited as started. */
  async finish(
    auditId: number,
    startedAt: number,
    end: { bytesIn: number; bytesOut: number; reason: string; result?: RemoteAuditEnd['result'] },
  ): Promise<void> {
    try {
      await this.deps.audit.recordRemoteEnd(auditId, {
        durationMs: Date.now() - startedAt,
        bytesIn: end.bytesIn,
        bytesOut: end.bytesOut,
        reason: end.reason,
        result: end.result,
      });
    } catch (err) {
      this.log.error({ err, auditId }, 'end of remote session not audited');
    }
  }

  private async prepare(kind: RemoteKind, caller: Caller, url: URL): Promise<Prepared> {
    const schema: ZodType = kind === 'console' ? consoleQuery : kind === 'tunnel' ? tunnelQuery : copyQuery;
    const parsed = schema.safeParse(Object.fromEntries(url.searchParams));
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const field = issue.path.map(String).join('.') || 'query';
      return this.refuseEarly(kind, url, caller.ip, caller, refusal(400, 'invalid_request', `query.${field}: ${issue.message}`, { field }));
    }
    const { request, params, options } = this.describe(kind, parsed.data);
    const deviceId = (parsed.data as { device_id: string }).device_id;
    return this.authorizeAndOpen(caller, kind, deviceId, request, params, options);
  }

  /**
   * Decides a re-attach (`?attach=<session id>`: the same user as the console's owner, with a
   * fresh authentication, allowed by their roles now) or a watcher (`?watch=<session id>`: see
   * AccessService.mayWatchRemoteSession), and audits it (`remote.console.attach|watch`, pointing
   * at the session's start entry) before anything is joined. Refusals are audited too.
   */
  private async prepareJoin(mode: 'attach' | 'watch', caller: Caller, url: URL): Promise<JoinPrepared> {
    const event = `remote.console.${mode}`;
    const id = url.searchParams.get(mode) ?? '';
    const parsed = consoleJoinQuery.safeParse(Object.fromEntries(url.searchParams));
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const field = issue.path.map(String).join('.') || 'query';
      return this.refuseJoin(event, id, caller.ip, caller, refusal(400, 'invalid_request', `query.${field}: ${issue.message}`, { field }));
    }
    const session = this.live.get(id);
    const elsewhere = session ? undefined : await this.deps.directory?.find(id).catch(() => undefined);
    // Told only to whom the session concerns (its owner, or who may watch it); others get the 404 below.
    const concerned =
      elsewhere &&
      (elsewhere.user.id === caller.principal.user.id ||
        (
          await this.deps.access.mayWatchRemoteSession(caller.principal, {
            userId: elsewhere.user.id,
            deviceId: elsewhere.deviceId,
            request: elsewhere.request,
          })
        ).allowed);
    if (elsewhere && concerned) {
      // A detached console lives in the broker that holds it: its relay (and PTY channel) is there.
      return this.refuseJoin(
        event,
        id,
        caller.ip,
        caller,
        refusal(
          409,
          'session_on_other_broker',
          `Console session ${id} is held by broker ${elsewhere.broker}: it can only be joined through that broker (the load balancer keeps a browser on one broker; see docs/several-brokers.md).`,
          { broker: elsewhere.broker },
        ),
      );
    }
    // Any console may be watched; only the WebSocket console outlives its connection to be re-attached.
    const joinable = session?.request.action === 'console' && (mode === 'watch' ? isWatchable(session.relay) : session.relay instanceof ConsoleRelay);
    if (!session || !joinable || (session.relay as WatchableRelay).ending || session.withdrawn) {
      return this.refuseJoin(
        event,
        id,
        caller.ip,
        caller,
        refusal(404, 'session_not_found', `Console session ${id} is not running (it ended, or was not re-attached in time); open a new console.`),
      );
    }
    const { principal } = caller;
    const owner = session.caller.principal.user;
    if (mode === 'attach') {
      if (owner.id !== principal.user.id) {
        return this.refuseJoin(
          event,
          id,
          caller.ip,
          caller,
          refusal(
            403,
            'not_your_session',
            'This console belongs to another user: only its owner may re-attach to it (others may watch it, if their roles allow).',
          ),
        );
      }
      const decision = await this.deps.access.decide(principal, 'remote-access:connect', session.deviceId, session.request);
      if (!decision.allowed)
        return this.refuseJoin(event, id, caller.ip, caller, refusal(403, 'forbidden', `Not allowed: ${decision.reason}.`, { device_id: session.deviceId }));
    } else {
      const decision = await this.deps.access.mayWatchRemoteSession(principal, { userId: owner.id, deviceId: session.deviceId, request: session.request });
      if (!decision.allowed)
        return this.refuseJoin(event, id, caller.ip, caller, refusal(403, 'forbidden', `Not allowed: ${decision.reason}.`, { device_id: session.deviceId }));
    }
    try {
      await this.deps.audit.recordRemoteJoin({
        event,
        startId: session.auditId,
        user: principal.user,
        deviceId: session.deviceId,
        options: { session: id, owner: owner.email },
        allowed: true,
        reason: mode === 'attach' ? 're-attached by its owner' : `watching ${owner.email}'s console, read-only`,
        ip: caller.ip,
        source: caller.source,
        sessionId: principal.sessionId,
      });
    } catch (err) {
      this.log.error({ err, session: id }, 'console join not audited: refused');
      return refusal(500, 'audit_failed', 'The attempt could not be written to the audit log, so it was refused. Try again shortly.');
    }
    return { ok: true, mode, sessionId: id, caller, size: { cols: parsed.data.cols, rows: parsed.data.rows } };
  }

  /** A refused re-attach or watch, audited as denied (pointing at the session when there is one). */
  private async refuseJoin(event: string, id: string, ip: string, caller: Caller | undefined, answer: Refusal): Promise<Refusal> {
    const session = this.live.get(id);
    try {
      await this.deps.audit.recordRemoteJoin({
        event,
        startId: session?.auditId,
        user: caller?.principal.user,
        deviceId: session?.deviceId ?? '',
        options: { session: bounded(id, 64) },
        allowed: false,
        reason: `${answer.frame.error}: ${answer.frame.message}`,
        ip,
        source: caller?.source ?? 'web',
        sessionId: caller?.principal.sessionId,
      });
    } catch (err) {
      this.log.error({ err }, 'refused console join not audited');
    }
    return answer;
  }

  /**
   * An attempt refused before it could be decided (no or bad token, spent ticket, bad query) is an
   * attempt too: audited as denied with what can be told of it, bounded, and never the credentials.
   */
  private async refuseEarly(kind: RemoteKind, url: URL, ip: string, caller: Caller | undefined, answer: Refusal): Promise<Refusal> {
    const options: Record<string, string> = {};
    for (const [name, value] of [...url.searchParams].slice(0, 10)) {
      if (!CREDENTIAL_PARAMS.has(name.toLowerCase())) options[bounded(name, 40)] = bounded(value, 200);
    }
    try {
      await this.deps.audit.recordRemoteStart({
        event: `remote.${kind}`,
        user: caller?.principal.user,
        deviceId: url.searchParams.get('device_id') ?? '',
        action: kind,
        options,
        allowed: false,
        reason: `${answer.frame.error}: ${answer.frame.message}`,
        ip,
        source: caller?.source ?? (url.searchParams.has('ticket') ? 'web' : 'api'),
        sessionId: caller?.principal.sessionId,
      });
    } catch (err) {
      this.log.error({ err, kind }, 'refused remote-access attempt not audited');
    }
    return answer;
  }

  private describe(kind: RemoteKind, query: unknown): { request: RemoteRequest; params: ChannelParams; options: Record<string, unknown> } {
    if (kind === 'console') {
      const q = query as ConsoleQuery;
      const user = q.user === undefined ? {} : { user: q.user };
      const command = q.command === undefined ? {} : { command: q.command };
      return {
        request: { action: 'console', ...user },
        params: { cols: q.cols, rows: q.rows, ...user, ...command },
        options: { cols: q.cols, rows: q.rows, ...user, ...command },
      };
    }
    if (kind === 'tunnel') {
      const q = query as TunnelQuery;
      const request: RemoteRequest = { action: 'tunnel', proto: q.proto, port: q.port, dst: q.dst };
      return { request, params: { proto: q.proto, port: q.port, dst: q.dst }, options: auditOptions(request) };
    }
    const q = query as CopyQuery;
    const path = normalizeDevicePath(q.path) ?? q.path;
    const request: RemoteRequest = { action: 'copy', direction: q.direction, path: q.path };
    const archive = q.format === 'tar.gz';
    const mode = q.mode !== undefined && !archive && q.direction === 'upload' ? { mode: q.mode } : {};
    return {
      request,
      params: {
        direction: q.direction,
        path,
        ...(!archive && q.size !== undefined ? { size: q.size } : {}),
        ...(!archive && q.sha256 ? { sha256: q.sha256 } : {}),
        ...(archive ? { format: 'tar.gz' as const } : {}),
        ...mode,
      },
      options: auditOptions(request, {
        ...(path !== q.path ? { normalized_path: path } : {}),
        ...(!archive && q.size !== undefined ? { size: q.size } : {}),
        ...(!archive && q.sha256 ? { sha256: q.sha256 } : {}),
        ...(archive ? { format: 'tar.gz' } : {}),
        ...(mode.mode !== undefined ? { mode: `0${mode.mode.toString(8).padStart(3, '0')}` } : {}),
      }),
    };
  }

  /**
   * The heart of every attempt: decide, audit (allowed or denied) before anything starts, then
   * open the channel. A failed audit write refuses the session.
   */
  async authorizeAndOpen(
    caller: Caller,
    kind: RemoteKind,
    deviceId: string,
    request: RemoteRequest,
    params: ChannelParams,
    options: Record<string, unknown>,
  ): Promise<Prepared> {
    const { principal } = caller;
    const decision = await this.deps.access.decide(principal, 'remote-access:connect', deviceId, request);
    const sessionId = crypto.randomUUID();
    let recorder: ConsoleRecorder | undefined;
    let recordingFailure: string | undefined;
    if (kind === 'console' && request.action === 'console' && decision.allowed && decision.device) {
      const mode = this.deps.access.consoleRecording(principal, decision.device, request);
      if (mode !== 'off') {
        const size = params as { cols: number; rows: number };
        try {
          recorder = ConsoleRecorder.open(this.deps.config.dataDir, sessionId, size, { title: `console on ${deviceId}` }, this.log, mode === 'required');
          options = { ...options, recording: sessionId };
        } catch (err) {
          this.log.error({ err, deviceId }, 'console recording could not be started');
          // Fail closed: a console whose recording is required does not run unrecorded.
          if (mode === 'required') recordingFailure = `its recording is required and could not be written (${(err as NodeJS.ErrnoException).code ?? 'error'})`;
        }
      }
    }
    let auditId: number;
    try {
      auditId = await this.deps.audit.recordRemoteStart({
        event: `remote.${request.action}`,
        user: principal.user,
        deviceId,
        action: request.action,
        options,
        allowed: decision.allowed && !recordingFailure,
        reason: recordingFailure ?? decision.reason,
        ip: caller.ip,
        source: caller.source,
        sessionId: principal.sessionId,
      });
    } catch (err) {
      void recorder?.close();
      this.log.error({ err, deviceId }, 'remote-access attempt not audited: refused');
      return refusal(500, 'audit_failed', 'The attempt could not be written to the audit log, so the session was refused. Try again shortly.');
    }
    const startedAt = Date.now();
    if (recordingFailure) {
      return refusal(503, 'recording_unavailable', `The console was refused: ${recordingFailure}. Ask an administrator to check the broker's disk.`, {
        device_id: deviceId,
      });
    }
    // From here every refusal ends the recording that was started.
    const result = await this.open(caller, kind, deviceId, request, params, decision, auditId, startedAt, sessionId, recorder);
    if (!result.ok) void recorder?.close();
    return result;
  }

  private async open(
    caller: Caller,
    kind: RemoteKind,
    deviceId: string,
    request: RemoteRequest,
    params: ChannelParams,
    decision: AccessDecision,
    auditId: number,
    startedAt: number,
    sessionId: string,
    recorder: ConsoleRecorder | undefined,
  ): Promise<Prepared> {
    const { principal } = caller;
    if (!decision.allowed) {
      if (decision.code === 'no_such_device') return refusal(404, 'not_found', `Device ${deviceId} was not found.`);
      return refusal(403, 'forbidden', `Not allowed: ${decision.reason}.`, { permission: 'remote-access:connect', device_id: deviceId });
    }
    if (!this.locator.isConnected(deviceId)) {
      await this.finish(auditId, startedAt, { bytesIn: 0, bytesOut: 0, reason: 'device not connected', result: 'error' });
      return refusal(404, 'device_not_connected', `Device ${deviceId} is not connected to the broker; try again when it is online.`, { device_id: deviceId });
    }
    if (kind === 'copy' && decision.device) {
      const allowed = this.deps.access.copyRoots(principal, decision.device, request);
      if (allowed) (params as { allowed?: string[] }).allowed = allowed;
    }
    let opened: { channel: Channel; info: Record<string, unknown> };
    try {
      opened = await this.locator.open(deviceId, kind, params);
    } catch (err) {
      const message = (err as Error).message;
      // The agent's refusal code (shared/codes.ts) says what happened; its sentence goes to the user.
      // A device's own access refusal (a copy path escaping its roots through a symlink) is a denial.
      const code = refusalCodeOf(err);
      const denied = isAccessRefusal(code);
      await this.finish(auditId, startedAt, { bytesIn: 0, bytesOut: 0, reason: `refused by the device: ${message}`, result: denied ? 'denied' : 'error' });
      if (denied) return refusal(403, 'forbidden', message, { device_id: deviceId, refusal: code });
      if ((err as { code?: string }).code === 'agent_not_connected') {
        return refusal(404, 'device_not_connected', `Device ${deviceId} is not connected to the broker; try again when it is online.`, { device_id: deviceId });
      }
      return refusal(502, 'device_refused', message, { device_id: deviceId, ...(code ? { refusal: code } : {}) });
    }
    if (kind === 'console' && (params as { command?: string[] }).command && opened.info.command !== true) {
      // An older agent would open a shell in place of the command: never that.
      opened.channel.destroy();
      const message = 'The agent on this device cannot run a command in a console; update it, or open a console without a command.';
      await this.finish(auditId, startedAt, { bytesIn: 0, bytesOut: 0, reason: `refused by the device: ${message}`, result: 'error' });
      return refusal(502, 'device_refused', message, { device_id: deviceId });
    }
    const relayOptions: RelayOptions = {
      kind,
      info: opened.info,
      ...(kind === 'console' ? { size: params as { cols: number; rows: number } } : {}),
      ...(kind === 'copy' ? { direction: (params as { direction: 'upload' | 'download' }).direction } : {}),
      ...(recorder ? { recorder } : {}),
    };
    return { ok: true, caller, deviceId, request, channel: opened.channel, relayOptions, auditId, startedAt, sessionId, recorder };
  }

  /**
   * Re-authorizes every live session: the user still active and signed in, the device still
   * there, a grant still allowing the request. Sessions of one token share one authentication.
   */
  async recheck(): Promise<void> {
    if (this.rechecking || this.live.size === 0) return;
    this.rechecking = true;
    try {
      const principals = new Map<string, Promise<Principal | Error>>();
      for (const session of [...this.live.values()]) {
        if (session.withdrawn) continue;
        let principal = principals.get(session.caller.token);
        if (!principal) {
          principal = this.deps.auth.authenticate(session.caller.token, { allowExpired: true }).catch((err: Error) => err);
          principals.set(session.caller.token, principal);
        }
        const who = await principal;
        if (who instanceof Error) {
          // Only a refusal withdraws access: a database that cannot answer for now ends no session.
          if (isRefusal(who)) this.withdraw(session, who.message);
          else this.log.warn({ err: who, deviceId: session.deviceId }, 'remote session not re-checked: its user could not be loaded');
          continue;
        }
        const decision = await this.deps.access.decide(who, 'remote-access:connect', session.deviceId, session.request);
        if (!decision.allowed) this.withdraw(session, decision.reason);
        else if (isWatchable(session.relay)) await this.recheckWatchers(session, session.relay);
      }
    } catch (err) {
      this.log.error({ err }, 'live remote sessions could not be re-checked');
    } finally {
      this.rechecking = false;
    }
  }

  /** Watchers are re-authorized with their session: one whose grant is gone is cut, the console runs on. */
  private async recheckWatchers(session: LiveSession, relay: WatchableRelay): Promise<void> {
    session.watchedBy = session.watchedBy.filter((c) => relay.watching.some((w) => w.user.id === c.principal.user.id));
    for (const watcher of session.watchedBy) {
      let allowed: boolean;
      let reason = 'signed out';
      try {
        const who = await this.deps.auth.authenticate(watcher.token, { allowExpired: true });
        const decision = await this.deps.access.mayWatchRemoteSession(who, {
          userId: session.caller.principal.user.id,
          deviceId: session.deviceId,
          request: session.request,
        });
        allowed = decision.allowed;
        reason = decision.reason;
      } catch (err) {
        if (!isRefusal(err)) {
          this.log.warn({ err, deviceId: session.deviceId }, 'session watcher not re-checked: its user could not be loaded');
          continue;
        }
        allowed = false;
        reason = err.message;
      }
      if (!allowed)
        relay.dropWatcher(
          watcher.principal.user.id,
          errorFrame(403, 'access_withdrawn', `Access withdrawn: ${reason.replace(/\.$/, '')}.`),
          SessionClose.forbidden,
        );
    }
  }

  private withdraw(session: LiveSession, reason: string): void {
    if (session.withdrawn) return;
    // The relay's end removes the session and writes the end record with this reason.
    session.withdrawn = true;
    const why = reason.replace(/\.$/, '');
    this.log.info({ deviceId: session.deviceId, user: session.caller.principal.user.id, reason: why }, 'remote session ended: access withdrawn');
    session.relay.abort(
      errorFrame(403, 'access_withdrawn', `Your access was withdrawn: ${why}.`, { reason: why.slice(0, MAX_END_REASON) }),
      SessionClose.forbidden,
      `access withdrawn: ${why}`,
    );
  }
}

/** An authentication that failed because the caller is no longer allowed, not because the database could not answer. */
function isRefusal(err: unknown): err is ApiError {
  return err instanceof ApiError && err.status >= 400 && err.status < 500;
}
