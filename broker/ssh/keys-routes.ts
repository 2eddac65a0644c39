/**
 * REST calls for registered SSH public keys (broker/ssh/keys.ts): each user lists, adds and removes
 * their own; an administrator with users:manage lists and removes anyone's. Every add and removal
 * is audited with the key's fingerprint.
 */
import { z } from 'zod';
import { sshKeyRecord as keyRecord } from '../../shared/api-types/ssh-keys.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { MAX_SSH_KEY_COMMENT, MAX_SSH_KEY_LINE, MAX_SSH_KEYS_PER_USER, MIN_RSA_BITS, type SshKeyRecord } from './keys.js';
import type { SshService } from './service.js';

const keyList = z.object({ items: z.array(keyRecord) });
const keyId = z.string().min(1).max(64).describe('The key id (key_id of the record).');
const userId = z.string().min(1).max(128).describe('The user id.');

/** What the audit entry of an add or a removal shows of a key (the line itself is the fingerprint's). */
function audited(key: SshKeyRecord | undefined): object | undefined {
  if (!key) return undefined;
  const { public_key: _line, ...shown } = key;
  return shown;
}

const GATEWAY = `The gateway accepts registered keys only when the operator turns on SSH_USER_KEYS (off by default; docs/ssh.md); otherwise only certificates from \`fleet login\` sign in.`;

/** What the SSH key routes use. */
export interface SshKeyRouteDeps {
  ssh: Pick<SshService, 'keys'>;
}

export const sshKeyRoutes: RouteSpec<SshKeyRouteDeps>[] = [
  defineRoute({
    method: 'get',
    path: '/ssh/keys',
    tag: 'ssh',
    summary: "The caller's registered SSH public keys",
    description: `Keys the caller registered for the SSH gateway, oldest first. ${GATEWAY}`,
    access: 'authenticated',
    response: keyList,
    handler: async ({ principal, deps }) => ({ items: await deps.ssh.keys.list(principal.user.id) }),
  }),
  defineRoute({
    method: 'post',
    path: '/ssh/keys',
    tag: 'ssh',
    summary: 'Register an SSH public key for the caller',
    description: `An OpenSSH public key line (\`ssh-ed25519 AAAA… comment\`, as in a .pub file): Ed25519, ECDSA (nistp256/384/521) or RSA of at least ${MIN_RSA_BITS} bits, at most ${MAX_SSH_KEY_LINE} characters. \`comment\` (at most ${MAX_SSH_KEY_COMMENT} characters) replaces the line's own. 409 \`ssh_key_exists\` when a key with that fingerprint is registered already (by anyone: a key names one user), 409 \`ssh_keys_exhausted\` past ${MAX_SSH_KEYS_PER_USER} keys. Answers 201 with the record. ${GATEWAY}`,
    access: 'authenticated',
    status: 201,
    audit: 'ssh.key.add',
    subject: (_input, _s, answer) => Promise.resolve(audited(answer as SshKeyRecord | undefined)),
    body: z.object({
      public_key: z.string().min(1).max(MAX_SSH_KEY_LINE).describe('`ssh-ed25519 AAAA… [comment]`'),
      comment: z.string().max(MAX_SSH_KEY_COMMENT).optional(),
    }),
    response: keyRecord,
    handler: async ({ body, principal, deps }) => deps.ssh.keys.add(principal.user.id, body.public_key, body.comment),
  }),
  defineRoute({
    method: 'delete',
    path: '/ssh/keys/{key_id}',
    tag: 'ssh',
    summary: 'Remove one of the caller’s SSH public keys',
    description:
      'Removes the key: the gateway refuses it from then on, and ends connections signed in with it within seconds. 404 for a key that is not the caller’s.',
    access: 'authenticated',
    audit: 'ssh.key.remove',
    params: z.object({ key_id: keyId }),
    subject: async ({ params, principal }, s) => audited(principal ? await s.ssh.keys.find(principal.user.id, params.key_id) : undefined),
    handler: async ({ params, principal, deps }) => deps.ssh.keys.remove(principal.user.id, params.key_id),
  }),
  defineRoute({
    method: 'get',
    path: '/user/{user_id}/ssh-keys',
    tag: 'ssh',
    summary: "A user's registered SSH public keys",
    description: `For administrators: the keys a user registered for the SSH gateway. ${GATEWAY}`,
    access: 'users:manage',
    params: z.object({ user_id: userId }),
    response: keyList,
    handler: async ({ params, deps }) => ({ items: await deps.ssh.keys.list(params.user_id) }),
  }),
  defineRoute({
    method: 'delete',
    path: '/user/{user_id}/ssh-keys/{key_id}',
    tag: 'ssh',
    summary: "Remove a user's SSH public key",
    description:
      'For administrators: removes a key a user registered; connections signed in with it end within seconds. 404 for a key that is not that user’s.',
    access: 'users:manage',
    audit: 'ssh.key.remove',
    params: z.object({ user_id: userId, key_id: keyId }),
    subject: async ({ params }, s) => audited(await s.ssh.keys.find(params.user_id, params.key_id)),
    handler: async ({ params, deps }) => deps.ssh.keys.remove(params.user_id, params.key_id),
  }),
];
