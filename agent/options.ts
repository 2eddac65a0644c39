import fs from 'node:fs';
import path from 'node:path';
import { brokerUrlPolicy } from './broker-client.js';

/** The agent's settings: from a JSON config file (for a system service) and/or the command line. */
export interface AgentConfig {
  /** Base URL of the broker: `https://broker.example.com` (http only to loopback, or with insecureHttp). */
  broker: string;
  /** Plain http to a broker that is not on this machine was allowed explicitly (logged as a warning at every start). */
  insecureHttp: boolean;
  /** Needed to enrol (first start, or after the broker forgot or revoked this device). */
  bootstrapKey?: string;
  /** Key pair and enrolment state. */
  stateDir: string;
  /** PEM file of the CA(s) to trust for the broker's certificate instead of the system store. */
  caFile?: string;
  /** On a reload request, exit with code 0 (a service manager restarts the agent). */
  exitOnReload: boolean;
  logLevel: string;
  /** Reconnect backoff: the first ceiling and the cap (full jitter below the ceiling). */
  retryMinMs: number;
  retryMaxMs: number;
  /** How often the inventory is reported while connected. */
  inventoryIntervalMs: number;
  /** How often metrics are sampled, how often the queue is sent, and how many samples wait at most. */
  metricsIntervalMs: number;
  metricsFlushMs: number;
  metricsQueueMax: number;
  /**
   * The filesystem root configuration bundles write under: `/` on a device. Tests and development
   * set `FLEET_AGENT_CONFIG_ROOT` to a scratch directory so that applied files land there.
   */
  configRoot: string;
  /** An updated agent must be welcomed by the broker within this time, or the previous version comes back. */
  updateDeadlineMs: number;
}

/** What the command line gives; each field overrides the config file's. */
export interface AgentFlags {
  config?: string;
  broker?: string;
  bootstrapKey?: string;
  /** A file holding the bootstrap key, so that it does not show in the process list. */
  bootstrapKeyFile?: string;
  stateDir?: string;
  caFile?: string;
  exitOnReload?: boolean;
  /** Allow a plain http broker URL to a host that is not this machine. */
  insecureHttp?: boolean;
  logLevel?: string;
  retryMinMs?: string;
  retryMaxMs?: string;
  inventoryIntervalMs?: string;
  metricsIntervalMs?: string;
  metricsFlushMs?: string;
  metricsQueueMax?: string;
  updateDeadlineMs?: string;
}

export class AgentConfigError extends Error {}

const FILE_KEYS: Record<string, keyof AgentConfig | 'bootstrapKeyFile'> = {
  broker: 'broker',
  bootstrap_key: 'bootstrapKey',
  bootstrap_key_file: 'bootstrapKeyFile',
  state_dir: 'stateDir',
  ca_file: 'caFile',
  exit_on_reload: 'exitOnReload',
  insecure_http: 'insecureHttp',
  log_level: 'logLevel',
  retry_min_ms: 'retryMinMs',
  retry_max_ms: 'retryMaxMs',
  inventory_interval_ms: 'inventoryIntervalMs',
  metrics_interval_ms: 'metricsIntervalMs',
  metrics_flush_ms: 'metricsFlushMs',
  metrics_queue_max: 'metricsQueueMax',
  update_deadline_ms: 'updateDeadlineMs',
};

export const DEFAULTS = {
  stateDir: './agent-state',
  logLevel: 'info',
  retryMinMs: 1000,
  retryMaxMs: 60_000,
  inventoryIntervalMs: 10 * 60_000,
  metricsIntervalMs: 60_000,
  metricsFlushMs: 5 * 60_000,
  metricsQueueMax: 20_000,
  updateDeadlineMs: 5 * 60_000,
};

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'];

function readFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new AgentConfigError(`cannot read the config file ${file}: ${(err as Error).message}`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new AgentConfigError(`the config file ${file} is not valid JSON: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new AgentConfigError(`the config file ${file} must hold a JSON object`);
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(parsed as Record<string, unknown>)) {
    const name = FILE_KEYS[key];
    if (!name) throw new AgentConfigError(`the config file ${file} has an unknown setting "${key}" (known: ${Object.keys(FILE_KEYS).join(', ')})`);
    out[name] = value;
  }
  // Relative paths in a config file are relative to the file, not to wherever the service starts.
  for (const name of ['stateDir', 'caFile', 'bootstrapKeyFile'] as const) {
    if (typeof out[name] === 'string') out[name] = path.resolve(path.dirname(path.resolve(file)), out[name] as string);
  }
  return out;
}

function integer(name: string, value: unknown, min: number, max: number): number {
  const n = typeof value === 'string' && /^\d+$/.test(value) ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) {
    throw new AgentConfigError(`${name} must be a whole number between ${min} and ${max}, got ${JSON.stringify(value)}`);
  }
  return n;
}

function text(name: string, value: unknown): string | undefined {
  if (value === undefined || value === null || value === '') return undefined;
  if (typeof value !== 'string') throw new AgentConfigError(`${name} must be a string`);
  return value;
}

/** Test/dev only: a directory configuration bundles write under instead of `/`. */
export const CONFIG_ROOT_ENV = 'FLEET_AGENT_CONFIG_ROOT';

function configRootOf(env: NodeJS.ProcessEnv): string {
  const dir = env[CONFIG_ROOT_ENV]?.trim();
  if (!dir) return '/';
  if (!path.isAbsolute(dir)) throw new AgentConfigError(`${CONFIG_ROOT_ENV} must be an absolute path, got ${JSON.stringify(dir)}`);
  let isDir = false;
  try {
    isDir = fs.statSync(dir).isDirectory();
  } catch {
    // reported below
  }
  if (!isDir) throw new AgentConfigError(`${CONFIG_ROOT_ENV} ${dir} is not an existing directory`);
  return path.resolve(dir);
}

/** `FLEET_INSECURE_HTTP=1` does what --insecure-http does. */
export const INSECURE_HTTP_ENV = 'FLEET_INSECURE_HTTP';

/** The environment variable an agent takes its bootstrap key from, out of sight of `ps`. */
export const BOOTSTRAP_KEY_ENV = 'FLEET_BOOTSTRAP_KEY';

function keyFromFile(file: string): string {
  let key: string;
  try {
    key = fs.readFileSync(file, 'utf8').trim();
  } catch (err) {
    throw new AgentConfigError(`cannot read the bootstrap key file ${file}: ${(err as Error).message}`);
  }
  if (!key) throw new AgentConfigError(`the bootstrap key file ${file} is empty`);
  return key;
}

/**
 * The bootstrap key, first found of: --bootstrap-key, --bootstrap-key-file, $FLEET_BOOTSTRAP_KEY,
 * then the config file's bootstrap_key or bootstrap_key_file.
 */
function bootstrapKeyOf(flags: AgentFlags, file: Record<string, unknown>, env: NodeJS.ProcessEnv): string | undefined {
  if (flags.bootstrapKey !== undefined && flags.bootstrapKeyFile !== undefined) {
    throw new AgentConfigError('give either --bootstrap-key or --bootstrap-key-file, not both');
  }
  if (flags.bootstrapKey !== undefined) return text('bootstrap_key', flags.bootstrapKey);
  if (flags.bootstrapKeyFile !== undefined) return keyFromFile(flags.bootstrapKeyFile);
  const fromEnv = env[BOOTSTRAP_KEY_ENV]?.trim();
  if (fromEnv) return fromEnv;
  const fromConfig = text('bootstrap_key', file.bootstrapKey);
  if (fromConfig) return fromConfig;
  const keyFile = text('bootstrap_key_file', file.bootstrapKeyFile);
  return keyFile ? keyFromFile(keyFile) : undefined;
}

/** Reads the config file (when given) and applies the command line over it; throws AgentConfigError. */
export function loadAgentConfig(flags: AgentFlags, env: NodeJS.ProcessEnv = process.env): AgentConfig {
  const file = flags.config ? readFile(flags.config) : {};
  const pick = (name: keyof AgentFlags & keyof AgentConfig) => (flags[name] !== undefined ? flags[name] : file[name]);

  const broker = text('broker', pick('broker'));
  if (!broker) throw new AgentConfigError('give the broker URL: --broker https://broker.example.com (or "broker" in the config file)');
  let url: URL;
  try {
    url = new URL(broker);
  } catch {
    throw new AgentConfigError(`broker "${broker}" is not a URL`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new AgentConfigError(`broker must be an http:// or https:// URL, got ${url.protocol}`);
  if (url.username || url.password) throw new AgentConfigError('broker URL must not carry credentials');
  const insecureSetting = pick('insecureHttp');
  if (insecureSetting !== undefined && typeof insecureSetting !== 'boolean') throw new AgentConfigError('insecure_http must be true or false');
  const insecureEnv = env[INSECURE_HTTP_ENV]?.trim();
  if (insecureEnv && !['0', '1', 'true', 'false'].includes(insecureEnv)) throw new AgentConfigError(`${INSECURE_HTTP_ENV} must be 1 or 0`);
  const insecureHttp = insecureSetting === true || insecureEnv === '1' || insecureEnv === 'true';
  const policy = brokerUrlPolicy(url, insecureHttp);
  if (!policy.ok) throw new AgentConfigError(policy.message);

  const caFile = text('ca_file', pick('caFile'));
  if (caFile && !fs.existsSync(caFile)) throw new AgentConfigError(`CA file ${caFile} does not exist`);
  const logLevel = text('log_level', pick('logLevel')) ?? DEFAULTS.logLevel;
  if (!LEVELS.includes(logLevel)) throw new AgentConfigError(`log level must be one of ${LEVELS.join(', ')}`);
  const exitOnReload = pick('exitOnReload');
  if (exitOnReload !== undefined && typeof exitOnReload !== 'boolean') throw new AgentConfigError('exit_on_reload must be true or false');
  const retryMinMs = integer('retry_min_ms', pick('retryMinMs') ?? DEFAULTS.retryMinMs, 10, 3_600_000);
  const retryMaxMs = integer('retry_max_ms', pick('retryMaxMs') ?? DEFAULTS.retryMaxMs, retryMinMs, 3_600_000);

  return {
    broker: url.toString().replace(/\/+$/, ''),
    insecureHttp: policy.insecure,
    bootstrapKey: bootstrapKeyOf(flags, file, env),
    stateDir: path.resolve(text('state_dir', pick('stateDir')) ?? DEFAULTS.stateDir),
    caFile: caFile ? path.resolve(caFile) : undefined,
    exitOnReload: exitOnReload === true,
    logLevel,
    retryMinMs,
    retryMaxMs,
    inventoryIntervalMs: integer('inventory_interval_ms', pick('inventoryIntervalMs') ?? DEFAULTS.inventoryIntervalMs, 1000, 86_400_000),
    metricsIntervalMs: integer('metrics_interval_ms', pick('metricsIntervalMs') ?? DEFAULTS.metricsIntervalMs, 1000, 86_400_000),
    metricsFlushMs: integer('metrics_flush_ms', pick('metricsFlushMs') ?? DEFAULTS.metricsFlushMs, 1000, 86_400_000),
    metricsQueueMax: integer('metrics_queue_max', pick('metricsQueueMax') ?? DEFAULTS.metricsQueueMax, 100, 1_000_000),
    configRoot: configRootOf(env),
    updateDeadlineMs: integer('update_deadline_ms', pick('updateDeadlineMs') ?? DEFAULTS.updateDeadlineMs, 1000, 86_400_000),
  };
}
