import { answerOf, request } from '../api.js';
import type { ApiClient } from '../api.js';
import { readCredentials, resolveTarget, type Credentials } from '../config.js';
import { CliError } from '../errors.js';
import { ensureKeyPair, saveCertificate, sshConfigBlock, sshFiles, type IssuedCertificate } from '../ssh.js';

/**
 * Signs the profile's SSH key (made here on first use; only its public half is sent) and writes
 * the certificate and the gateway's known_hosts line. Undefined when the broker has no SSH gateway.
 */
export async function renewSshCertificate(url: string, token: string, profile: string): Promise<IssuedCertificate | undefined> {
  const publicKey = ensureKeyPair(profile);
  const res = await request(`${url}/api/v2/ssh/certificate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ public_key: publicKey }),
  });
  if (res.status === 409) return undefined;
  const issued = await answerOf<IssuedCertificate>(res);
  saveCertificate(profile, url, issued);
  return issued;
}

/** After `fleet login`: the SSH certificate too, when the broker has a gateway; never fails the sign-in. */
export async function certificateAfterLogin(saved: Credentials): Promise<void> {
  if (!saved.name) return;
  try {
    const issued = await renewSshCertificate(saved.url, saved.token, saved.name);
    if (issued) process.stderr.write(`SSH certificate valid until ${issued.valid_before} (${sshFiles(saved.name).cert}); see fleet ssh-config.\n`);
  } catch (err) {
    process.stderr.write(`No SSH certificate: ${(err as Error).message}\n`);
  }
}

/**
 * `fleet ssh-config`: renews the certificate and prints the ~/.ssh/config block of the profile in
 * use, after which `ssh <login>@<device>.<fleet host>` (and scp, ssh -L …) go through the gateway.
 */
export async function sshConfigCommand(client: ApiClient): Promise<void> {
  const target = resolveTarget();
  const profile = target.stored?.name ?? readCredentials()?.name;
  if (!profile) throw new CliError('fleet ssh-config needs a profile of fleet login (FLEET_TOKEN alone has none to keep the key under).');
  const issued = await renewSshCertificate(client.url, await client.token(), profile);
  if (!issued) throw new CliError(`The broker at ${client.url} has no SSH gateway (its operator sets SSH_PORT to turn it on).`);
  process.stdout.write(sshConfigBlock(profile, client.url, issued.ssh_port));
  process.stderr.write(`Add this to ~/.ssh/config (or save it and Include it). Certificate valid until ${issued.valid_before}.\n`);
}
