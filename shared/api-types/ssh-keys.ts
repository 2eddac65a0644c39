/**
 * A registered SSH public key as GET /ssh/keys lists it: the zod schema its routes declare as
 * `response`, and its type for the broker's key store and the console (a type only there, so no zod
 * reaches the browser bundle).
 */
import { z } from 'zod';

export const sshKeyRecord = z.object({
  key_id: z.string(),
  user_id: z.string(),
  public_key: z.string().describe('`<type> <base64>`: the OpenSSH public key line, without its comment.'),
  type: z.string().describe('`ssh-ed25519`, `ecdsa-sha2-nistp256` (384, 521) or `ssh-rsa`.'),
  fingerprint: z.string().describe('`SHA256:…`, as `ssh-keygen -l` prints it.'),
  comment: z.string(),
  created_at: z.string(),
});
export type SshKeyRecord = z.infer<typeof sshKeyRecord>;
