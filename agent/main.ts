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
import { Agent, EXIT_CONFIG } from './agent.js';
import { forgetLauncherEnvironment } from './memory.js';
import { EXIT_USAGE, parseCommandLine } from './flags.js';
import { AgentConfigError, loadAgentConfig, type AgentFlags } from './options.js';
import pino from 'pino';
import { launchedBy, launchInstalled } from './update/launcher.js';
import type { UpdaterOptions } from './update/updater.js';

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

/** The flags, or the process ends here: help printed (0), or a usage error (2). */
function parseFlags(args: string[]): AgentFlags {
  const parsed = parseCommandLine(args);
  if ('flags' in parsed) return parsed.flags;
  if (parsed.stdout) fs.writeSync(1, parsed.stdout);
  if (parsed.stderr) fs.writeSync(2, parsed.stderr);
  process.exit(parsed.exit);
}

async function main(): Promise<void> {
  forgetLauncherEnvironment();
  const flags = parseFlags(process.argv.slice(2));
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
