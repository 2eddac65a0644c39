/**
 * The agent's command line, read with Node's own `util.parseArgs` (docs/performance.md, "The agent
 * idle: third round": a command-line library was the agent's largest dependency at start). It reads
 * what the agent accepted before: `--name value` and `--name=value`, the value taken as it is even
 * when it starts with a dash; switches without a value; the last of a repeated option wins; `-h` and
 * `--help`. Anything else (an unknown option, an argument, a switch given a value, an option without
 * its value) is a usage error.
 */
import { parseArgs } from 'node:util';
import { DEFAULTS, type AgentFlags } from './options.js';

interface FlagSpec {
  key: keyof AgentFlags;
  /** `<value>` for an option that takes one; absent for a switch */
  value?: string;
  help: string;
  /** left out of --help (development and test settings) */
  hidden?: boolean;
}

const FLAGS: Record<string, FlagSpec> = {
  broker: { key: 'broker', value: '<url>', help: 'broker base URL, e.g. https://broker.example.com' },
  'bootstrap-key': {
    key: 'bootstrapKey',
    value: '<key>',
    help: 'bootstrap key to enrol with (from POST /api/v2/bootstrapkey); needed until the device is enrolled',
  },
  'bootstrap-key-file': {
    key: 'bootstrapKeyFile',
    value: '<file>',
    help: 'read the bootstrap key from this file (or set FLEET_BOOTSTRAP_KEY), so it does not show in the process list',
  },
  'state-dir': { key: 'stateDir', value: '<dir>', help: `where the device key and enrolment state live (default ${DEFAULTS.stateDir})` },
  'ca-file': { key: 'caFile', value: '<pem>', help: 'trust only the CA certificate(s) in this PEM file for the broker (https)' },
  'insecure-http': {
    key: 'insecureHttp',
    help: 'allow a plain http:// broker URL to another machine (or FLEET_INSECURE_HTTP=1); warned about at every start',
  },
  config: {
    key: 'config',
    value: '<file.json>',
    help: 'JSON config file: broker, bootstrap_key, state_dir, ca_file, exit_on_reload, log_level, … (command-line options win)',
  },
  'exit-on-reload': { key: 'exitOnReload', help: 'exit with code 0 on a reload request, for a service manager to restart the agent' },
  'log-level': { key: 'logLevel', value: '<level>', help: 'fatal, error, warn, info, debug, trace or silent (default info)' },
  'retry-min-ms': { key: 'retryMinMs', value: '<ms>', help: 'first reconnect backoff ceiling (default 1000)', hidden: true },
  'retry-max-ms': { key: 'retryMaxMs', value: '<ms>', help: 'reconnect backoff cap (default 60000)', hidden: true },
  'inventory-interval-ms': { key: 'inventoryIntervalMs', value: '<ms>', help: 'inventory report interval (default 600000)', hidden: true },
  'metrics-interval-ms': { key: 'metricsIntervalMs', value: '<ms>', help: 'how often metrics are sampled (default 60000)' },
  'metrics-flush-ms': { key: 'metricsFlushMs', value: '<ms>', help: 'how often queued metrics are sent to the broker (default 300000)' },
  'update-deadline-ms': {
    key: 'updateDeadlineMs',
    value: '<ms>',
    help: 'an updated agent not welcomed by the broker in this time is rolled back (default 300000)',
    hidden: true,
  },
  'metrics-queue-max': { key: 'metricsQueueMax', value: '<n>', help: 'samples kept while the broker is out of reach; the oldest go first (default 20000)' },
};

export const EXIT_USAGE = 2;

/** What the command line asks: run with these flags, or print and exit (help, a usage error). */
export type ParsedCommandLine = { flags: AgentFlags } | { exit: number; stdout?: string; stderr?: string };

function help(): string {
  const rows: [string, string][] = Object.entries(FLAGS)
    .filter(([, spec]) => !spec.hidden)
    .map(([name, spec]) => [`--${name}${spec.value ? ` ${spec.value}` : ''}`, spec.help]);
  rows.push(['-h, --help', 'display help for command']);
  const width = Math.max(...rows.map(([left]) => left.length)) + 2;
  return (
    'Usage: fleet-agent [options]\n\n' +
    'Fleet edge agent: enrols this device with a broker and serves remote access over one outbound WebSocket.\n\n' +
    `Options:\n${rows.map(([left, text]) => `  ${left.padEnd(width)}${text}\n`).join('')}`
  );
}

/** Reads the arguments after the program's name (`process.argv.slice(2)`). */
export function parseCommandLine(args: string[]): ParsedCommandLine {
  const options = Object.fromEntries(Object.entries(FLAGS).map(([name, spec]) => [name, { type: spec.value ? ('string' as const) : ('boolean' as const) }]));
  // Not strict: a value that starts with a dash is a value here (parseArgs' strict mode refuses it);
  // what strict mode would refuse otherwise is checked below, token by token.
  const { tokens } = parseArgs({ args, options: { ...options, help: { type: 'boolean', short: 'h' } }, strict: false, allowPositionals: true, tokens: true });
  const flags: Record<string, string | boolean> = {};
  const usage = (message: string): ParsedCommandLine => ({ exit: EXIT_USAGE, stderr: `error: ${message}\n` });
  for (const token of tokens) {
    if (token.kind === 'option-terminator') continue;
    if (token.kind === 'positional') return usage(`too many arguments: ${JSON.stringify(token.value)} (the agent takes options only)`);
    if (token.name === 'help') {
      if (token.value !== undefined) return usage(`option '${token.rawName}' takes no value`);
      return { exit: 0, stdout: help() };
    }
    const spec = Object.hasOwn(FLAGS, token.name) ? FLAGS[token.name] : undefined;
    if (!spec || !token.rawName.startsWith('--')) return usage(`unknown option '${token.rawName}'`);
    if (spec.value) {
      if (token.value === undefined) return usage(`option '--${token.name} ${spec.value}' argument missing`);
      flags[spec.key] = token.value;
    } else {
      if (token.value !== undefined) return usage(`option '--${token.name}' takes no value`);
      flags[spec.key] = true;
    }
  }
  return { flags: flags as AgentFlags };
}
