/**
 * Joining a live console rather than opening one: its owner re-attaching (`?attach=<session id>`)
 * or someone watching it read-only (`?watch=<session id>`), decided and audited
 * (`remote.console.attach|watch`, pointing at the session's start entry) before anything is joined.
 * Refusals are audited too. The handshake that follows is sessions.ts's.
 */
import type { Logger } from 'pino';
import type { AccessService } from '../access/access.js';
import type { AuditService } from '../audit/service.js';
import { bounded } from '../audit/service.js';
import { ConsoleRelay } from './console-relay.js';
import { invalidQuery, refusal, type Refusal } from './attempt.js';
import { isWatchable, type Caller, type LiveSessions, type SessionDirectory, type WatchableRelay } from './live-sessions.js';
import { consoleJoinQuery } from './schemas.js';

/** A re-attach or a watcher joining a live console, decided and audited. */
export type JoinPrepared = Refusal | { ok: true; mode: 'attach' | 'watch'; sessionId: string; caller: Caller; size: { cols: number; rows: number } };

/** What deciding a join uses. */
export interface JoinDeps {
  access: Pick<AccessService, 'decide' | 'mayWatchRemoteSession'>;
  audit: Pick<AuditService, 'recordRemoteJoin'>;
  /** Several brokers: where a session held by another broker is found (to say so). */
  directory?: SessionDirectory;
}

/** Re-attaches and watchers of this broker's live consoles (see the file's header). */
export class ConsoleJoins {
  constructor(
    private readonly deps: JoinDeps,
    private readonly live: LiveSessions,
    private readonly log: Logger,
  ) {}

  /**
   * Decides a re-attach (the same user as the console's owner, with a fresh authentication,
   * allowed by their roles now) or a watcher (see AccessService.mayWatchRemoteSession), and audits it.
   */
  async prepare(mode: 'attach' | 'watch', caller: Caller, url: URL): Promise<JoinPrepared> {
    const event = `remote.console.${mode}`;
    const id = url.searchParams.get(mode) ?? '';
    const refuse = (answer: Refusal) => this.refuse(event, id, caller.ip, caller, answer);
    const parsed = consoleJoinQuery.safeParse(Object.fromEntries(url.searchParams));
    if (!parsed.success) return refuse(invalidQuery(parsed.error.issues));
    const session = this.live.session(id);
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
      return refuse(
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
      return refuse(refusal(404, 'session_not_found', `Console session ${id} is not running (it ended, or was not re-attached in time); open a new console.`));
    }
    const { principal } = caller;
    const owner = session.caller.principal.user;
    if (mode === 'attach') {
      if (owner.id !== principal.user.id) {
        return refuse(
          refusal(
            403,
            'not_your_session',
            'This console belongs to another user: only its owner may re-attach to it (others may watch it, if their roles allow).',
          ),
        );
      }
      const decision = await this.deps.access.decide(principal, 'remote-access:connect', session.deviceId, session.request);
      if (!decision.allowed) return refuse(refusal(403, 'forbidden', `Not allowed: ${decision.reason}.`, { device_id: session.deviceId }));
    } else {
      const decision = await this.deps.access.mayWatchRemoteSession(principal, { userId: owner.id, deviceId: session.deviceId, request: session.request });
      if (!decision.allowed) return refuse(refusal(403, 'forbidden', `Not allowed: ${decision.reason}.`, { device_id: session.deviceId }));
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
  async refuse(event: string, id: string, ip: string, caller: Caller | undefined, answer: Refusal): Promise<Refusal> {
    const session = this.live.session(id);
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
}
