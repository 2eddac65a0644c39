import { z } from 'zod';
import { defineRoute, type HandlerContext, type RouteSpec } from '../http/route.js';
import { passwordRoutes, type PasswordRouteDeps } from './password-routes.js';
import { profileRoutes, type ProfileRouteDeps } from './profile-routes.js';
import type { IssuedSession, AuthService } from './service.js';
import { subjectRecords } from '../audit/subjects.js';
import { TWO_FACTOR_POLICY_KEY } from './two-factor.js';
import { auditIssued, type IssuedTokenAudit } from './session-audit.js';
import type { Db } from '../db/database.js';
import type { UsersService } from '../users/service.js';

export const REFRESH_COOKIE = 'fleet_refresh';
/**
 * The name qbee's clients keep the refresh token under: qbee-cli stores this cookie from the
 * login answer and sends it back to POST /api/v2/refresh-jwt when its token expires.
 */
export const QBEE_REFRESH_COOKIE = 'PHPSESSID';
/** The refresh cookie goes only to the API (POST /api/v2/refresh-jwt). */
const REFRESH_COOKIE_PATH = '/api/v2';

const tokenResponse = z.object({ token: z.string().describe('JWT for Authorization: Bearer <token>') });
const challengeResponse = z.object({ challenge: z.string().describe('opaque; send it to challenge-verify with the code') });
const provider = z.enum(['email', 'google']);

/** Answers a started session: the token in the body, the refresh token in an HttpOnly cookie. */
function issue(session: IssuedSession, setCookie: HandlerContext<unknown, unknown, unknown, unknown>['setCookie']) {
  for (const name of [REFRESH_COOKIE, QBEE_REFRESH_COOKIE]) {
    setCookie(name, session.refreshToken, { maxAgeSeconds: session.refreshMaxAgeSeconds, path: REFRESH_COOKIE_PATH });
  }
  return { token: session.token };
}

const verifyBody = z.object({
  challenge: z.string().min(1).max(200).describe('the challenge from challenge-get'),
  code: z
    .string()
    .min(1)
    .max(20)
    .describe('the 6-digit code from the mail or the authenticator app; with the `google` provider, a recovery code (xxxx-xxxx-xxxx-xxxx) instead'),
});
const verifyResponse = tokenResponse.extend({
  recovery_codes_left: z.number().int().min(0).optional().describe('present when a recovery code was used: how many unused ones remain'),
});

const VERIFY_DESCRIPTION =
  'Third step of a sign-in with a second factor: the challenge returned by challenge-get and the code (mailed, or shown by the authenticator app). ' +
  'Answers 200 {token} and sets the refresh cookie, like login. A wrong code answers 401 `invalid_code` with `attempts_left`; ' +
  'a challenge survives 5 wrong codes, then answers 429 `too_many_attempts`. Challenges expire after 5 minutes (401 `challenge_expired`) and work once (401 `challenge_used`). ' +
  'An authenticator code is accepted once (401 `code_already_used`). Wrong codes are also limited per user across challenges (429 with Retry-After). ' +
  'With the `google` provider a recovery code of the user (issued by POST /api/v2/profile/totp/confirm or /profile/totp/recovery-codes) is accepted in place of an app code, once; ' +
  'the answer then carries `recovery_codes_left`, and the `session.login` audit entry says `method: password+recovery_code` with `recovery_codes_left`. ' +
  "A wrong, used or another user's recovery code answers like a wrong code and counts toward the same limits.";

/** Served twice: under /api/v2 and, as the specification places it, at the root. */
function verifyRoute(absolute: boolean): RouteSpec<SessionRouteDeps> {
  return defineRoute({
    method: 'post',
    path: '/challenge-verify',
    absolute,
    tag: 'session',
    summary: absolute ? 'Verify a second-factor code (root path, same as /api/v2/challenge-verify)' : 'Verify a second-factor code and receive the token',
    description: VERIFY_DESCRIPTION,
    access: 'public',
    audit: false,
    body: verifyBody,
    response: verifyResponse,
    handler: async (ctx) => {
      const { body, deps, ip, userAgent, setCookie } = ctx;
      const session = await deps.auth.verifyCode(body.challenge, body.code, ip, userAgent);
      const answer = issue(session, setCookie);
      const left = session.recoveryCodesLeft;
      await auditIssued(ctx, answer.token, {
        event: 'session.login',
        action: `POST ${absolute ? '' : '/api/v2'}/challenge-verify`,
        options: left === undefined ? { method: 'password+second_factor' } : { method: 'password+recovery_code', recovery_codes_left: left },
      });
      return left === undefined ? answer : { ...answer, recovery_codes_left: left };
    },
  });
}

const twoFactorPolicy = z.object({ enabled: z.boolean().describe('whether sign-in asks every user without an override for a second factor') });

/**
 * What the session routes use: authentication, the account's second-factor policy (set through the
 * users service), what audits an issued token, and `db` for the policy's audit subject.
 */
export interface SessionRouteDeps extends IssuedTokenAudit {
  auth: AuthService;
  users: Pick<UsersService, 'setTwoFactorPolicy'>;
  db: Db;
}

export const sessionRoutes: RouteSpec<SessionRouteDeps>[] = [
  defineRoute({
    method: 'post',
    path: '/login',
    tag: 'session',
    summary: 'Sign in with email and password',
    description:
      'Answers 200 {token}. When a second factor applies to the user (the account policy, or the user\'s override): 401 {"code":401,"error":"2fa_required","message",' +
      '"challenge","providers":["email","google"?]}; continue with POST /api/v2/challenge-get and POST /api/v2/challenge-verify. ' +
      'Other failures: 401 `invalid_credentials` (also for an unknown email and for a user who has not set a password yet, so the answer does not tell which accounts exist), 401 `user_disabled`. ' +
      'Rate-limited (429 with Retry-After): 10 attempts per account and address, 50 per address, and 100 per account across addresses past which only the address of the last sign-in gets through, each in 15 min. ' +
      'Also sets an HttpOnly refresh cookie for POST /api/v2/refresh-jwt.',
    access: 'public',
    audit: false,
    body: z.object({ email: z.string().min(3).max(254), password: z.string().min(1).max(1024) }),
    response: tokenResponse,
    handler: async (ctx) => {
      const { body, deps, ip, userAgent, setCookie } = ctx;
      const answer = issue(await deps.auth.login(body.email, body.password, ip, userAgent), setCookie);
      await auditIssued(ctx, answer.token, { event: 'session.login', action: 'POST /api/v2/login', options: { method: 'password' } });
      return answer;
    },
  }),
  defineRoute({
    method: 'post',
    path: '/challenge-get',
    tag: 'session',
    summary: 'Choose the second-factor provider for a sign-in challenge',
    description:
      'Second step of a sign-in with a second factor: the challenge from the 401 `2fa_required` answer of login and the provider. ' +
      '`email` mails a 6-digit code to the user; `google` means a code of the authenticator app (TOTP, RFC 6238), available once the user has set one up ' +
      '(otherwise 400 `provider_unavailable`). Answers a new challenge; the given one is spent. Calling it again with the new challenge mails a new code ' +
      '(at most 5 mails per user in 15 min). 503 `mail_failed` when the mail relay fails (the given challenge stays usable).',
    access: 'public',
    audit: false,
    body: z.object({
      challenge: z.string().min(1).max(200).describe('from the login answer (or a previous challenge-get)'),
      preferProvider: provider.describe('email: a code is mailed; google: authenticator app'),
    }),
    response: challengeResponse,
    handler: async ({ body, deps, ip }) => ({ challenge: await deps.auth.requestCode(body.challenge, body.preferProvider, ip) }),
  }),
  verifyRoute(false),
  verifyRoute(true),
  defineRoute({
    method: 'post',
    path: '/refresh-jwt',
    tag: 'session',
    summary: 'Renew the access token',
    description:
      'With the refresh cookie set at login (`fleet_refresh`, or the same token as `PHPSESSID`, the cookie qbee-cli keeps), or a still-valid bearer token. ' +
      'The new JWT is in the Refreshed-Token header and the body. ' +
      '401 `token_revoked` once the session was ended (logout, password change, user disabled or removed).',
    access: 'public',
    audit: false,
    response: tokenResponse,
    handler: async (ctx) => {
      const { deps, cookie, setHeader, bearer } = ctx;
      const token = await deps.auth.refresh({ refreshToken: cookie(REFRESH_COOKIE) ?? cookie(QBEE_REFRESH_COOKIE), bearer });
      await auditIssued(ctx, token, { event: 'session.refresh', action: 'POST /api/v2/refresh-jwt', options: { with: bearer ? 'bearer' : 'refresh_cookie' } });
      setHeader('Refreshed-Token', token);
      return { token };
    },
  }),
  defineRoute({
    method: 'post',
    path: '/logout',
    tag: 'session',
    summary: 'Sign out: revokes this token and its session',
    description: 'Every token of this session, and its refresh cookie, stop working at once. Answers 204.',
    access: 'authenticated',
    audit: false,
    handler: async ({ principal, deps, setCookie }) => {
      await deps.auth.revokeSession(principal.sessionId);
      for (const name of [REFRESH_COOKIE, QBEE_REFRESH_COOKIE]) setCookie(name, '', { maxAgeSeconds: 0, path: REFRESH_COOKIE_PATH });
      return undefined;
    },
  }),
  defineRoute({
    method: 'get',
    path: '/settings/two-factor',
    tag: 'session',
    summary: 'Read the account-wide second-factor policy',
    description: "Off by default. A user's own `two_factor` setting overrides the policy for that user (recommended off for API users of scripts).",
    access: 'users:read',
    response: twoFactorPolicy,
    handler: async ({ deps }) => ({ enabled: await deps.auth.twoFactorPolicy() }),
  }),
  defineRoute({
    method: 'put',
    path: '/settings/two-factor',
    tag: 'session',
    summary: 'Turn the account-wide second-factor policy on or off',
    description:
      'With the policy on, every user without an override must give a second factor at sign-in (a mailed code, or an authenticator app they set up). ' +
      'Existing sessions are not affected. Turning it off needs every permission held by the users who follow it (403 `privilege_escalation` otherwise), as changing their own `two_factor` does.',
    access: 'users:manage',
    audit: 'settings.two_factor',
    subject: (_input, s) => subjectRecords.setting(s.db, TWO_FACTOR_POLICY_KEY),
    body: twoFactorPolicy,
    response: twoFactorPolicy,
    handler: async ({ body, principal, deps }) => ({ enabled: await deps.users.setTwoFactorPolicy(principal, body.enabled) }),
  }),
];

/** What every sign-in, password and profile route uses. */
export type AuthRouteDeps = SessionRouteDeps & PasswordRouteDeps & ProfileRouteDeps;

export const authRoutes: RouteSpec<AuthRouteDeps>[] = [...sessionRoutes, ...passwordRoutes, ...profileRoutes];
