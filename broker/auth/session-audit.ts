import { bounded } from '../audit/service.js';
import type { Services } from '../services.js';

/**
 * A session started or a token issued is an audit entry (`session.login`, `session.refresh`,
 * `session.device_code`): who (read back from the token just issued), from where, with which
 * program, and how. Never the token, the refresh token or the password. The entry is written
 * on its own, after the token was made: if it cannot be written the failure is logged and the
 * sign-in goes on (the audit trail not growing stops nothing else).
 */
export async function auditIssued(
  ctx: { services: Pick<Services, 'auth' | 'audit' | 'logger'>; ip: string; userAgent: string },
  token: string,
  entry: { event: string; action: string; options: Record<string, unknown> },
): Promise<void> {
  try {
    const principal = await ctx.services.auth.authenticate(token);
    await ctx.services.audit.recordChange({
      event: entry.event,
      user: principal.user,
      action: entry.action,
      options: { ...entry.options, user_agent: bounded(ctx.userAgent, 200) },
      ip: ctx.ip,
      sessionId: principal.sessionId,
    });
  } catch (err) {
    ctx.services.logger.error({ err, event: entry.event }, 'issued token not audited');
  }
}
