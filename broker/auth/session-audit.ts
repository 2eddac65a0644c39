import { bounded, type AuditService } from '../audit/service.js';
import type { Logger } from 'pino';
import type { AuthService } from './service.js';

/** What auditing an issued token uses: reading the token back, the trail, and the log for a failure. */
export interface IssuedTokenAudit {
  auth: Pick<AuthService, 'authenticate'>;
  audit: Pick<AuditService, 'recordChange'>;
  logger: Pick<Logger, 'error'>;
}

/**
 * A session started or a token issued is an audit entry (`session.login`, `session.refresh`,
 * `session.device_code`): who (read back from the token just issued), from where, with which
 * program, and how. Never the token, the refresh token or the password. The entry is written
 * on its own, after the token was made: if it cannot be written the failure is logged and the
 * sign-in goes on (the audit trail not growing stops nothing else).
 */
export async function auditIssued(
  ctx: { deps: IssuedTokenAudit; ip: string; userAgent: string },
  token: string,
  entry: { event: string; action: string; options: Record<string, unknown> },
): Promise<void> {
  try {
    const principal = await ctx.deps.auth.authenticate(token);
    await ctx.deps.audit.recordChange({
      event: entry.event,
      user: principal.user,
      action: entry.action,
      options: { ...entry.options, user_agent: bounded(ctx.userAgent, 200) },
      ip: ctx.ip,
      sessionId: principal.sessionId,
    });
  } catch (err) {
    ctx.deps.logger.error({ err, event: entry.event }, 'issued token not audited');
  }
}
