/**
 * A user's OpenSSH client set-up for the SSH gateway, as `fleet login` and `fleet ssh-config` leave
 * it (key made here, certificate from POST /ssh/certificate, known_hosts, the config block), with
 * the `fleet` of this checkout on PATH for the block's ProxyCommand; and runs of ssh, scp or sftp.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { ensureKeyPair, saveCertificate, sshConfigBlock, type IssuedCertificate } from '../../cli/ssh.js';
import { withFleetOnPath } from './fleet-path.js';
import type { TestBroker } from './broker.js';

export interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A user's client set-up: its own config dir (key, certificate, known_hosts) and ssh config file. */
export interface SshUser {
  env: NodeJS.ProcessEnv;
  config: string;
  port: number;
}

/** The set-up of the user whose `token` this is, under a new directory in `work`. */
export async function sshUser(t: TestBroker, work: string, token: string, name: string): Promise<SshUser> {
  const home = fs.mkdtempSync(path.join(work, `${name}-`));
  const env = await withFleetOnPath({ ...process.env, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config') });
  const r = await t.api<IssuedCertificate>('POST', '/api/v2/ssh/certificate', { token, body: { public_key: ensureKeyPair('lab', env) } });
  if (r.status !== 200) throw new Error(`no certificate: ${r.status} ${JSON.stringify(r.body)}`);
  saveCertificate('lab', t.url, r.body, env);
  const config = path.join(home, 'ssh_config');
  fs.writeFileSync(config, sshConfigBlock('lab', t.url, r.body.ssh_port, env));
  return { env, config, port: r.body.ssh_port };
}

/** `command` (ssh, scp, sftp) with the user's config, in batch mode, to its end. */
export function runSsh(command: 'ssh' | 'scp' | 'sftp', user: Pick<SshUser, 'env' | 'config'>, args: string[], input: string | Buffer = ''): Promise<Run> {
  const child = spawn(command, ['-F', user.config, '-o', 'BatchMode=yes', '-o', 'ConnectTimeout=30', ...args], { env: user.env });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  child.stdin.end(input);
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

/**
 * Sends `word` to the local end of a forwarding (`ssh -L <local>:…` to an echo server) once it
 * listens; resolves with what came back (or undefined while the forwarding is not up yet), for
 * `eventually` to retry.
 */
export function echoThroughForward(local: number, word: string): Promise<string | undefined> {
  return new Promise<string | undefined>((resolve) => {
    const socket = net.connect(local, '127.0.0.1');
    let got = '';
    socket.on('data', (d) => {
      got += d;
      if (got.includes(word)) {
        socket.end();
        resolve(got);
      }
    });
    socket.on('error', () => resolve(undefined));
    socket.on('close', () => resolve(undefined));
    socket.write(word);
  });
}
