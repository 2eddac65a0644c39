import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { createApp } from './app.js';
import { UpgradeRouter } from './http/upgrade.js';
import { upgradeTable } from './upgrades.js';
import { emptyUploadTmpDir, ensurePrivateDir } from './data-dir.js';
import type { Config } from './environment.js';
import { isUnreachable, openStore, type Store } from './db/database.js';
import { capConnectionsPerAddress, limitAcceptRate, serverTimeouts } from './http/connection-limits.js';
import { ensureSystemNodes } from './devices/scope.js';
import { createLogger } from './logger.js';
import { acceptTlsOnSamePort, edgeCertificate } from './qbee/edge.js';
import { closeServices, createServices, type ServiceOptions, type Services } from './services.js';
import { bootstrapFirstUser } from './users/bootstrap.js';

/**
 * Connections the kernel may hold completed but not yet accepted (it caps this at net.core.somaxconn).
 * Node's default, 511, overflows when thousands of agents come back at once after a restart: the
 * kernel then drops their SYNs, and each waits out TCP's retransmission (1 s, 3 s, 7 s…) and its
 * handshake timeout instead of being accepted a moment later.
 */
export const LISTEN_BACKLOG = 4096;

export interface RunningBroker {
  url: string;
  port: number;
  server: http.Server;
  services: Services;
  firstUser: 'created' | 'exists' | 'missing';
  close(): Promise<void>;
}

/** Delays between attempts to reach the database at start: doubling from the first to the last. */
const DB_RETRY_FIRST_MS = 500;
const DB_RETRY_MAX_MS = 15_000;

/**
 * A database that cannot be reached at start (it is starting too, a network partition) is tried
 * again with a growing delay, each failure logged, until it answers or the broker is stopped;
 * any other failure (refused credentials, a failed migration) ends the start at once.
 */
async function openStoreRetrying(config: Config, logger: Logger): Promise<Store> {
  let delay = DB_RETRY_FIRST_MS;
  for (let attempt = 1; ; attempt++) {
    try {
      const store = await openStore(config.databaseUrl, config.databaseSchema, logger, config.databaseQueryTimeoutMs);
      if (attempt > 1) logger.info({ attempt }, 'database reached');
      return store;
    } catch (err) {
      if (!isUnreachable(err)) throw err;
      logger.warn(
        { attempt, retryInMs: delay, error: (err as Error).message, errorCode: (err as { code?: string }).code },
        'database unreachable at start: retrying',
      );
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(DB_RETRY_MAX_MS, delay * 2);
    }
  }
}

/** Opens the store, builds the services and serves HTTP(S) with WebSocket upgrades. */
export async function startBroker(config: Config, logger: Logger = createLogger(config.logLevel), options: ServiceOptions = {}): Promise<RunningBroker> {
  ensurePrivateDir(config.dataDir, logger);
  // Interrupted uploads of an earlier run, whatever the file store (the directory store also empties its staging).
  await emptyUploadTmpDir(config.dataDir, logger);
  const store = await openStoreRetrying(config, logger);
  await ensureSystemNodes(store.db);
  const firstUser = await bootstrapFirstUser(store.db, config);
  const services = await createServices(config, logger, store, options);
  const app = createApp(services);
  const upgrades = new UpgradeRouter(upgradeTable(), services, services.authenticator, logger);
  // A request to a device web UI's own origin (APPS_HOST) never reaches the broker's application, nor the reverse.
  const serve = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const target = services.apps.target(req);
    if (target) void services.apps.handle(req, res, target);
    else app(req, res);
  };
  const server = config.tlsCertFile
    ? https.createServer({ ...serverTimeouts, cert: fs.readFileSync(config.tlsCertFile), key: fs.readFileSync(config.tlsKeyFile as string) }, serve)
    : http.createServer(serverTimeouts, serve);
  // Without a certificate of its own the broker still answers TLS on its port (qbee-cli dials https to its edge).
  const closeWaiting = config.tlsCertFile ? () => {} : acceptTlsOnSamePort(server, () => edgeCertificate(config.dataDir), logger);
  capConnectionsPerAddress(server, config.maxConnectionsPerAddress);
  limitAcceptRate(server, config.acceptRatePerAddress);
  server.on('upgrade', (req, socket, head) => {
    const target = services.apps.target(req);
    if (target) void services.apps.handleUpgrade(req, socket, head, target);
    else upgrades.handle(req, socket, head);
  });
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port: config.port, host: config.host, backlog: LISTEN_BACKLOG }, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const host = config.host === '0.0.0.0' || config.host === '::' ? '127.0.0.1' : config.host;
  const url = `${config.tlsCertFile ? 'https' : 'http'}://${host}:${port}`;
  await services.cluster?.start(url);
  let closed = false;
  return {
    url,
    port,
    server,
    services,
    firstUser,
    async close() {
      if (closed) return;
      closed = true;
      // Stop listening first: while the services close, a reconnecting fleet is refused by the kernel
      // instead of being accepted, parsed and cut by this process (which made a stop with 19,000
      // agents take seconds more).
      const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
      closeWaiting();
      await closeServices(services);
      server.closeAllConnections();
      await stopped;
      await store.close();
    },
  };
}
