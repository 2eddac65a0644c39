/**
 * What the entry needs before commander: the API client loaded beside a command's module, and the
 * hot path of the CLI — `fleet devices` with its usual options, read here so that listing the
 * devices loads neither commander (and with it child_process) nor any other command.
 */
import type { ApiClient } from './api.js';
import type { DevicesOptions } from './commands/devices.js';
import { resolveTarget } from './config.js';

/** How a device is named on the command line (see resolveDevice). */
export const DEVICE_ARG = 'device name, id, or a unique prefix of its id (4 or more characters)';

// Each command's module (and what it needs: ws, cli-progress, the HTTP client) is loaded only when
// that command runs, so `fleet --help` or `fleet devices` does not pay for the others' start.
const client = async (): Promise<ApiClient> => {
  const target = resolveTarget();
  const { ApiClient } = await import('./api.js');
  return new ApiClient(target);
};

/** A command's module and the API client, loaded side by side. */
export async function withClient<M>(module: Promise<M>, act: (m: M, c: ApiClient) => Promise<number | void>): Promise<number | void> {
  const [m, c] = await Promise.all([module, client()]);
  return act(m, c);
}

/** The options of `fleet devices` that take a value, by how they are spelled. */
const VALUED = new Map<string, 'name' | 'tag' | 'group' | 'output'>([
  ['--name', 'name'],
  ['--tag', 'tag'],
  ['--group', 'group'],
  ['--output', 'output'],
  ['-o', 'output'],
]);
const FLAGS = new Map<string, 'online' | 'offline' | 'json'>([
  ['--online', 'online'],
  ['--offline', 'offline'],
  ['--json', 'json'],
]);

/**
 * The options of `fleet devices …` (the arguments after the program's name) exactly as commander
 * reads them (program.ts), for the plain spellings: `--name X`, `--name=X`, `-o X`, `-oX`, the
 * flags, `--tag` repeated. Anything else — help, an unknown or malformed option, a value that starts
 * with a dash, an argument, `--`, another command — is undefined, and commander reads the line (its
 * help, errors and exit codes stay the only ones).
 */
export function devicesFastPath(args: readonly string[]): DevicesOptions | undefined {
  if (args[0] !== 'devices') return undefined;
  const options: DevicesOptions & { tag: string[]; output: string } = { tag: [], output: 'table' };
  for (let i = 1; i < args.length; i++) {
    const arg = args[i];
    const flag = FLAGS.get(arg);
    if (flag) {
      options[flag] = true;
      continue;
    }
    let key: string;
    let value: string | undefined;
    const eq = arg.indexOf('=');
    if (arg.startsWith('--') && eq > 0) [key, value] = [arg.slice(0, eq), arg.slice(eq + 1)];
    else if (arg.startsWith('-o') && arg.length > 2 && !arg.startsWith('--')) [key, value] = ['-o', arg.slice(2)];
    else [key, value] = [arg, args[++i]];
    const name = VALUED.get(key);
    if (!name || value === undefined || value === '' || value.startsWith('-')) return undefined;
    if (name === 'tag') options.tag = [...options.tag, value];
    else options[name] = value;
  }
  return options;
}
