/**
 * The `fleet` command-line client: sign in, list devices, and open consoles, tunnels, copies and
 * agent reloads through the broker. Errors are one line on stderr and a non-zero exit status.
 *
 * `fleet devices` with its usual options, the command run most, starts without commander (it loads
 * child_process and parses every command's definition): devicesFastPath reads that line the way
 * commander would. Every other line, help and bad options included, goes to commander (program.ts).
 */
import { devicesFastPath, withClient } from './dispatch.js';
import { CliError } from './errors.js';
import { escapeForTerminal } from '../shared/text.js';

function fail(err: unknown): never {
  const message = err instanceof Error ? err.message : String(err);
  // Messages carry text from the broker and devices: escaped, so they cannot drive the terminal.
  process.stderr.write(`fleet: ${escapeForTerminal(message.replace(/\s+/g, ' ').trim())}\n`);
  process.exit(err instanceof CliError ? err.exitCode : 1);
}

const run = (work: Promise<number | void>) => {
  work.then((code) => process.exit(typeof code === 'number' ? code : 0), fail);
};

const devices = devicesFastPath(process.argv.slice(2));
if (devices) {
  run(withClient(import('./commands/devices.js'), (m, c) => m.devicesCommand(c, devices)));
} else {
  const { program, CommanderError } = await import('./program.js');
  try {
    await program(run).exitOverride().parseAsync(process.argv);
  } catch (err) {
    if (err instanceof CommanderError) process.exit(err.exitCode);
    fail(err);
  }
}
