/**
 * The live sessions of this broker: who holds which, listed for the operator's view, and ended on
 * an operator's word or because the cluster ended them elsewhere. The registry only; deciding an
 * attempt is attempt.ts, re-checking the live ones recheck.ts, the WebSocket endpoints sessions.ts.
 */
import type { Logger } from 'pino';
import type WebSocket from 'ws';
import { MAX_END_REASON, MAX_ENDER_EMAIL, MAX_ENDER_NAME } from '../../shared/remote-frames.js';
import type { RemoteRequest } from '../../shared/resources.js';
import type { Principal } from '../access/principal.js';
import { errorFrame, SessionClose, type ErrorFrame } from './relay.js';
import { ConsoleRelay } from './console-relay.js';

/** Who connected: `qbee` is qbee's own clients (qbee-cli) over the native transport (broker/qbee). */
export type RemoteSource = 'api' | 'web' | 'cli' | 'ssh' | 'qbee';

/** Who is asking: the principal as of now, and the token to re-check them with later. */
export interface Caller {
  principal: Principal;
  token: string;
  source: RemoteSource;
  ip: string;
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

/** A session this broker relays. */
export interface LiveSession {
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

/** The live sessions of this broker, by id; several brokers: each one added and removed is told to the directory. */
export class LiveSessions {
  private readonly live = new Map<string, LiveSession>();
  /** Who waits for a session to leave the list (`end`): resolved by `remove`. */
  private readonly leaving = new Map<string, Array<() => void>>();

  constructor(
    private readonly log: Logger,
    private readonly directory?: SessionDirectory,
  ) {}

  get size(): number {
    return this.live.size;
  }

  /** The session itself (for joining and re-checking it), or undefined when it is unknown or has ended. */
  session(id: string): LiveSession | undefined {
    return this.live.get(id);
  }

  /** Every live session itself, as of now. */
  all(): LiveSession[] {
    return [...this.live.values()];
  }

  add(session: LiveSession): void {
    this.live.set(session.id, session);
    this.directory?.added(viewOf(session));
  }

  /** Once its end entry is committed (sessions.ts): a poller of the list and then of the audit sees one or the other. */
  remove(id: string): void {
    this.live.delete(id);
    this.directory?.removed(id);
    for (const resolve of this.leaving.get(id) ?? []) resolve();
    this.leaving.delete(id);
  }

  /** Resolves once the session has left the list (at once when it is not listed). */
  private left(id: string): Promise<void> {
    if (!this.live.has(id)) return Promise.resolve();
    return new Promise((resolve) => this.leaving.set(id, [...(this.leaving.get(id) ?? []), resolve]));
  }

  /** Every live session on this broker; who may see which is decided by the caller (broker/access). */
  list(): LiveSessionView[] {
    return this.all().map(viewOf);
  }

  /** One live session, or undefined when it is unknown or has ended. */
  get(id: string): LiveSessionView | undefined {
    const session = this.live.get(id);
    return session && viewOf(session);
  }

  /**
   * Ends a live session on an operator's word (authorized by the caller): the client gets an
   * error frame `session_ended` naming who ended it and why (`ended_by`, `reason`) and close 4403,
   * and the end entry of the audit trail says the same. Resolves once the session has left the list,
   * its end entry committed, or after a few seconds.
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
    await Promise.race([this.left(id), new Promise((r) => setTimeout(r, 5000).unref())]);
    return true;
  }

  /**
   * Several brokers: the sessions here whose audit another broker ended (it took this one for gone
   * while it was cut off from the database) end here too, their end not written again (the audit
   * writes one end per session). `stillOpen` answers which start entries are still open.
   */
  async endEndedElsewhere(stillOpen: (startIds: number[]) => Promise<Set<number>>): Promise<number> {
    const live = this.all().filter((s) => !s.withdrawn);
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
}

/** A live session as the operator's list shows it. */
function viewOf(s: LiveSession): LiveSessionView {
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
