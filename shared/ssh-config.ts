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

/** The ~/.ssh/config block of a profile: `ssh <login>@<device>.<host>` goes through the gateway (-J). */
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
    `  ProxyJump ${alias}`,
    ...common,
    '',
  ].join('\n');
}
