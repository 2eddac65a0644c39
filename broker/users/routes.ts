import { z } from 'zod';
import type { UserList, UserRecord } from '../../shared/api-types.js';
import { MIN_PASSWORD_LENGTH } from '../auth/passwords.js';
import { badRequest } from '../http/errors.js';
import { listPage, pagingQuery } from '../http/paging.js';
import { defineRoute, Reply, type RouteSpec } from '../http/route.js';
import { singleLine } from '../../shared/text.js';
import { subjectRecords } from '../audit/subjects.js';
import type { Db } from '../db/database.js';
import type { UsersService } from './service.js';

const userId = z.string().min(1).max(128).describe('The user id (user_id of the record).');
const params = z.object({ user_id: userId });
const fname = singleLine(z.string().trim().min(1).max(100)).describe('First name.');
const lname = singleLine(z.string().trim().max(100)).describe('Last name (may be empty).');
const email = singleLine(
  z
    .string()
    .trim()
    .max(254)
    .regex(/^[^\s@]+@[^\s@]+$/, 'is not an email address'),
).describe('Sign-in identity; stored lower-case and unique.');
const roles = z.array(z.string().min(1).max(128)).min(1, 'give at least one role').max(50).describe('Role ids (GET /roleslist); at least one.');
const password = z
  .string()
  .min(MIN_PASSWORD_LENGTH, `must be at least ${MIN_PASSWORD_LENGTH} characters`)
  .max(1024)
  .describe('Sets the password: the user can sign in at once (API users for scripts).');
/**
 * Accepted by the schema only to be refused by the service with a clear answer: 403 when the caller
 * may not touch the user's sign-in at all, else 400 naming the field.
 */
const passwordNotSettable = z
  .string()
  .max(1024)
  .optional()
  .describe(
    "Refused (400 `password_not_settable`): a user sets their own with POST /api/v2/profile/password; someone else's is reset with POST /api/v2/user/{user_id}/password-reset.",
  );
const twoFactorOverride = z
  .strictObject({
    enabled: z.boolean().nullable().describe('true/false override the account policy for this user; null follows the policy again.'),
    providers: z.array(z.string()).optional().describe('Read-only; ignored.'),
  })
  .describe('Per-user override of the account 2FA policy.');

/** A user as the API shows it (GET /user/{id}; GET /profile adds `permissions`). */
export const userRecord = z.object({
  user_id: z.string(),
  fname: z.string(),
  lname: z.string(),
  email: z.string(),
  roles: z.array(z.string()).describe('Role ids'),
  disabled: z.boolean(),
  two_factor: z.object({
    enabled: z.boolean().describe('Effective: the per-user override, else the account policy (off by default).'),
    providers: z.array(z.enum(['email', 'google'])).describe('"email" always; "google" once an authenticator app (TOTP) is enrolled.'),
  }),
  created_at: z.string().describe('ISO 8601'),
  last_login: z.string().nullable().describe('ISO 8601, or null before the first sign-in'),
}) satisfies z.ZodType<UserRecord>;

const userList = listPage(userRecord).extend({ seats: z.object({ used: z.number(), max: z.number() }) }) satisfies z.ZodType<UserList>;

const ESCALATION =
  "Changing someone's `email`, `two_factor` or `disabled`, taking roles away from them or deleting them needs every permission they hold, on the same or wider resources (403 `privilege_escalation` otherwise); so does assigning a role. ";

const CHECKS =
  ESCALATION +
  'Answers 409 `duplicate_email` for an email in use, `seats_exhausted` when activating a user would exceed the subscription seats, `self_lockout` when you disable or delete yourself and `last_administrator` when the last active holder of the built-in Administrator role would lose it. A role id that does not exist answers 400 naming `roles`.';

/** What the user routes use; `db` is read by the audit subjects. */
export interface UsersRouteDeps {
  users: UsersService;
  db: Db;
}

export const usersRoutes: RouteSpec<UsersRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/userlist',
    tag: 'users',
    summary: 'List users',
    description:
      'Users sorted by email, `{items, total, seats}`; `search` matches part of the name or email (case-insensitive). `seats` is `{used, max}`: active users against the subscription seats (disabled users do not count).',
    access: 'users:read',
    query: z.object({
      search: z.string().max(200).optional().describe('Part of the name or email'),
      ...pagingQuery.shape,
    }),
    response: userList,
    handler: async ({ query, deps }) => deps.users.list(query),
  }),
  defineRoute({
    method: 'get',
    path: '/user/{user_id}',
    tag: 'users',
    summary: 'Read a user',
    access: 'users:read',
    params,
    response: userRecord,
    handler: async ({ params: p, deps }) => deps.users.get(p.user_id),
  }),
  defineRoute({
    method: 'post',
    path: '/user',
    tag: 'users',
    summary: 'Create a user',
    description: `Creates an active user holding the given roles (the union of their permissions) and sends a welcome mail. Without \`password\` the mail carries a single-use link to set one and the user cannot sign in before; with \`password\` (an API user for scripts) the user can sign in at once. \`two_factor: {enabled}\` overrides the account's 2FA policy for this user. Answers 201 with the record and \`welcome_mail\`, where the welcome mail went. ${CHECKS}`,
    access: 'users:manage',
    status: 201,
    audit: 'user.create',
    subject: (_input, s, answer) => subjectRecords.user(s.db, (answer as { user_id?: string } | undefined)?.user_id),
    body: z.object({
      fname,
      lname,
      email,
      roles,
      password: password.optional(),
      two_factor: z.strictObject({ enabled: z.boolean() }).optional().describe('Per-user override of the account 2FA policy.'),
    }),
    response: userRecord.extend({
      welcome_mail: z
        .enum(['sent', 'outbox', 'failed'])
        .describe(
          "Where the welcome mail went: `sent` to the SMTP relay, `outbox` (no SMTP_URL: a file in the broker's outbox folder, not delivered), `failed`.",
        ),
    }),
    handler: async ({ body, principal, deps }) => deps.users.create(principal, body),
  }),
  defineRoute({
    method: 'put',
    path: '/user/{user_id}',
    tag: 'users',
    summary: 'Replace a user',
    description: `Replaces name, email and roles. \`disabled\` and \`two_factor\` change only when given (\`disabled: true\` revokes the user's tokens at once). The read-only fields of the record (\`user_id\`, \`created_at\`, \`last_login\`) may be sent back and are ignored; a different \`user_id\` is refused. ${CHECKS}`,
    access: 'users:manage',
    audit: 'user.replace',
    subject: ({ params: p }, s) => subjectRecords.user(s.db, p.user_id),
    params,
    body: z.object({
      fname,
      lname,
      email,
      roles,
      disabled: z.boolean().optional(),
      two_factor: twoFactorOverride.optional(),
      password: passwordNotSettable,
      user_id: userId.optional().describe('Read-only; must match the path when sent.'),
      created_at: z.unknown().optional().describe('Read-only; ignored.'),
      last_login: z.unknown().optional().describe('Read-only; ignored.'),
    }),
    response: userRecord,
    handler: async ({ params: p, body, principal, deps }) => {
      if (body.user_id !== undefined && body.user_id !== p.user_id)
        throw badRequest('body.user_id: does not match the user in the path.', { field: 'user_id' });
      const { user_id: _id, created_at: _c, last_login: _l, ...fields } = body;
      return deps.users.replace(principal, p.user_id, fields);
    },
  }),
  defineRoute({
    method: 'patch',
    path: '/user/{user_id}',
    tag: 'users',
    summary: 'Change a user',
    description: `Changes only the fields given. \`disabled: true\` disables the user and revokes their tokens at once (they cannot sign in and free their seat); \`disabled: false\` re-enables them (needs a free seat). Passwords are not set here: see POST /api/v2/user/{user_id}/password-reset. \`two_factor: {enabled: null}\` makes the user follow the account policy again. ${CHECKS}`,
    access: 'users:manage',
    audit: 'user.update',
    subject: ({ params: p }, s) => subjectRecords.user(s.db, p.user_id),
    params,
    body: z
      .object({
        fname: fname.optional(),
        lname: lname.optional(),
        email: email.optional(),
        roles: roles.optional(),
        disabled: z.boolean().optional().describe('true disables (tokens revoked at once), false re-enables.'),
        password: passwordNotSettable,
        two_factor: twoFactorOverride.optional(),
      })
      .refine((b) => Object.values(b).some((v) => v !== undefined), { message: 'send at least one field to change' }),
    response: userRecord,
    handler: async ({ params: p, body, principal, deps }) => deps.users.update(principal, p.user_id, body),
  }),
  defineRoute({
    method: 'delete',
    path: '/user/{user_id}',
    tag: 'users',
    summary: 'Delete a user',
    description:
      'Removes the user at once and for good, with their sessions: their tokens stop working on the next call. Answers 204. You cannot delete yourself (409 `self_lockout`), nor the last active holder of the built-in Administrator role (409 `last_administrator`), nor a user holding a permission you do not hold (403 `privilege_escalation`).',
    access: 'users:manage',
    audit: 'user.delete',
    subject: ({ params: p }, s) => subjectRecords.user(s.db, p.user_id),
    status: 204,
    params,
    handler: async ({ params: p, principal, deps }) => {
      await deps.users.remove(principal, p.user_id);
      return undefined;
    },
  }),
  defineRoute({
    method: 'post',
    path: '/user/{user_id}/password-reset',
    tag: 'users',
    summary: "Reset a user's password with a single-use link",
    description:
      '`send_email: true` mails a reset link to the address on record and answers 202. `send_email: false` answers 200 `{link, expires_at}`: ' +
      'the link is shown this once (only its hash is kept), to hand over to the user. Either way the password stays as it is until the link is used ' +
      '(within 1 hour, once, at POST /api/v2/password/set); using it ends every session of the user. ' +
      'Needs every permission the user holds, on the same or wider resources (403 `privilege_escalation` otherwise). 503 `mail_failed` when the mail cannot be sent.',
    access: 'users:manage',
    audit: 'user.password_reset',
    params,
    body: z.object({ send_email: z.boolean().describe('true: mail the link to the user; false: answer the link') }),
    response: z.union([
      z.object({ link: z.string().describe('`<base>/set-password?token=…`; shown once'), expires_at: z.string().describe('ISO 8601') }),
      z.object({ message: z.string() }),
    ]),
    handler: async ({ params: p, body, principal, deps }) => {
      const reset = await deps.users.resetPassword(principal, p.user_id, body.send_email);
      if (body.send_email) return Reply.json(202, { message: 'A mail with a reset link is on its way to the address on record.' });
      return reset;
    },
  }),
];
