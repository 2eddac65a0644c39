import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fleetHost, gatewayAlias, knownHostsLine, sshConfigBlock as buildSshConfigBlock } from '../shared/ssh-config.js';
import { openSshPrivateKey, publicKeyLine } from '../shared/ssh-keys.js';
import { configDir } from './config.js';

export { fleetHost, gatewayAlias };

/** What POST /api/v2/ssh/certificate answers. */
export interface IssuedCertificate {
  certificate: string;
  key_id: string;
  valid_before: string;
  host_key: string;
  ssh_port: number;
}

/** Where a profile's SSH files live: `<config dir>/ssh/<profile>` (key), `-cert.pub`, `.known_hosts`. */
export function sshFiles(profile: string, env: NodeJS.ProcessEnv = process.env): { dir: string; key: string; pub: string; cert: string; knownHosts: string } {
  const dir = path.join(configDir(env), 'ssh');
  const key = path.join(dir, profile);
  return { dir, key, pub: `${key}.pub`, cert: `${key}-cert.pub`, knownHosts: `${key}.known_hosts` };
}

/**
 * The profile's key pair, made here on first use (Ed25519, the private key readable by the user
 * only): only its public half is ever sent to the broker.
 */
export function ensureKeyPair(profile: string, env: NodeJS.ProcessEnv = process.env): string {
  const files = sshFiles(profile, env);
  fs.mkdirSync(files.dir, { recursive: true, mode: 0o700 });
  if (fs.existsSync(files.key) && fs.existsSync(files.pub)) return fs.readFileSync(files.pub, 'utf8').trim();
  const { privateKey, publicKey } = crypto.generateKeyPairSync('ed25519');
  const line = publicKeyLine(publicKey, `fleet-${profile}`);
  const temp = `${files.key}.${process.pid}.tmp`;
  fs.writeFileSync(temp, openSshPrivateKey(privateKey, `fleet-${profile}`), { mode: 0o600 });
  fs.renameSync(temp, files.key);
  fs.writeFileSync(files.pub, `${line}\n`, { mode: 0o644 });
  return line;
}

/** Writes the certificate and the gateway's known_hosts line (no trust-on-first-use prompt). */
export function saveCertificate(profile: string, url: string, issued: IssuedCertificate, env: NodeJS.ProcessEnv = process.env): void {
  const files = sshFiles(profile, env);
  fs.writeFileSync(files.cert, `${issued.certificate}\n`, { mode: 0o644 });
  fs.writeFileSync(files.knownHosts, `${knownHostsLine(url, issued.ssh_port, issued.host_key)}\n`, { mode: 0o644 });
}

/** The ~/.ssh/config block of a profile: `ssh <login>@<device>.<host>` goes through the gateway (-J). */
export function sshConfigBlock(profile: string, url: string, port: number, env: NodeJS.ProcessEnv = process.env): string {
  return buildSshConfigBlock(profile, url, port, sshFiles(profile, env));
}
