import { z } from 'zod';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { MAX_CERT_SECONDS } from './authority.js';

const issued = z.object({
  certificate: z.string().describe('`ssh-ed25519-cert-v01@openssh.com AAAA… <key id>`: write it beside the private key as `<key>-cert.pub`.'),
  key_id: z.string().describe("The certificate's key id: the user's email (audit entries of the gateway name it)."),
  principals: z.array(z.string()),
  valid_before: z.string().describe('When the certificate expires (ISO 8601).'),
  host_key: z
    .string()
    .describe(
      "The gateway's host key (`ssh-ed25519 AAAA…`), the same on every broker of the database: a known_hosts line for the gateway and `*.<fleet host>`.",
    ),
  ca_public_key: z.string().describe('The public key of the CA that signs user certificates.'),
  ssh_port: z.number().describe('The port the gateway listens on (SSH_PORT).'),
});

export const sshRoutes: RouteSpec[] = [
  defineRoute({
    method: 'post',
    path: '/ssh/certificate',
    tag: 'ssh',
    summary: 'Sign an SSH user certificate for the caller (the SSH gateway)',
    description: `For native OpenSSH clients through the SSH gateway (SSH_PORT; see docs/ssh.md). Send the public half of a key pair made on the user's machine (\`ssh-ed25519 AAAA…\`; the private key never leaves it); the broker, the gateway's certificate authority, answers a user certificate whose key id and only principal are the caller's email and which names the caller's sign-in session. It expires with that session, after ${MAX_CERT_SECONDS / 3600} h at most, and ends at once when the session does (sign-out, password change, the user disabled or removed): the gateway checks the session on every connection. What the certificate may do is decided per channel by the caller's \`remote-access:connect\` grants, as for every other remote-access client. 409 \`ssh_not_enabled\` when the gateway is off. \`fleet login\` calls it and \`fleet ssh-config\` prints the matching ~/.ssh/config block.`,
    access: 'authenticated',
    audit: 'ssh.certificate',
    body: z.object({ public_key: z.string().min(1).max(1000).describe('`ssh-ed25519 AAAA… [comment]`') }),
    response: issued,
    handler: async ({ body, principal, services }) => services.ssh.issueCertificate(principal, body.public_key),
  }),
];
