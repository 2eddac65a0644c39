/**
 * The OpenSSH client set-up for the SSH gateway: the known_hosts line and the ~/.ssh/config block
 * `fleet ssh-config` writes and the console's Profile page shows. One builder for both, so what the
 * page shows is what the CLI writes.
 */

/** Where a profile's key, certificate and known_hosts file are (cli/ssh.ts sshFiles). */
export interface SshClientFiles {
  key: string;
  cert: string;
  knownHosts: string;
}

/** The host name of a broker URL, without the brackets of an IPv6 address: devices are `<name>.<host>`. */
export function fleetHost(url: string): string {
  return new URL(url).hostname.replace(/^\[|\]$/g, '');
}

/** The gateway's alias in the config block: not a name DNS answers, and not under `*.<host>`. */
export function gatewayAlias(url: string): string {
  return `${fleetHost(url)}.fleet-gateway`;
}

/** The known_hosts line of the gateway and every `*.<host>` name: its host key (no trust-on-first-use prompt). */
export function knownHostsLine(url: string, port: number, hostKey: string): string {
  const host = fleetHost(url);
  return `[${host}]:${port},*.${host} ${hostKey}`;
}

/**
 * The preamble `fleet ssh-proxy` (the block's ProxyCommand) sends before the client's SSH version
 * line: `FLEET-DEVICE <host>` and a line end (`\n` or `\r\n`), where <host> is the name ssh was
 * given (`<device>.<fleet host>`); the gateway binds the connection to the device its first label
 * names, once the connection has signed in. It is a routing hint only: the certificate still decides.
 * A connection that starts with `SSH-` instead is the gateway's own (ssh -J). At most
 * SSH_PREAMBLE_MAX bytes, line end included; anything else closes the connection.
 */
export const SSH_PREAMBLE_WORD = 'FLEET-DEVICE ';
export const SSH_PREAMBLE_MAX = 300;
/** A host name or address as a client names it: a first label of letters, digits, `_` or `-`, then more labels (or an IPv6 address). */
const PREAMBLE_HOST = /^[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_.:-]{1,252})?$/;
const WORD = Buffer.from(SSH_PREAMBLE_WORD, 'latin1');
const VERSION = Buffer.from('SSH-', 'latin1');

/** The preamble line for `host`; undefined for a host the gateway would refuse. */
export function sshPreamble(host: string): string | undefined {
  const line = `${SSH_PREAMBLE_WORD}${host}\r\n`;
  return PREAMBLE_HOST.test(host) && line.length <= SSH_PREAMBLE_MAX ? line : undefined;
}

/**
 * What the first bytes of a gateway connection are: not enough yet (`more`), an SSH version line
 * (`plain`), a preamble (its host, and the bytes after it), or neither (`refused`).
 */
export type PreambleRead = { kind: 'more' } | { kind: 'plain' } | { kind: 'preamble'; host: string; rest: Buffer } | { kind: 'refused'; reason: string };

export function readSshPreamble(head: Buffer): PreambleRead {
  const startsAs = (word: Buffer) => head.subarray(0, Math.min(head.length, word.length)).equals(word.subarray(0, Math.min(head.length, word.length)));
  if (head.length === 0) return { kind: 'more' };
  if (startsAs(VERSION)) return head.length < VERSION.length ? { kind: 'more' } : { kind: 'plain' };
  if (!startsAs(WORD)) return { kind: 'refused', reason: 'neither an SSH version line nor a preamble' };
  const end = head.indexOf(0x0a);
  if (end < 0 || end >= SSH_PREAMBLE_MAX) {
    return head.length >= SSH_PREAMBLE_MAX ? { kind: 'refused', reason: `a preamble longer than ${SSH_PREAMBLE_MAX} bytes` } : { kind: 'more' };
  }
  const host = head.subarray(WORD.length, head[end - 1] === 0x0d ? end - 1 : end).toString('latin1');
  if (!PREAMBLE_HOST.test(host)) return { kind: 'refused', reason: 'a preamble whose host is not a host name' };
  return { kind: 'preamble', host, rest: head.subarray(end + 1) };
}

/**
 * The ~/.ssh/config block of a profile: `ssh <login>@<device>.<host>` reaches the gateway through
 * `fleet ssh-proxy` (one SSH connection, bound to the device by the preamble), which hands ssh the
 * connection and exits (`ProxyUseFdpass`); the gateway's own alias stays for `ssh -J <alias>`.
 */
export function sshConfigBlock(profile: string, url: string, port: number, files: SshClientFiles): string {
  const host = fleetHost(url);
  const alias = gatewayAlias(url);
  const q = (p: string) => (/\s/.test(p) ? `"${p}"` : p);
  const common = [
    `  IdentityFile ${q(files.key)}`,
    `  CertificateFile ${q(files.cert)}`,
    '  IdentitiesOnly yes',
    `  UserKnownHostsFile ${q(files.knownHosts)}`,
    '  StrictHostKeyChecking yes',
  ];
  return [
    `# fleet: ${url} (profile ${profile}); renew with fleet login or fleet ssh-config`,
    `Host ${alias}`,
    `  HostName ${host}`,
    `  Port ${port}`,
    '  User fleet',
    ...common,
    `Host *.${host} !${alias}`,
    `  ProxyCommand fleet ssh-proxy --fdpass ${host} ${port} %h`,
    // ssh takes the connection from fleet ssh-proxy and talks to the gateway itself: no process between them.
    '  ProxyUseFdpass yes',
    ...common,
    '',
  ].join('\n');
}
