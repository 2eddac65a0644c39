import { z } from 'zod';
import { defineRoute, Reply, type RouteSpec } from '../http/route.js';
import { MIN_PASSWORD_LENGTH } from './passwords.js';
import type { AuthService } from './service.js';

export const newPassword = z.string().min(MIN_PASSWORD_LENGTH, `at least ${MIN_PASSWORD_LENGTH} characters`).max(1024);

/** Password links: set a first password (welcome mail) or a new one (forgot password). */
/** What the password routes use. */
export interface PasswordRouteDeps {
  auth: Pick<AuthService, 'setPasswordWithLink' | 'forgotPassword'>;
}

export const passwordRoutes: RouteSpec<PasswordRouteDeps>[] = [
  defineRoute({
    method: 'post',
    path: '/password/set',
    tag: 'session',
    summary: 'Set a password with the token of a welcome or reset link',
    description:
      'The token is the `token` query parameter of the link `<base>/set-password?token=<t>` mailed to the user (welcome links last 72 hours, reset links 1 hour). ' +
      'A link works once; setting a password spends every other link of the user and ends all their sessions. ' +
      'Answers 200 {email}: sign in with it. 400 `invalid_link`, `link_used` or `link_expired` (field `token`) otherwise.',
    access: 'public',
    audit: 'password.set',
    body: z.object({ token: z.string().min(1).max(200).describe('from the link'), password: newPassword }),
    response: z.object({ email: z.string() }),
    handler: async ({ body, deps, ip }) => deps.auth.setPasswordWithLink(body.token, body.password, ip),
  }),
  defineRoute({
    method: 'post',
    path: '/password/forgot',
    tag: 'session',
    summary: 'Ask for a password reset link by mail',
    description:
      'Always answers 202, whether or not the address belongs to a user, so the answer does not tell who has an account. ' +
      'An active user gets a mail with a link valid for 1 hour; set the password with POST /api/v2/password/set. ' +
      'Rate-limited per address and per email address (429 with Retry-After).',
    access: 'public',
    audit: false,
    status: 202,
    body: z.object({ email: z.string().min(3).max(254) }),
    response: z.object({ message: z.string() }),
    handler: async ({ body, deps, ip }) => {
      await deps.auth.forgotPassword(body.email, ip);
      return Reply.json(202, { message: 'If the address belongs to an active user, a mail with a reset link is on its way.' });
    },
  }),
];
