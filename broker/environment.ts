import crypto from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { DEFAULT_AGENT_ARTIFACTS_DIR, DEFAULT_CLI_ARTIFACTS_DIR } from './paths.js';
import { APPS_HOST_PATTERN } from './apps/origin.js';

/** Broker configuration, read once from the environment and validated at start. */
export interface Config {
  port: number;
  host: string;
  dataDir: string;
  /** `sqlite:<file>` or `postgres://...` */
  databaseUrl: string;
  /** PostgreSQL schema to use (tests isolate themselves with it); empty for the default. */
  databaseSchema: string;
  /**
   * PostgreSQL: how long the broker waits for a reply before it drops the connection
   * (DATABASE_QUERY_TIMEOUT_MS; the server's statement timeout is 5 s under it). A partition that
   * loses connections for good costs up to this.
   */
  databaseQueryTimeoutMs: number;
  adminEmail?: string;
  adminPassword?: string;
  /** Without it, mail is written to `<dataDir>/outbox` as .eml files. */
  smtpUrl?: string;
  mailFrom: string;
  /** Base URL users reach the broker at; used in mails (password links). */
  publicUrl?: string;
  /** Signing secret for JWTs; generated and kept in `<dataDir>/jwt-secret` when not given. */
  jwtSecret?: string;
  /** Lifetime of an access token (seconds). */
  tokenTtlSeconds: number;
  /** Lifetime of a login session / refresh token (seconds). */
  sessionTtlSeconds: number;
  /** Subscription seats: active users allowed. */
  seats: number;
  maxCustomAttributes: number;
  /** File store quota in bytes. */
  fileQuotaBytes: number;
  /** Maximum size of one uploaded file in bytes. */
  fileMaxBytes: number;
  /** Where the file store keeps files: `dir` (DATA_DIR/files) or `db` (the database, shared by several brokers). */
  fileStore: 'dir' | 'db';
  tlsCertFile?: string;
  tlsKeyFile?: string;
  logLevel: string;
  /** Whether to trust X-Forwarded-For (behind a reverse proxy). */
  trustProxy: boolean;
  /** Keep-alive ping interval of agent connections (ms); an agent silent for 3 intervals is cut off. */
  agentHeartbeatMs: number;
  /** How long an agent connection may take to answer the challenge (AGENT_AUTH_TIMEOUT_MS) before it is closed as "retry later". */
  agentAuthTimeoutMs: number;
  /** Agent connections still in their handshake (not authenticated), at most, in total… */
  agentHandshakesMax: number;
  /** …and from one address, so one source cannot hold every slot. */
  agentHandshakesPerAddress: number;
  /** Open TCP connections from one address (the socket's, not X-Forwarded-For); 0 for no cap. */
  maxConnectionsPerAddress: number;
  /** New TCP connections per second per socket address (a bucket of 4 s worth); 0: no limit. */
  acceptRatePerAddress: number;
  /** Console recordings older than this many days are removed (at start and daily). */
  recordingRetentionDays: number;
  /** Agent reports older than this many days are removed (hourly, and at start). */
  reportRetentionDays: number;
  /**
   * Audit entries older than this many days are deleted (hourly, and at start) behind a checkpoint
   * entry that verification starts from (AUDIT_RETENTION_DAYS); 0, the default, keeps every entry.
   */
  auditRetentionDays: number;
  /** Reports kept per device at most: the oldest go first, on every insert. */
  reportMaxPerDevice: number;
  /** Reports kept in all at most: the oldest go first (hourly, and at start). */
  reportMaxTotal: number;
  /** Reports one device may send per minute; more are dropped (and counted in the log). */
  reportRatePerDevice: number;
  /** Stripe: secret API key; without it the billing:manage calls answer 409 billing_not_configured. */
  stripeSecretKey?: string;
  /** Stripe API base URL (tests point it at a local server); default https://api.stripe.com. */
  stripeApiBase?: string;
  /** Stripe price of one seat, for checkout sessions. */
  stripePriceId?: string;
  /** A console whose user's connection dropped is kept this long for its owner to re-attach (0: ended at once). */
  consoleDetachGraceSeconds: number;
  /**
   * How often live remote sessions, signed-in SSH connections and device web UI sessions are
   * re-authorized (REMOTE_RECHECK_MS): a withdrawn grant or disabled user ends them within this time.
   */
  remoteRecheckMs: number;
  /** Where GET /install.sh and GET /install/{artifact} take the agent build from (`npm run build:agent`). */
  agentArtifactsDir: string;
  /** Where GET /install-cli.sh and the CLI tarball come from (`npm run build:cli`; from source, built there on demand). */
  cliArtifactsDir: string;
  /** Device metrics: raw samples kept (hours), hourly roll-ups kept (days), samples stored per device and hour at most. */
  metrics: { rawRetentionHours: number; rollupRetentionDays: number; maxPerDeviceHour: number };
  /**
   * Several brokers on one PostgreSQL database (broker/cluster): on when `clusterSecret` is set.
   * This broker's name among them (BROKER_ID; default hostname:port, or a random one with PORT=0).
   */
  brokerId: string;
  /** Where the other brokers reach this one (BROKER_PEER_URL); default: the URL it listens at. */
  brokerPeerUrl?: string;
  /** Shared by every broker of the cluster: authenticates peer links (CLUSTER_SECRET, ≥ 32 characters). */
  clusterSecret?: string;
  /** How often presence is refreshed (CLUSTER_HEARTBEAT_MS); a broker silent for 3 of them is gone. */
  clusterHeartbeatMs: number;
  /**
   * The web console's map tiles: an `http(s)://` URL template with `{z}`, `{x}` and `{y}` (and
   * optionally `{s}`); without it the map draws its bundled world outline and fetches nothing.
   */
  mapTileUrl?: string;
  /** The credit the tile provider asks to be shown on the map. */
  mapTileAttribution: string;
  /**
   * Device web UIs (APPS_HOST): the host whose subdomains `<device>-<port>.<APPS_HOST>` serve them,
   * each its own origin, never the broker's; optionally with a port. Without it they are not offered.
   */
  appsHost?: string;
  /**
   * On SIGTERM/SIGINT, how long the broker keeps serving while its health check answers 503
   * (SHUTDOWN_DRAIN_MS), so a load balancer stops sending before the connections close.
   */
  shutdownDrainMs: number;
  /** The SSH gateway's port (SSH_PORT; 0: any free port); undefined: no SSH gateway (the default). */
  sshPort?: number;
  /** Registered public keys sign in to the SSH gateway too, not only certificates (SSH_USER_KEYS; off by default). */
  sshUserKeys: boolean;
  /** How long an SSH gateway connection may take to sign in (SSH_AUTH_TIMEOUT_MS) before it is closed. */
  sshAuthTimeoutMs: number;
}

export class ConfigError extends Error {
  constructor(
    readonly variable: string,
    message: string,
  ) {
    super(`${variable}: ${message}`);
  }
}

type Env = Record<string, string | undefined>;

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) throw new ConfigError(name, `must be a whole number, got "${raw}"`);
  const value = Number(raw);
  if (value < min || value > max) throw new ConfigError(name, `must be between ${min} and ${max}, got ${value}`);
  return value;
}

function boolean(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (/^(1|true|yes|on)$/i.test(raw)) return true;
  if (/^(0|false|no|off)$/i.test(raw)) return false;
  throw new ConfigError(name, `must be true or false, got "${raw}"`);
}

/** Reads the configuration from the environment; throws ConfigError naming the bad variable. */
export function loadConfig(env: Env = process.env): Config {
  const dataDir = path.resolve(env.DATA_DIR || './data');
  const databaseUrl = env.DATABASE_URL || `sqlite:${path.join(dataDir, 'fleet.sqlite')}`;
  if (!/^(sqlite:|postgres(ql)?:\/\/)/.test(databaseUrl)) {
    throw new ConfigError('DATABASE_URL', 'must start with sqlite: or postgres://');
  }
  const databaseSchema = env.DATABASE_SCHEMA || '';
  if (databaseSchema && !/^[a-z_][a-z0-9_]{0,62}$/.test(databaseSchema)) {
    throw new ConfigError('DATABASE_SCHEMA', 'must be a lowercase SQL identifier');
  }
  const adminEmail = env.ADMIN_EMAIL || undefined;
  const adminPassword = env.ADMIN_PASSWORD || undefined;
  if (adminEmail && !/^[^\s@]+@[^\s@]+$/.test(adminEmail)) throw new ConfigError('ADMIN_EMAIL', 'is not an email address');
  if (adminEmail && !adminPassword) throw new ConfigError('ADMIN_PASSWORD', 'is required with ADMIN_EMAIL');
  if (adminPassword && adminPassword.length < 8) throw new ConfigError('ADMIN_PASSWORD', 'must be at least 8 characters');
  if (env.SMTP_URL && !/^smtps?:\/\//.test(env.SMTP_URL)) throw new ConfigError('SMTP_URL', 'must start with smtp:// or smtps://');
  if (env.PUBLIC_URL && !/^https?:\/\//.test(env.PUBLIC_URL)) throw new ConfigError('PUBLIC_URL', 'must start with http:// or https://');
  if (env.JWT_SECRET !== undefined && env.JWT_SECRET !== '' && env.JWT_SECRET.length < 32) {
    throw new ConfigError('JWT_SECRET', 'must be at least 32 characters');
  }
  if (!!env.TLS_CERT_FILE !== !!env.TLS_KEY_FILE)
    throw new ConfigError(env.TLS_CERT_FILE ? 'TLS_KEY_FILE' : 'TLS_CERT_FILE', 'TLS_CERT_FILE and TLS_KEY_FILE go together');
  const trustProxy = boolean(env, 'TRUST_PROXY', false);
  const agentHandshakesMax = integer(env, 'AGENT_HANDSHAKES_MAX', 1024, 1, 1_000_000);
  const agentHandshakesPerAddress = integer(env, 'AGENT_HANDSHAKES_PER_ADDRESS', 32, 1, 1_000_000);
  if (agentHandshakesPerAddress > agentHandshakesMax) {
    throw new ConfigError('AGENT_HANDSHAKES_PER_ADDRESS', `must not exceed AGENT_HANDSHAKES_MAX (${agentHandshakesMax}), got ${agentHandshakesPerAddress}`);
  }
  // Behind a reverse proxy every connection comes from the proxy: no cap unless one is asked for.
  const maxConnectionsPerAddress = integer(env, 'MAX_CONNECTIONS_PER_ADDRESS', trustProxy ? 0 : 256, 0, 1_000_000);
  const acceptRatePerAddress = integer(env, 'ACCEPT_RATE_PER_ADDRESS', trustProxy ? 0 : 64, 0, 1_000_000);
  const logLevel = env.LOG_LEVEL || 'info';
  const fileStore = env.FILE_STORE || 'dir';
  if (fileStore !== 'dir' && fileStore !== 'db') throw new ConfigError('FILE_STORE', `must be dir or db, got "${fileStore}"`);
  if (env.STRIPE_API_BASE && !/^https?:\/\/[^/]+\/?$/.test(env.STRIPE_API_BASE)) {
    throw new ConfigError('STRIPE_API_BASE', 'must be http(s)://host[:port] without a path');
  }
  const mapTileUrl = env.MAP_TILE_URL || undefined;
  if (mapTileUrl && mapTileProblem(mapTileUrl)) throw new ConfigError('MAP_TILE_URL', mapTileProblem(mapTileUrl) as string);
  const appsHost = env.APPS_HOST ? env.APPS_HOST.toLowerCase() : undefined;
  if (appsHost && !APPS_HOST_PATTERN.test(appsHost))
    throw new ConfigError('APPS_HOST', 'must be a host name, optionally with :port, e.g. apps.example.com (its subdomains must all reach the broker)');
  if ((env.MAP_TILE_ATTRIBUTION ?? '').length > 500) throw new ConfigError('MAP_TILE_ATTRIBUTION', 'must be at most 500 characters');
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) throw new ConfigError('LOG_LEVEL', `unknown level "${logLevel}"`);
  const port = integer(env, 'PORT', 8080, 0, 65535);
  const host =
    os
      .hostname()
      .replace(/[^A-Za-z0-9.-]/g, '-')
      .slice(0, 60) || 'broker';
  const brokerId = env.BROKER_ID || (port === 0 ? `${host}-${crypto.randomBytes(4).toString('hex')}` : `${host}:${port}`);
  if (!/^[A-Za-z0-9._:-]{1,100}$/.test(brokerId)) throw new ConfigError('BROKER_ID', 'must be 1 to 100 letters, digits, dots, colons, dashes or underscores');
  if (env.BROKER_PEER_URL && !/^https?:\/\/[^/?#\s]+\/?$/.test(env.BROKER_PEER_URL)) {
    throw new ConfigError('BROKER_PEER_URL', 'must be http(s)://host[:port] without a path');
  }
  if (env.CLUSTER_SECRET && env.CLUSTER_SECRET.length < 32) throw new ConfigError('CLUSTER_SECRET', 'must be at least 32 characters');
  if (env.CLUSTER_SECRET && !/^postgres/.test(databaseUrl))
    throw new ConfigError('CLUSTER_SECRET', 'several brokers share a PostgreSQL database: set DATABASE_URL to postgres://…');
  return {
    port,
    host: env.HOST || '0.0.0.0',
    dataDir,
    databaseUrl,
    databaseSchema,
    databaseQueryTimeoutMs: integer(env, 'DATABASE_QUERY_TIMEOUT_MS', 65_000, 10_000, 3_600_000),
    adminEmail,
    adminPassword,
    smtpUrl: env.SMTP_URL || undefined,
    mailFrom: env.MAIL_FROM || 'Fleet <fleet@localhost>',
    publicUrl: env.PUBLIC_URL || undefined,
    jwtSecret: env.JWT_SECRET || undefined,
    tokenTtlSeconds: integer(env, 'TOKEN_TTL_SECONDS', 900, 10, 86400),
    sessionTtlSeconds: integer(env, 'SESSION_TTL_SECONDS', 7 * 86400, 60, 365 * 86400),
    seats: integer(env, 'SEATS', 100, 1, 1_000_000),
    maxCustomAttributes: integer(env, 'MAX_CUSTOM_ATTRIBUTES', 100, 1, 10_000),
    fileQuotaBytes: integer(env, 'FILE_QUOTA_BYTES', 10 * 1024 ** 3, 1024, Number.MAX_SAFE_INTEGER),
    fileMaxBytes: integer(env, 'FILE_MAX_BYTES', 1024 ** 3, 1, Number.MAX_SAFE_INTEGER),
    fileStore,
    tlsCertFile: env.TLS_CERT_FILE || undefined,
    tlsKeyFile: env.TLS_KEY_FILE || undefined,
    logLevel,
    trustProxy,
    agentHeartbeatMs: integer(env, 'AGENT_HEARTBEAT_MS', 30_000, 1000, 600_000),
    agentAuthTimeoutMs: integer(env, 'AGENT_AUTH_TIMEOUT_MS', 10_000, 1000, 120_000),
    agentHandshakesMax,
    agentHandshakesPerAddress,
    maxConnectionsPerAddress,
    acceptRatePerAddress,
    recordingRetentionDays: integer(env, 'RECORDING_RETENTION_DAYS', 90, 1, 36500),
    reportRetentionDays: integer(env, 'REPORT_RETENTION_DAYS', 30, 1, 3650),
    auditRetentionDays: integer(env, 'AUDIT_RETENTION_DAYS', 0, 0, 36500),
    reportMaxPerDevice: integer(env, 'REPORT_MAX_PER_DEVICE', 5000, 10, 1_000_000),
    reportMaxTotal: integer(env, 'REPORT_MAX_TOTAL', 2_000_000, 100, 100_000_000),
    reportRatePerDevice: integer(env, 'REPORT_RATE_PER_DEVICE', 600, 1, 1_000_000),
    stripeSecretKey: env.STRIPE_SECRET_KEY || undefined,
    stripeApiBase: env.STRIPE_API_BASE || undefined,
    stripePriceId: env.STRIPE_PRICE_ID || undefined,
    consoleDetachGraceSeconds: integer(env, 'CONSOLE_DETACH_GRACE_SECONDS', 60, 0, 3600),
    remoteRecheckMs: integer(env, 'REMOTE_RECHECK_MS', 2000, 100, 60_000),
    sshPort: env.SSH_PORT === undefined || env.SSH_PORT === '' ? undefined : integer(env, 'SSH_PORT', 0, 0, 65535),
    sshUserKeys: boolean(env, 'SSH_USER_KEYS', false),
    sshAuthTimeoutMs: integer(env, 'SSH_AUTH_TIMEOUT_MS', 20_000, 1000, 600_000),
    agentArtifactsDir: env.AGENT_ARTIFACTS_DIR ? path.resolve(env.AGENT_ARTIFACTS_DIR) : DEFAULT_AGENT_ARTIFACTS_DIR,
    cliArtifactsDir: env.CLI_ARTIFACTS_DIR ? path.resolve(env.CLI_ARTIFACTS_DIR) : DEFAULT_CLI_ARTIFACTS_DIR,
    metrics: {
      rawRetentionHours: integer(env, 'METRICS_RAW_RETENTION_HOURS', 24, 1, 24 * 366),
      rollupRetentionDays: integer(env, 'METRICS_ROLLUP_RETENTION_DAYS', 400, 1, 3660),
      maxPerDeviceHour: integer(env, 'METRICS_MAX_PER_DEVICE_HOUR', 20_000, 1, 10_000_000),
    },
    brokerId,
    brokerPeerUrl: env.BROKER_PEER_URL ? env.BROKER_PEER_URL.replace(/\/$/, '') : undefined,
    clusterSecret: env.CLUSTER_SECRET || undefined,
    clusterHeartbeatMs: integer(env, 'CLUSTER_HEARTBEAT_MS', 5000, 200, 600_000),
    mapTileUrl,
    mapTileAttribution: env.MAP_TILE_ATTRIBUTION ?? '',
    ...(appsHost ? { appsHost } : {}),
    shutdownDrainMs: integer(env, 'SHUTDOWN_DRAIN_MS', 0, 0, 300_000),
  };
}

/** Why a map tile URL template is unusable, or undefined when it is fine. */
export function mapTileProblem(template: string): string | undefined {
  if (template.length > 500) return 'must be at most 500 characters';
  // The host goes into the console's Content-Security-Policy: letters, digits, dots, dashes, `{s}` and a port only.
  if (!/^https?:\/\/[A-Za-z0-9.{}-]+(:\d{1,5})?\/\S*$/.test(template)) return 'must be an http(s):// URL template: https://host[:port]/path with {z}, {x}, {y}';
  for (const part of ['{z}', '{x}', '{y}']) if (!template.includes(part)) return `must contain ${part}, e.g. https://tiles.example.net/{z}/{x}/{y}.png`;
  return undefined;
}

/** The origin(s) map tiles come from, for the console's Content-Security-Policy; none without tiles. */
export function mapTileOrigins(template: string | undefined): string[] {
  if (!template) return [];
  const host = /^(https?:\/\/[^/]+)/.exec(template)?.[1];
  if (!host) return [];
  // `{s}` stands for a subdomain (a, b, c): allow any of them.
  return [host.replace('{s}', '*')];
}
