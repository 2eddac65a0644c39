/**
 * The `fleet` command line as commander reads it: every command, its options and its help. The entry
 * (main.ts) loads this module for every command line but the hot path of `fleet devices`.
 */
import { Command } from 'commander';

export { CommanderError } from 'commander';
import type { PlayOptions } from './commands/play.js';
import { DEVICE_ARG, withClient } from './dispatch.js';

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}

export function program(run: (work: Promise<number | void>) => void): Command {
  const cli = new Command('fleet')
    .description(
      'Remote access to the devices of a fleet broker.\nEnvironment: FLEET_URL (a URL or profile name) picks the broker for one call; FLEET_TOKEN replaces the stored token (for scripts).',
    )
    .version('0.1.0')
    .showHelpAfterError('(run "fleet --help" for usage)');

  cli
    .command('login')
    .description('Sign in and store the token in the user config directory (mode 0600)')
    .option('--url <broker>', 'broker URL, e.g. https://fleet.example.com (default: FLEET_URL or the last sign-in)')
    .option('--email <email>', 'your email address; without it, approve the sign-in in the web console (device code)')
    .option('--password-stdin', 'read the password from stdin instead of prompting')
    .option('--provider <provider>', 'second factor provider when asked: email or google')
    .option('--code <code>', 'second factor code (authenticator app) instead of prompting')
    .option('--name <profile>', 'name of the profile this sign-in is stored as (default: the broker host)')
    .action((options) => run(import('./commands/login.js').then((m) => m.login(options))));

  cli
    .command('status')
    .description('Who you are signed in as, where, and when the session ends; the other profiles')
    .action(() => run(import('./commands/profiles.js').then((m) => m.statusCommand())));

  cli
    .command('use')
    .argument('<profile>', 'profile name (or broker URL) of an earlier fleet login')
    .description('Switch the broker later commands talk to')
    .action((name: string) => run(import('./commands/profiles.js').then((m) => m.useCommand(name))));

  cli
    .command('ssh-config')
    .description(
      'Renew the SSH certificate of the profile in use and print its ~/.ssh/config block: then ssh, ssh -J and ssh -L reach <login>@<device>.<broker host> through the broker',
    )
    .action(() => run(withClient(import('./commands/ssh-config.js'), (m, c) => m.sshConfigCommand(c))));

  cli
    .command('ssh-proxy')
    .argument('<gateway-host>')
    .argument('<gateway-port>')
    .argument('<host>', '<device>.<broker host>, as ssh names it (%h)')
    .option('--fdpass', "hand the connection to ssh and exit (ssh's ProxyUseFdpass yes) instead of passing its bytes")
    .description("The ProxyCommand of fleet ssh-config's block: one connection to the SSH gateway, bound to the device <host> names")
    .action((gw: string, port: string, host: string, options: { fdpass?: boolean }) =>
      run(import('./commands/ssh-proxy.js').then((m) => m.sshProxyCommand(gw, port, host, options))),
    );

  cli
    .command('logout')
    .description('Revoke the stored sign-in and forget it')
    .action(() => run(import('./commands/login.js').then((m) => m.logout())));

  cli
    .command('devices')
    .description('List the devices you may see (short ids: any unique prefix of 4 or more names a device)')
    .option('--name <text>', 'only devices whose name contains this (any case)')
    .option('--tag <tag>', 'only devices with this tag; repeatable (all of them)', collect, [])
    .option('--group <group>', 'only devices in this group (a name, or a path a/b), at any depth')
    .option('--online', 'only devices online now')
    .option('--offline', 'only devices offline now')
    .option('-o, --output <format>', 'table (short ids), wide (full ids) or json', 'table')
    .option('--json', 'the same as -o json')
    .action((options) => run(withClient(import('./commands/devices.js'), (m, c) => m.devicesCommand(c, options))));

  cli
    .command('console')
    .argument('<device>', DEVICE_ARG)
    .argument('[command...]', 'run this command instead of a shell (put -- before it when it has options), e.g. fleet console pi -- ls -la /etc')
    .description(
      'Open a shell on the device, or run one command there; exits with its exit status. The output of a command to a file or pipe is plain text (no terminal escape codes); input from a file or pipe is not sent to it',
    )
    .option('-u, --user <user>', "the local user the shell runs as (a grant console(user=...) requires one of its users); default: the agent's own user")
    .action((device: string, command: string[], options: { user?: string }) =>
      run(withClient(import('./commands/console.js'), (m, c) => m.consoleCommand(c, device, options, command))),
    );

  cli
    .command('connect')
    .argument('<device>', DEVICE_ARG)
    .option('-t, --tunnel <spec>', 'forward [lhost:]lport:rhost:rport[/udp]; "stdio" as lport bridges stdin/stdout (SSH ProxyCommand); repeatable', collect, [])
    .option('--preset <name>', "forward the device's port preset of this name (to a free local port)")
    .description("Forward local ports to hosts reachable from the device; without -t, pick one of the device's port presets")
    .action((device: string, options: { tunnel: string[]; preset?: string }) =>
      run(withClient(import('./commands/connect.js'), (m, c) => m.connectCommand(c, device, options.tunnel, options))),
    );

  cli
    .command('cp')
    .argument('<src>', 'local path or <device>:/absolute/path')
    .argument('<dst>', 'local path or <device>:/absolute/path')
    .description('Copy a file (SHA-256 checked, atomic on the device) or, with -r, a directory tree to or from a device; permissions kept')
    .option('-r, --recursive', "copy directories (as a gzip'd tar)")
    .action((src: string, dst: string, options: { recursive?: boolean }) =>
      run(withClient(import('./commands/cp.js'), (m, c) => m.cpCommand(c, src, dst, options))),
    );

  cli
    .command('reload')
    .argument('<device>', DEVICE_ARG)
    .description("Reload the device agent's work loop")
    .action((device: string) => run(withClient(import('./commands/devices.js'), (m, c) => m.reloadCommand(c, device))));

  cli
    .command('recordings')
    .argument('[device]', DEVICE_ARG)
    .description('List the console recordings you may play (yours, and those where you hold remote-access:manage), newest first')
    .option('-o, --output <format>', 'table (short session ids), wide (full ids) or json', 'table')
    .option('--json', 'the same as -o json')
    .action((device: string | undefined, options: { json?: boolean; output?: string }) =>
      run(withClient(import('./commands/recordings.js'), (m, c) => m.recordingsCommand(c, device, options))),
    );

  cli
    .command('play')
    .argument(
      '<session>',
      'the recording: its session id as "fleet recordings" shows it (or a unique prefix of it), the console\'s audit entry id, or the session id of that entry',
    )
    .description(
      'Replay a console recording (yours, or one on a device where you hold remote-access:manage). The recorded bytes are written raw to a terminal, as a player does; to a file or pipe they are escaped unless --raw',
    )
    .option('--speed <n>', 'playback speed, e.g. 2 (0.1 to 100)', '1')
    .option('--no-wait', 'write everything at once, without the recorded timing')
    .option('--raw', 'write the recorded bytes unescaped even when stdout is not a terminal')
    .action((session: string, options: PlayOptions) => run(withClient(import('./commands/play.js'), (m, c) => m.playCommand(c, session, options))));

  cli
    .command('completion')
    .argument('<shell>', 'bash, zsh or fish')
    .description('Print a completion script for the shell, e.g. source <(fleet completion bash)')
    .action((shell: string) => run(import('./commands/completion.js').then((m) => m.completionCommand(cli, shell))));

  return cli;
}
