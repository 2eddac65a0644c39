import { z } from 'zod';
import type { SshClientSetup } from '../../shared/api-types.js';
import { ApiError } from '../http/errors.js';
import { defineRoute, type RouteSpec } from '../http/route.js';
import { fleetHost, knownHostsLine, sshConfigBlock } from '../../shared/ssh-config.js';
import { MAX_CERT_SECONDS } from './authority.js';
import { sshKeyRoutes } from './keys-routes.js';
import type { Config } from '../environment.js';
import type { SshService } from './service.js';

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

const HOST = /^[A-Za-z0-9.-]{1,253}(:\d{1,5})?$|^\[[0-9A-Fa-f:.]{2,45}\](:\d{1,5})?$/;

/** The broker URL users sign in to: PUBLIC_URL, else the origin the request came to. */
function brokerUrl(publicUrl: string | undefined, tls: boolean, host: string): string {
  if (publicUrl && URL.canParse(publicUrl)) return publicUrl.replace(/\/+$/, '');
  if (!HOST.test(host)) throw new ApiError(400, 'invalid_request', 'The Host header is not a host name: set PUBLIC_URL on the broker.');
  return `${tls ? 'https' : 'http'}://${host}`;
}

const clientSetup = z.object({
  enabled: z.boolean().describe('Whether this broker runs the SSH gateway (SSH_PORT). When false, nothing else is answered.'),
  url: z.string().optional().describe('The broker URL to sign in to (`fleet login --url <url>`): PUBLIC_URL, else the address of this request.'),
  host: z.string().optional().describe('The host name devices are reached under: `ssh root@<device name>.<host>`.'),
  port: z.number().optional().describe("The gateway's port (SSH_PORT)."),
  profile: z.string().optional().describe('The `fleet login` profile the block names (the host name, its default).'),
  known_hosts: z.string().optional().describe("The known_hosts line `fleet login` writes: the gateway's host key for `[<host>]:<port>` and `*.<host>`."),
  ssh_config: z.string().optional().describe('The ~/.ssh/config block `fleet ssh-config` prints for that profile (key files under ~/.config/fleet/ssh/).'),
}) satisfies z.ZodType<SshClientSetup>;

/** What the SSH routes use: the SSH service, and how this broker is reached (for a client's setup). */
export interface SshRouteDeps {
  ssh: SshService;
  config: Pick<Config, 'publicUrl' | 'tlsCertFile'>;
}

export const sshRoutes: RouteSpec<SshRouteDeps>[] = [
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
    handler: async ({ body, principal, deps }) => deps.ssh.issueCertificate(principal, body.public_key),
  }),
  defineRoute({
    method: 'get',
    path: '/ssh/config',
    tag: 'ssh',
    summary: "How to reach this broker's SSH gateway with OpenSSH (for the caller's set-up)",
    description:
      'For the web console\'s Profile page: whether the SSH gateway is on (SSH_PORT) and, when it is, the broker URL to sign in to, the host devices are reached under (`ssh root@<device name>.<host>`), the gateway\'s port, the known_hosts line `fleet login` writes and the ~/.ssh/config block `fleet ssh-config` prints (the same builder), for the default profile and key files (`~/.config/fleet/ssh/<profile>`). Public keys and names only: no certificate is issued here. When the gateway is off the answer is `{ "enabled": false }` and nothing else. See docs/ssh.md.',
    access: 'authenticated',
    response: clientSetup,
    handler: async ({ deps, host }) => {
      const port = deps.ssh.gateway.port;
      if (port === undefined) return { enabled: false };
      const url = brokerUrl(deps.config.publicUrl, !!deps.config.tlsCertFile, host);
      const profile = fleetHost(url);
      const key = `~/.config/fleet/ssh/${profile}`;
      return {
        enabled: true,
        url,
        host: profile,
        port,
        profile,
        known_hosts: knownHostsLine(url, port, deps.ssh.authority.hostPublicKey),
        ssh_config: sshConfigBlock(profile, url, port, { key, cert: `${key}-cert.pub`, knownHosts: `${key}.known_hosts` }),
      };
    },
  }),
  ...sshKeyRoutes,
];
