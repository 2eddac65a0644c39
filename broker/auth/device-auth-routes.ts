import { z } from 'zod';
import type { PendingSignIn } from '../../shared/api-types.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { DEVICE_CODE_INTERVAL_SECONDS, DEVICE_CODE_TTL_SECONDS, type DeviceAuthService } from './device-auth.js';
import { auditIssued, type IssuedTokenAudit } from './session-audit.js';

const TAG = 'session';
const GRANT = 'urn:ietf:params:oauth:grant-type:device_code';
const userCode = z.string().min(1).max(16).describe('The code the client shows, e.g. "BCDF-GHJK" (case and dash do not matter)');

/**
 * RFC 8628 for command-line clients (qbee-cli `login` without a user name, `fleet login` without
 * --email). The two OAuth endpoints sit outside /api/v2 where qbee's clients call them.
 */
/** What the device authorization routes use: the service, and what audits an issued token. */
export interface DeviceAuthRouteDeps extends IssuedTokenAudit {
  deviceAuth: DeviceAuthService;
}

export const deviceAuthRoutes: RouteSpec<DeviceAuthRouteDeps>[] = [
  defineRoute({
    method: 'post',
    path: '/oauth2/devicecode',
    absolute: true,
    tag: TAG,
    summary: 'Start a CLI sign-in (OAuth 2.0 device authorization)',
    description:
      'Answers `{device_code, user_code, verification_uri, verification_uri_complete, expires_in, interval, client_ip, user_agent}` (RFC 8628 §3.2). ' +
      `Show \`user_code\` to the user, who approves it at \`verification_uri\` (the console page /cli-login) while signed in; meanwhile poll POST /oauth2/token every \`interval\` (${DEVICE_CODE_INTERVAL_SECONDS}) seconds. ` +
      `Codes expire after ${DEVICE_CODE_TTL_SECONDS} seconds. At most 10 requests per address (1000 in all) wait at once: beyond, 429. The body is empty or a form.`,
    access: 'public',
    audit: false,
    form: true,
    body: z.object({
      client_id: z.string().max(200).optional().describe('Accepted and ignored'),
      scope: z.string().max(200).optional().describe('Accepted and ignored'),
    }),
    response: z.object({
      device_code: z.string(),
      user_code: z.string(),
      verification_uri: z.string(),
      verification_uri_complete: z.string(),
      expires_in: z.number().int(),
      interval: z.number().int(),
      client_ip: z.string(),
      user_agent: z.string(),
    }),
    handler: async ({ deps, ip, userAgent }) => deps.deviceAuth.start(ip, userAgent),
  }),
  defineRoute({
    method: 'post',
    path: '/oauth2/token',
    absolute: true,
    tag: TAG,
    summary: 'Collect the tokens of an approved CLI sign-in',
    description:
      `Form \`grant_type=${GRANT}&device_code=...\` (RFC 8628 §3.4). Once approved: \`{access_token, token_type: "Bearer", expires_in, refresh_token}\` — ` +
      'a new session of the approving user, renewed with POST /api/v2/refresh-jwt and the refresh token as the `PHPSESSID` or `fleet_refresh` cookie. ' +
      'Before: 400 with `error` `authorization_pending` (poll again), `authorization_declined`, `expired_token` or `bad_verification_code` (unknown or used code). ' +
      'The device code works once.',
    access: 'public',
    audit: false,
    form: true,
    body: z.object({
      grant_type: z.literal(GRANT),
      device_code: z.string().min(1).max(200),
      client_id: z.string().max(200).optional().describe('Accepted and ignored'),
    }),
    response: z.object({ access_token: z.string(), token_type: z.literal('Bearer'), expires_in: z.number().int(), refresh_token: z.string() }),
    handler: async (ctx) => {
      const { body, deps, ip, userAgent } = ctx;
      const tokens = await deps.deviceAuth.token(body.device_code, ip, userAgent);
      // A new session of the approving user: an entry of theirs (the approval is one too, auth.device_code.approve).
      await auditIssued(ctx, tokens.access_token, { event: 'session.device_code', action: 'POST /oauth2/token', options: { method: 'device_code' } });
      return tokens;
    },
  }),
  defineRoute({
    method: 'get',
    path: '/oauth2/device-auth/{user_code}',
    tag: TAG,
    summary: 'Look up a pending CLI sign-in',
    description:
      '`{user_code, client_ip, user_agent, expires_in}` of the request, for the user to check before approving. The first signed-in user to enter a code claims it: ' +
      "from then on only they may look it up, approve or decline it. 404 for an unknown or expired code and for another user's code alike. " +
      'Look-ups, approvals and declines are limited to 20 per user and 60 per address in 15 minutes (429 with Retry-After).',
    access: 'authenticated',
    params: z.object({ user_code: userCode }),
    response: z.object({
      user_code: z.string(),
      client_ip: z.string(),
      user_agent: z.string(),
      expires_in: z.number().int(),
    }) satisfies z.ZodType<PendingSignIn>,
    handler: async ({ params, deps, principal, ip }) => deps.deviceAuth.describe(params.user_code, { userId: principal.user.id, ip }),
  }),
  defineRoute({
    method: 'post',
    path: '/oauth2/device-auth/{user_code}',
    tag: TAG,
    summary: 'Approve a CLI sign-in',
    description:
      'The client that shows this code gets a session of yours, with your permissions. Approve only a code your own terminal shows. ' +
      "Answers `{user_code}`; 404 for an unknown or expired code or another user's (see the look-up), 409 `already_decided`.",
    access: 'authenticated',
    audit: 'auth.device_code.approve',
    params: z.object({ user_code: userCode }),
    body: z.object({}),
    response: z.object({ user_code: z.string() }),
    handler: async ({ params, deps, principal, ip }) => deps.deviceAuth.decide(params.user_code, { userId: principal.user.id, ip }, 'approved'),
  }),
  defineRoute({
    method: 'delete',
    path: '/oauth2/device-auth/{user_code}',
    tag: TAG,
    summary: 'Decline a CLI sign-in',
    description:
      "The polling client gets `authorization_declined`. Answers `{user_code}`; 404 for an unknown or expired code or another user's (see the look-up).",
    access: 'authenticated',
    audit: 'auth.device_code.decline',
    params: z.object({ user_code: userCode }),
    response: z.object({ user_code: z.string() }),
    handler: async ({ params, deps, principal, ip }) => deps.deviceAuth.decide(params.user_code, { userId: principal.user.id, ip }, 'declined'),
  }),
];
