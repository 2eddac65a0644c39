import { z } from 'zod';
import type { Profile } from '../../shared/api-types.js';
import { totpEnrolment } from '../../shared/api-types/totp.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { userRecord } from '../users/routes.js';
import { newPassword } from './password-routes.js';
import { singleLine } from '../../shared/text.js';
import { subjectRecords } from '../audit/subjects.js';
import type { Db } from '../db/database.js';
import type { AuthService } from './service.js';

const name = singleLine(z.string().trim().min(1).max(100));
/** As on user records: the first administrator is created without one. */
const lastName = singleLine(z.string().trim().max(100)).describe('Last name (may be empty).');

const profile = userRecord.extend({
  permissions: z.array(z.string()).describe("every permission the user's roles grant, on at least some devices"),
  recovery_codes_left: z.number().int().min(0).describe('unused recovery codes of the authenticator app (0 without an app)'),
  console_grants: z
    .array(z.object({ resource: z.string(), users: z.array(z.string()) }))
    .describe(
      'The remote-access:connect resources that allow a console, with the logins each names (`user=`); `users` empty: the console opens the agent’s own account, root on a packaged install.',
    ),
}) satisfies z.ZodType<Profile>;

const withRecoveryCodes = profile.extend({
  recovery_codes: z.array(z.string()).describe('10 single-use recovery codes (xxxx-xxxx-xxxx-xxxx), shown this once: the broker keeps only their hashes'),
});

/** Exactly one of a current app code and the password. */
const totpOrPassword = z
  .object({ code: z.string().min(1).max(20).optional(), password: z.string().min(1).max(1024).optional() })
  .refine((b) => (b.code === undefined) !== (b.password === undefined), { message: 'send either code or password', path: ['code'] });

/** The signed-in user's own account; no permission needed beyond being signed in. */
/** What the profile routes use; `db` is read by the audit subject (the user record before and after). */
export interface ProfileRouteDeps {
  auth: Pick<AuthService, 'profile'>;
  db: Db;
}

export const profileRoutes: RouteSpec<ProfileRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/profile',
    tag: 'profile',
    summary: 'Your own user record and permissions',
    description:
      'The user record (as in GET /api/v2/user/{id}) of the signed-in user, plus `permissions`: what the web console may offer, and `console_grants`: which account each console grant opens.',
    access: 'authenticated',
    response: profile,
    handler: async ({ principal, deps }) => deps.auth.profile.get(principal),
  }),
  defineRoute({
    method: 'patch',
    path: '/profile',
    tag: 'profile',
    summary: 'Change your name',
    description: 'Only the given fields change. Answers the profile after the change. The email address is changed by an administrator.',
    access: 'authenticated',
    audit: 'profile.update',
    subject: ({ principal }, s) => subjectRecords.user(s.db, principal?.user.id),
    body: z.object({ fname: name.optional(), lname: lastName.optional() }),
    response: profile,
    handler: async ({ principal, deps, body }) => deps.auth.profile.update(principal, body),
  }),
  defineRoute({
    method: 'post',
    path: '/profile/password',
    tag: 'profile',
    summary: 'Change your password',
    description:
      `Needs the current password (400 \`wrong_password\` naming \`current_password\`; 10 wrong tries in 15 min answer 429). ` +
      'Every other session of the user ends at once; the calling token keeps working. Answers 204.',
    access: 'authenticated',
    audit: 'profile.password',
    subject: ({ principal }, s) => subjectRecords.user(s.db, principal?.user.id),
    body: z.object({ current_password: z.string().min(1).max(1024), new_password: newPassword }),
    handler: async ({ principal, deps, body }) => {
      await deps.auth.profile.changePassword(principal, body.current_password, body.new_password);
      return undefined;
    },
  }),
  defineRoute({
    method: 'post',
    path: '/profile/totp',
    tag: 'profile',
    summary: 'Start setting up an authenticator app (TOTP)',
    description:
      'Answers a new secret, its otpauth:// URL and a QR code (PNG data URL) to scan. It takes effect after POST /api/v2/profile/totp/confirm with a code of the app. ' +
      'Starting again replaces an unconfirmed secret. 409 `totp_already_enabled` when an app is set up: remove it first.',
    access: 'authenticated',
    audit: 'profile.totp.start',
    subject: ({ principal }, s) => subjectRecords.user(s.db, principal?.user.id),
    response: totpEnrolment,
    handler: async ({ principal, deps }) => deps.auth.profile.startTotp(principal),
  }),
  defineRoute({
    method: 'post',
    path: '/profile/totp/confirm',
    tag: 'profile',
    summary: 'Confirm the authenticator app with one of its codes',
    description:
      'From then on the user can choose `google` at challenge-get. Answers the profile and `recovery_codes`: 10 single-use codes that stand in for an app code at ' +
      'challenge-verify, shown this once (the broker keeps only their sha256). 400 `invalid_code` when the code does not match; 409 `totp_not_started` without a started setup.',
    access: 'authenticated',
    audit: 'profile.totp.confirm',
    subject: ({ principal }, s) => subjectRecords.user(s.db, principal?.user.id),
    body: z.object({ code: z.string().min(1).max(20).describe('6 digits shown by the app') }),
    response: withRecoveryCodes,
    handler: async ({ principal, deps, body }) => deps.auth.profile.confirmTotp(principal, body.code),
  }),
  defineRoute({
    method: 'delete',
    path: '/profile/totp',
    tag: 'profile',
    summary: 'Remove your authenticator app',
    description:
      'Proven by a current code of the app (`code`) or by the password (`password`): exactly one of them. Answers the profile. ' +
      'Its recovery codes go with it. 409 `totp_not_enabled` when none is set up. Mailed codes stay available as a second factor.',
    access: 'authenticated',
    audit: 'profile.totp.remove',
    subject: ({ principal }, s) => subjectRecords.user(s.db, principal?.user.id),
    body: totpOrPassword,
    response: profile,
    handler: async ({ principal, deps, body }) => deps.auth.profile.removeTotp(principal, body),
  }),
  defineRoute({
    method: 'post',
    path: '/profile/totp/recovery-codes',
    tag: 'profile',
    summary: 'Replace your recovery codes',
    description:
      'Proven by a current code of the app (`code`) or by the password (`password`): exactly one of them (400 `invalid_code`, `code_already_used` or `wrong_password`; ' +
      '10 wrong tries in 15 min answer 429). Every earlier recovery code stops working. Answers the profile and the 10 new `recovery_codes`, shown this once. ' +
      '409 `totp_not_enabled` without an authenticator app.',
    access: 'authenticated',
    audit: 'profile.recovery_codes.regenerate',
    subject: ({ principal }, s) => subjectRecords.user(s.db, principal?.user.id),
    body: totpOrPassword,
    response: withRecoveryCodes,
    handler: async ({ principal, deps, body }) => deps.auth.profile.regenerateRecoveryCodes(principal, body),
  }),
];
