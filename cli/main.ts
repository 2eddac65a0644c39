/**
 * The `fleet` command-line client: sign in, list devices, and open consoles, tunnels, copies and
 * agent reloads through the broker. Errors are one line on stderr and a non-zero exit status.
 */
import { Command, CommanderError } from 'commander';
import { ApiClient } from './api.js';
import { consoleCommand } from './commands/console.js';
import { connectCommand } from './commands/connect.js';
import { cpCommand } from './commands/cp.js';
import { devicesCommand, reloadCommand } from './commands/devices.js';
import { login, logout } from './commands/login.js';
import { playCommand, type PlayOptions } from './commands/play.js';
import { statusCommand, useCommand } from './commands/profiles.js';
import { resolveTarget } from './config.js';
import { CliError } from './errors.js';
import { escapeForTerminal } from '../shared/text.js';

const client = () => new ApiClient(resolveTarget());

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
    .action((options) => run(login(options)));

  cli
    .command('status')
    .description('Who you are signed in as, where, and when the session ends; the other profiles')
    .action(() => run(statusCommand()));

  cli
    .command('use')
    .argument('<profile>', 'profile name (or broker URL) of an earlier fleet login')
    .description('Switch the broker later commands talk to')
    .action((name: string) => run(useCommand(name)));

  cli
    .command('logout')
    .description('Revoke the stored sign-in and forget it')
    .action(() => run(logout()));

  cli
    .command('devices')
    .description('List the devices you may see')
    .option('--json', 'print JSON instead of a table')
    .action((options) => run(devicesCommand(client(), options)));

  cli
    .command('console')
    .argument('<device>', 'device id or name')
    .description('Open a shell on the device; exits with its exit status')
    .option('-u, --user <user>', "the local user the shell runs as (a grant console(user=...) requires one of its users); default: the agent's own user")
    .action((device: string, options: { user?: string }) => run(consoleCommand(client(), device, options)));

  cli
    .command('connect')
    .argument('<device>', 'device id or name')
    .requiredOption(
      '-t, --tunnel <spec>',
      'forward [lhost:]lport:rhost:rport[/udp]; "stdio" as lport bridges stdin/stdout (SSH ProxyCommand); repeatable',
      collect,
      [],
    )
    .description('Forward local ports to hosts reachable from the device')
    .action((device: string, options: { tunnel: string[] }) => run(connectCommand(client(), device, options.tunnel)));

  cli
    .command('cp')
    .argument('<src>', 'local path or <device>:/absolute/path')
    .argument('<dst>', 'local path or <device>:/absolute/path')
    .description('Copy a file to or from a device (SHA-256 checked, atomic on the device)')
    .action((src: string, dst: string) => run(cpCommand(client(), src, dst)));

  cli
    .command('reload')
    .argument('<device>', 'device id or name')
    .description("Reload the device agent's work loop")
    .action((device: string) => run(reloadCommand(client(), device)));

  cli
    .command('play')
    .argument('<session>', "session id of a console recording (the audit entry's recording)")
    .description(
      'Replay a console recording (yours, or one on a device where you hold remote-access:manage). The recorded bytes are written raw to a terminal, as a player does; to a file or pipe they are escaped unless --raw',
    )
    .option('--speed <n>', 'playback speed, e.g. 2 (0.1 to 100)', '1')
    .option('--no-wait', 'write everything at once, without the recorded timing')
    .option('--raw', 'write the recorded bytes unescaped even when stdout is not a terminal')
    .action((session: string, options: PlayOptions) => run(playCommand(client(), session, options)));

  return cli;
}

function fail(err: unknown): never {
  const message = err instanceof Error ? err.message : String(err);
  // Messages carry text from the broker and devices: escaped, so they cannot drive the terminal.
  process.stderr.write(`fleet: ${escapeForTerminal(message.replace(/\s+/g, ' ').trim())}\n`);
  process.exit(err instanceof CliError ? err.exitCode : 1);
}

const run = (work: Promise<number | void>) => {
  work.then((code) => process.exit(typeof code === 'number' ? code : 0), fail);
};

try {
  await program(run).exitOverride().parseAsync(process.argv);
} catch (err) {
  if (err instanceof CommanderError) process.exit(err.exitCode);
  fail(err);
}
