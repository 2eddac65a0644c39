/**
 * The live re-check: every live session re-authorized every REMOTE_RECHECK_MS (the user still
 * active and signed in, the device still there, a grant still allowing the request), its watchers
 * with it, and access withdrawn where the answer is no. Only a refusal (isRefusal in broker/errors.ts)
 * withdraws access: a database that cannot answer for now ends no session.
 */
import type { Logger } from 'pino';
import { MAX_END_REASON } from '../../shared/remote-frames.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { AuthService } from '../auth/service.js';
import { isRefusal } from '../errors.js';
import { isWatchable, type LiveSession, type LiveSessions, type WatchableRelay } from './live-sessions.js';
import { errorFrame, SessionClose } from './relay.js';

/** What the re-check uses. */
export interface RecheckDeps {
  auth: Pick<AuthService, 'authenticate'>;
  access: Pick<AccessService, 'decide' | 'mayWatchRemoteSession'>;
}

/** Re-authorizes this broker's live sessions (see the file's header); one pass at a time. */
export class LiveRecheck {
  private running = false;

  constructor(
    private readonly deps: RecheckDeps,
    private readonly live: LiveSessions,
    private readonly log: Logger,
  ) {}

  /** One pass over every live session. Sessions of one token share one authentication. */
  async run(): Promise<void> {
    if (this.running || this.live.size === 0) return;
    this.running = true;
    try {
      const principals = new Map<string, Promise<Principal | Error>>();
      for (const session of this.live.all()) {
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
      this.running = false;
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
