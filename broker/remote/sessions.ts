/**
 * Remote-access sessions over WebSocket: every attempt is authenticated, validated, decided by
 * the access service against the caller's roles at that moment, audited before anything starts,
 * and only then relayed to the device's agent. This file is the WebSocket side (the handshake, the
 * relay, the live session taken under watch) and the one object other transports (broker/ssh,
 * broker/qbee) hand theirs to; the jobs behind it have their own files: attempt.ts (decide, audit,
 * open), joins.ts (re-attach and watch), live-sessions.ts (the registry), recheck.ts (the live re-check).
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import WebSocket, { WebSocketServer } from 'ws';
import type { ChannelParams, RemoteKind } from '../../shared/protocol.js';
import type { RemoteRequest } from '../../shared/resources.js';
import type { AccessService } from '../access/access.js';
import type { AgentLocator } from '../agents/locator.js';
import type { AuditService } from '../audit/service.js';
import type { AuthService } from '../auth/service.js';
import type { Authenticated } from '../auth/credentials.js';
import type { Config } from '../environment.js';
import { DomainError } from '../errors.js';
import type { UpgradeAttempt } from '../http/upgrade.js';
import { errorFrame, refuse, Relay, SessionClose } from './relay.js';
import { ConsoleRelay } from './console-relay.js';
import { Attempts, fromDomainError, refusal, type Prepared, type SessionOutcome } from './attempt.js';
import { ConsoleJoins, type JoinPrepared } from './joins.js';
import {
  isWatchable,
  LiveSessions,
  type Caller,
  type LiveRelay,
  type LiveSessionView,
  type RemoteSource,
  type SessionDirectory,
  type SessionEnd,
} from './live-sessions.js';
import { LiveRecheck } from './recheck.js';
import type { ConsoleRecorder } from './recordings.js';
import { quietRepeatedEnds } from '../../shared/ws-ends.js';

export type { Prepared, Refusal } from './attempt.js';
export type { Caller, LiveRelay, LiveSessionView, RemoteSource, SessionDirectory, SessionEnd, WatchableRelay } from './live-sessions.js';
export { isWatchable } from './live-sessions.js';

/** Largest frame a client may send (clients chunk their uploads well below this). */
const MAX_CLIENT_FRAME = 4 * 1024 * 1024;
/** On shutdown, how long the live sessions' relays have to end. */
export const SHUTDOWN_RELAYS_MS = 2000;
/** Then how long their recordings have to write what they hold (a stuck disk does not hold the shutdown). */
export const SHUTDOWN_RECORDINGS_MS = 2000;

/** Waits for `work`, at most `ms`. */
function atMost(work: Promise<unknown>, ms: number): Promise<unknown> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([work, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]).finally(() => clearTimeout(timer));
}

/** What remote sessions use: agents are reached only through the AgentLocator. */
export interface RemoteSessionsDeps {
  config: Pick<Config, 'trustProxy' | 'dataDir' | 'consoleDetachGraceSeconds' | 'remoteRecheckMs'>;
  logger: Logger;
  auth: Pick<AuthService, 'authenticate'>;
  access: Pick<AccessService, 'decide' | 'copyRoots' | 'consoleRecording' | 'mayWatchRemoteSession'>;
  audit: Pick<AuditService, 'recordRemoteStart' | 'recordRemoteEnd' | 'recordRemoteJoin' | 'recordRefusedAttempt'>;
  locator: AgentLocator;
  /** Several brokers: where the sessions of every broker are listed (broker/cluster/sessions.ts). */
  directory?: SessionDirectory;
}

/** The WebSocket endpoints of remote access, and the live sessions of every transport (see the file's header). */
export class RemoteSessions {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_CLIENT_FRAME, perMessageDeflate: false });
  private readonly live: LiveSessions;
  private readonly attempts: Attempts;
  private readonly joins: ConsoleJoins;
  private readonly rechecks: LiveRecheck;
  private readonly log: Logger;
  private recheckTimer?: NodeJS.Timeout;
  private closing = false;
  /** The recordings of adopted sessions, until closed: shutdown closes those whose relay did not end in time. */
  private readonly recorders = new Set<ConsoleRecorder>();

  constructor(private readonly deps: RemoteSessionsDeps) {
    this.log = deps.logger.child({ module: 'remote' });
    this.live = new LiveSessions(this.log, deps.directory);
    this.attempts = new Attempts(deps, this.log);
    this.joins = new ConsoleJoins(deps, this.live, this.log);
    this.rechecks = new LiveRecheck(deps, this.live, this.log);
  }

  init(): void {
    this.recheckTimer = setInterval(() => void this.recheck(), this.deps.config.remoteRecheckMs);
    this.recheckTimer.unref();
  }

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.recheckTimer);
    const ending = this.live.all().map((session) => {
      session.relay.abort(errorFrame(503, 'shutting_down', 'The broker is shutting down; reconnect shortly.'), SessionClose.goingAway, 'broker shut down');
      return session.relay.done;
    });
    await atMost(Promise.all(ending), SHUTDOWN_RELAYS_MS);
    // A relay that did not end in time never closes its recording: what the recording holds (a batch
    // of output, writes queued to the file) is written here, and the recordings of the relays that
    // ended are waited for too, before the process may exit.
    await atMost(Promise.all([...this.recorders].map((recorder) => recorder.close())), SHUTDOWN_RECORDINGS_MS);
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

  /** No or bad token, a spent ticket (unauthenticated): audited as a denied attempt and told on the socket. */
  async refused(kind: RemoteKind, attempt: UpgradeAttempt, err: unknown): Promise<void> {
    const { req, socket, head, url } = attempt;
    const ip = this.clientIp(req);
    const joining = this.joiningOf(kind, url);
    if (joining) {
      let prepared: JoinPrepared;
      if (err instanceof DomainError)
        prepared = await this.joins.refuse(`remote.console.${joining}`, url.searchParams.get(joining) ?? '', ip, undefined, fromDomainError(err));
      else {
        this.log.error({ err }, 'console join failed');
        prepared = refusal(500, 'internal_error', 'The broker failed to join the console; the error is logged.');
      }
      return this.completeJoin(prepared, req, socket, head);
    }
    let prepared: Prepared;
    if (err instanceof DomainError) prepared = await this.attempts.refuseEarly(kind, url, ip, undefined, fromDomainError(err));
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
      void this.joins
        .prepare(joining, caller, url)
        .catch((err): JoinPrepared => {
          this.log.error({ err }, 'console join failed');
          return refusal(500, 'internal_error', 'The broker failed to join the console; the error is logged.');
        })
        .then((prepared) => this.completeJoin(prepared, req, socket, head));
      return;
    }
    void this.attempts
      .prepare(kind, caller, url)
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
      // The handshake's answer and the first frame (`ready`, or the refusal and its close) leave in
      // one write: ws writes the 101 and then each frame, one system call each, waking the client twice.
      socket.cork();
      try {
        this.wss.handleUpgrade(req, socket, head, (ws) => {
          upgraded = true;
          quietRepeatedEnds(ws);
          if (!prepared.ok) return refuse(ws, prepared.frame, prepared.code);
          this.relay(ws, prepared);
        });
      } finally {
        if (!socket.destroyed) socket.uncork();
      }
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
      quietRepeatedEnds(ws);
      if (!prepared.ok) return refuse(ws, prepared.frame, prepared.code);
      const session = this.live.session(prepared.sessionId);
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
    this.live.add({
      id,
      caller: prepared.caller,
      deviceId: prepared.deviceId,
      request: prepared.request,
      relay,
      startedAt: prepared.startedAt,
      auditId: prepared.auditId,
      watchedBy: [],
    });
    const { recorder } = prepared;
    if (recorder) {
      this.recorders.add(recorder);
      void recorder.finished.then(() => this.recorders.delete(recorder));
      // A required recording that cannot keep up (or be written) ends the session rather than let it run unrecorded.
      recorder.overflow = () =>
        relay.abort(
          errorFrame(503, 'recording_failed', 'The session could not be recorded, and its recording is required: it was ended.'),
          SessionClose.internal,
          'required recording could not be written',
        );
    }
    // Listed until its end entry is committed: whoever reads the list and then the audit trail sees the session or its end.
    void relay.done.then(async (end) => {
      try {
        await recorder?.close();
        await this.finish(prepared.auditId, prepared.startedAt, { ...end, result: end.failed ? 'error' : 'ended' });
      } finally {
        this.live.remove(id);
      }
    });
    return id;
  }

  /** Every live session on this broker; who may see which is decided by the caller (broker/access). */
  list(): LiveSessionView[] {
    return this.live.list();
  }

  /** One live session, or undefined when it is unknown or has ended. */
  get(id: string): LiveSessionView | undefined {
    return this.live.get(id);
  }

  /** Ends a live session on an operator's word (see LiveSessions.end). */
  end(id: string, end: SessionEnd): Promise<boolean> {
    return this.live.end(id, end);
  }

  /** Several brokers: ends here the sessions the cluster ended elsewhere (see LiveSessions.endEndedElsewhere). */
  endEndedElsewhere(stillOpen: (startIds: number[]) => Promise<Set<number>>): Promise<number> {
    return this.live.endEndedElsewhere(stillOpen);
  }

  /** Audits the end of a session that was audited as started. */
  finish(auditId: number, startedAt: number, end: SessionOutcome): Promise<void> {
    return this.attempts.finish(auditId, startedAt, end);
  }

  /**
   * The heart of every attempt: decide, audit (allowed or denied) before anything starts, then
   * open the channel. A failed audit write refuses the session (see attempt.ts).
   */
  authorizeAndOpen(
    caller: Caller,
    kind: RemoteKind,
    deviceId: string,
    request: RemoteRequest,
    params: ChannelParams,
    options: Record<string, unknown>,
  ): Promise<Prepared> {
    return this.attempts.authorizeAndOpen(caller, kind, deviceId, request, params, options);
  }

  /** Re-authorizes every live session and its watchers now (see recheck.ts); one pass at a time. */
  recheck(): Promise<void> {
    return this.rechecks.run();
  }
}
