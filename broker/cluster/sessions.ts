import type { Logger } from 'pino';
import type { Db } from '../db/database.js';
import type { LiveSessionView, RemoteSource, SessionDirectory, SessionEnd } from '../remote/sessions.js';
import type { RemoteRequest } from '../../shared/resources.js';

/** How long an operator's DELETE waits for the holding broker to end the session. */
const END_WAIT_MS = 5000;
const END_POLL_MS = 50;

/** What the live sessions of this broker offer the directory (RemoteSessions, bound late). */
export interface LocalSessions {
  list(): LiveSessionView[];
  end(id: string, end: SessionEnd): Promise<boolean>;
  /** Ends here those whose audit start is no longer open (ended by another broker); see refresh. */
  endEndedElsewhere?(stillOpen: (startIds: number[]) => Promise<Set<number>>): Promise<number>;
}

export interface ClusterSessionsDeps {
  db: Db;
  logger: Logger;
  brokerId: string;
  /** Other brokers taken for alive (their rows are listed; rows of the others are stale). */
  liveBrokers: () => string[];
  /** Asks the broker holding a session to end it (a NOTIFY: ClusterEvent end_session). */
  requestEnd: (broker: string, sessionId: string, end: SessionEnd) => Promise<void>;
}

/** A session of another broker, as read from `live_sessions`. */
export type RemoteLiveSession = LiveSessionView & { broker: string };

function parseJson<T>(text: string, fallback: T): T {
  try {
    return JSON.parse(text) as T;
  } catch {
    return fallback;
  }
}

/**
 * The live remote sessions of every broker, in `live_sessions` (migration 0016): each broker
 * writes a row when one of its sessions starts, refreshes bytes, attached and watchers of all of
 * them on every cluster heartbeat (so another broker's list is at most one heartbeat old) and
 * removes the row at its end. An operator's end of a session held elsewhere goes to its broker as
 * a NOTIFY; that broker ends it as if asked locally (same reason, same audit end).
 */
export class ClusterSessions implements SessionDirectory {
  private local?: LocalSessions;
  private readonly log: Logger;
  /** Writes in order: a session's delete never overtakes its insert. */
  private queue: Promise<void> = Promise.resolve();
  /** The figures last written per session: unchanged ones (an idle tunnel) are not written again. */
  private written = new Map<string, string>();

  constructor(private readonly deps: ClusterSessionsDeps) {
    this.log = deps.logger.child({ module: 'cluster-sessions' });
  }

  bind(local: LocalSessions): void {
    this.local = local;
  }

  private enqueue(write: () => Promise<unknown>): Promise<void> {
    this.queue = this.queue.then(write).then(
      () => undefined,
      (err: unknown) => this.log.warn({ err }, 'live session directory not written'),
    );
    return this.queue;
  }

  private row(s: LiveSessionView, now: number) {
    return {
      session_id: s.id,
      broker_id: this.deps.brokerId,
      user_id: s.user.id,
      user_email: s.user.email,
      device_id: s.deviceId,
      kind: s.kind,
      source: s.source,
      ip: s.ip,
      started_at: s.startedAt,
      bytes_in: s.bytesIn,
      bytes_out: s.bytesOut,
      attached: s.attached === undefined ? null : s.attached ? 1 : 0,
      watchers: JSON.stringify(s.watchers ?? []),
      request: JSON.stringify(s.request),
      updated_at: now,
    };
  }

  added(view: LiveSessionView): void {
    void this.enqueue(() => this.deps.db.insertInto('live_sessions').values(this.row(view, Date.now())).execute());
  }

  removed(id: string): void {
    void this.enqueue(() => this.deps.db.deleteFrom('live_sessions').where('session_id', '=', id).where('broker_id', '=', this.deps.brokerId).execute());
  }

  /**
   * Every heartbeat: sessions here that the other brokers ended meanwhile (they took this broker
   * for gone during a database partition, and wrote their audit end) end here without a second end.
   */
  async reconcile(): Promise<number> {
    return (
      (await this.local?.endEndedElsewhere?.(async (startIds) => {
        const open = new Set<number>();
        for (let i = 0; i < startIds.length; i += 500) {
          const rows = await this.deps.db
            .selectFrom('remote_session_owners')
            .select('audit_id')
            .where('audit_id', 'in', startIds.slice(i, i + 500))
            .where('broker_id', '=', this.deps.brokerId)
            .execute();
          for (const r of rows) open.add(Number(r.audit_id));
        }
        return open;
      })) ?? 0
    );
  }

  /** Every heartbeat: the figures of this broker's sessions that changed (one UPDATE each). */
  async refresh(): Promise<void> {
    const sessions = this.local?.list() ?? [];
    const now = Date.now();
    const seen = new Map<string, string>();
    await this.enqueue(async () => {
      for (const s of sessions) {
        const { bytes_in, bytes_out, attached, watchers } = this.row(s, now);
        const figures = `${bytes_in}/${bytes_out}/${attached}/${watchers}`;
        seen.set(s.id, figures);
        if (this.written.get(s.id) === figures) continue;
        await this.deps.db
          .updateTable('live_sessions')
          .set({ bytes_in, bytes_out, attached, watchers, updated_at: now })
          .where('session_id', '=', s.id)
          .where('broker_id', '=', this.deps.brokerId)
          .execute();
      }
    });
    this.written = seen;
  }

  /** What a gone broker left behind, or (with `startedBefore`) a previous run of this one. */
  async forgetBroker(broker: string, startedBefore?: number): Promise<void> {
    await this.enqueue(() => {
      let query = this.deps.db.deleteFrom('live_sessions').where('broker_id', '=', broker);
      if (startedBefore !== undefined) query = query.where('started_at', '<', startedBefore);
      return query.execute();
    });
  }

  /** Live sessions held by the other live brokers. */
  async elsewhere(): Promise<RemoteLiveSession[]> {
    const others = this.deps.liveBrokers().filter((b) => b !== this.deps.brokerId);
    if (others.length === 0) return [];
    const rows = await this.deps.db.selectFrom('live_sessions').selectAll().where('broker_id', 'in', others).execute();
    return rows.map((r) => ({
      id: r.session_id,
      broker: r.broker_id,
      user: { id: r.user_id, email: r.user_email },
      deviceId: r.device_id,
      kind: r.kind as LiveSessionView['kind'],
      source: r.source as RemoteSource,
      ip: r.ip,
      startedAt: Number(r.started_at),
      bytesIn: Number(r.bytes_in),
      bytesOut: Number(r.bytes_out),
      request: parseJson<RemoteRequest>(r.request, { action: r.kind } as RemoteRequest),
      ...(r.attached === null ? {} : { attached: Number(r.attached) === 1, watchers: parseJson<NonNullable<LiveSessionView['watchers']>>(r.watchers, []) }),
    }));
  }

  /** One session held by another live broker. */
  async find(id: string): Promise<RemoteLiveSession | undefined> {
    return (await this.elsewhere()).find((s) => s.id === id);
  }

  /** Asks the holding broker to end the session, and waits (a few seconds at most) for its row to go. */
  async endElsewhere(session: RemoteLiveSession, end: SessionEnd): Promise<void> {
    await this.deps.requestEnd(session.broker, session.id, end);
    const until = Date.now() + END_WAIT_MS;
    while (Date.now() < until) {
      const row = await this.deps.db.selectFrom('live_sessions').select('session_id').where('session_id', '=', session.id).executeTakeFirst();
      if (!row) return;
      await new Promise((r) => setTimeout(r, END_POLL_MS));
    }
  }

  /** A request of another broker to end one of this broker's sessions. */
  async endHere(id: string, end: SessionEnd): Promise<void> {
    const ended = await this.local?.end(id, end);
    if (!ended) this.log.info({ session: id }, 'end of a session asked for, but it is not live here');
  }
}
