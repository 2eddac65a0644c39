/**
 * The edge agent's command line:
 *   npm run agent -- --broker <url> --bootstrap-key-file <file> [--state-dir <dir>] [--ca-file <pem>]
 *   (or --bootstrap-key <key>, or FLEET_BOOTSTRAP_KEY in the environment)
 *   npm run agent -- --config /etc/fleet-agent/config.json          (system service)
 * Installed on a device it is the bundle built by `npm run build:agent`: `fleet-agent --config …`.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Command, Option } from 'commander';
import pino from 'pino';
import { Agent, EXIT_CONFIG } from './agent.js';
import { forgetLauncherEnvironment } from './memory.js';
import { AgentConfigError, DEFAULTS, loadAgentConfig, type AgentFlags } from './options.js';
import { launchedBy, launchInstalled } from './update/launcher.js';
import type { UpdaterOptions } from './update/updater.js';

const EXIT_USAGE = 2;

/** Set by the agent build (agent/packaging/build.ts) to the package version; absent when run from source. */
declare const __FLEET_AGENT_VERSION__: string | undefined;

function agentVersion(): string {
  if (typeof __FLEET_AGENT_VERSION__ === 'string') return __FLEET_AGENT_VERSION__;
  try {
    const pkg = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'package.json');
    return String((JSON.parse(fs.readFileSync(pkg, 'utf8')) as { version?: string }).version ?? '0.0.0');
  } catch {
    return '0.0.0';
  }
}

function parseFlags(argv: string[]): AgentFlags {
  const program = new Command('fleet-agent')
    .description('Fleet edge agent: enrols this device with a broker and serves remote access over one outbound WebSocket.')
    .option('--broker <url>', 'broker base URL, e.g. https://broker.example.com')
    .option('--bootstrap-key <key>', 'bootstrap key to enrol with (from POST /api/v2/bootstrapkey); needed until the device is enrolled')
    .option('--bootstrap-key-file <file>', 'read the bootstrap key from this file (or set FLEET_BOOTSTRAP_KEY), so it does not show in the process list')
    .option('--state-dir <dir>', `where the device key and enrolment state live (default ${DEFAULTS.stateDir})`)
    .option('--ca-file <pem>', 'trust only the CA certificate(s) in this PEM file for the broker (https)')
    .option('--insecure-http', 'allow a plain http:// broker URL to another machine (or FLEET_INSECURE_HTTP=1); warned about at every start')
    .option('--config <file.json>', 'JSON config file: broker, bootstrap_key, state_dir, ca_file, exit_on_reload, log_level, … (command-line options win)')
    .option('--exit-on-reload', 'exit with code 0 on a reload request, for a service manager to restart the agent')
    .option('--log-level <level>', 'fatal, error, warn, info, debug, trace or silent (default info)')
    .addOption(new Option('--retry-min-ms <ms>', 'first reconnect backoff ceiling (default 1000)').hideHelp())
    .addOption(new Option('--retry-max-ms <ms>', 'reconnect backoff cap (default 60000)').hideHelp())
    .addOption(new Option('--inventory-interval-ms <ms>', 'inventory report interval (default 600000)').hideHelp())
    .option('--metrics-interval-ms <ms>', 'how often metrics are sampled (default 60000)')
    .option('--metrics-flush-ms <ms>', 'how often queued metrics are sent to the broker (default 300000)')
    .addOption(new Option('--update-deadline-ms <ms>', 'an updated agent not welcomed by the broker in this time is rolled back (default 300000)').hideHelp())
    .option('--metrics-queue-max <n>', 'samples kept while the broker is out of reach; the oldest go first (default 20000)')
    .exitOverride()
    .configureOutput({ writeErr: (s) => process.stderr.write(s) });
  try {
    program.parse(argv, { from: 'node' });
  } catch (err) {
    const code = (err as { exitCode?: number }).exitCode ?? EXIT_USAGE;
    process.exit(code === 0 ? 0 : EXIT_USAGE);
  }
  return program.opts<AgentFlags>();
}

async function main(): Promise<void> {
  forgetLauncherEnvironment();
  const flags = parseFlags(process.argv);
  const read = () => loadAgentConfig(flags);
  let first;
  try {
    first = read();
  } catch (err) {
    if (err instanceof AgentConfigError) {
      process.stderr.write(`fleet-agent: ${err.message}\n`);
      process.exit(EXIT_USAGE);
    }
    throw err;
  }
  // Structured logs on stderr; the bootstrap key never reaches them.
  const log = pino(
    {
      name: 'fleet-agent',
      level: first.logLevel,
      redact: { paths: ['bootstrapKey', '*.bootstrapKey', 'bootstrap_key', '*.bootstrap_key'], censor: '[redacted]' },
    },
    pino.destination(2),
  );
  const version = agentVersion();
  // Agent updates: only a bundled build updates itself. The installed package's agent is the launcher:
  // it runs an installed update instead of itself; the version it runs knows the package through launchedBy().
  let install: UpdaterOptions['install'];
  if (typeof __FLEET_AGENT_VERSION__ === 'string') {
    const by = launchedBy();
    if (by && by.version === version) install = { packageDir: by.packageDir, packageVersion: by.packageVersion, launched: true };
    else if (!by) {
      const packageDir = path.dirname(fileURLToPath(import.meta.url));
      const updateLog = log.child({ module: 'launcher' });
      const tookOver = await launchInstalled({
        stateDir: first.stateDir,
        packageDir,
        packageVersion: version,
        deadlineMs: first.updateDeadlineMs,
        log: (level, msg, detail) => updateLog[level](detail ?? {}, msg),
        exit: (code) => {
          log.flush();
          process.exit(code);
        },
      });
      if (tookOver) return;
      install = { packageDir, packageVersion: version, launched: false };
    }
  }
  let config = first;
  const agent = new Agent(
    () => {
      // On a reload the configuration is read again; a broken file keeps the last good one.
      try {
        config = read();
        log.level = config.logLevel;
      } catch (err) {
        if (!(err instanceof AgentConfigError)) throw err;
        log.error({ error: err.message }, 'configuration not reloaded: keeping the previous one');
      }
      return config;
    },
    log,
    version,
    install,
  );
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.once(signal, () => {
      log.info({ signal }, 'stopping');
      agent.stop();
    });
  }
  log.info({ version }, 'fleet agent starting');
  let code: number;
  try {
    code = await agent.run();
  } catch (err) {
    log.fatal({ err }, 'agent failed');
    code = 1;
  }
  log.flush();
  process.exit(code === EXIT_CONFIG || code === 0 ? code : 1);
}

void main();
