import readline from 'node:readline/promises';
import { AccessService } from './access/access.js';
import { AuditService } from './audit/service.js';
import { ChangeEpoch } from './cache.js';
import { CveService } from './cve/service.js';
import { DevicesService } from './devices/service.js';
import { DeviceScopes } from './devices/scope.js';
import { ConfigError, loadConfig, type Config } from './environment.js';
import { openStore } from './db/database.js';
import { applyHeapSettings } from './heap.js';
import { createLogger } from './logger.js';
import { createAdministrator, countUsers } from './users/bootstrap.js';

/** After SIGTERM and SHUTDOWN_DRAIN_MS, how long closing may take before the process exits anyway. */
const SHUTDOWN_HARD_MS = 5000;

const USAGE = `Usage:
  npm start                      run the broker (configuration from the environment; see docs/configuration.md)
  npm start -- --with-agent      run the broker and an agent for this machine, enrolled as a device
  npm start -- create-admin      create a user with the Administrator role (prompts for email and password)
  npm start -- audit-verify      check the audit chain; exits 1 naming the first entry that does not match
  npm start -- cve-import <file or folder>
                                 import a vulnerability feed (OSV JSON: a file, or a folder of .json files) and match every device`;

async function cveImportCommand(config: Config, target: string | undefined): Promise<void> {
  if (!target) {
    console.error(USAGE);
    process.exitCode = 2;
    return;
  }
  const files = CveService.readPath(target);
  const parsed = CveService.readFiles(files);
  for (const e of parsed.errors.slice(0, 20)) console.error(`${e.file}: ${e.error}`);
  if (parsed.errors.length > 20) console.error(`… and ${parsed.errors.length - 20} more files not imported`);
  const store = await openStore(config.databaseUrl, config.databaseSchema, undefined, config.databaseQueryTimeoutMs);
  try {
    const epoch = new ChangeEpoch();
    const access = new AccessService(new DeviceScopes(store.db, epoch));
    const cve = new CveService({ db: store.db, logger: createLogger(config.logLevel), access, devices: new DevicesService(store, config, access, epoch) });
    const done = await store.transaction(async () => {
      const result = await cve.importAdvisories(parsed.advisories);
      await new AuditService(store.db, store.dialect).recordChange({
        event: 'cve.import',
        action: 'cve-import',
        options: { files: files.length, ...result, skipped: parsed.skipped, errors: parsed.errors.length },
        ip: 'cli',
      });
      return result;
    });
    console.log(
      `Imported ${done.advisories} advisories (${done.cves} CVE ids) from ${files.length} files; ${parsed.skipped} skipped (withdrawn or not about an OS distribution), ` +
        `${parsed.errors.length} files refused. ${done.matches} findings on ${done.devices_affected} devices.`,
    );
    if (parsed.errors.length > 0) process.exitCode = 1;
  } finally {
    await store.close();
  }
}

async function auditVerifyCommand(config: Config): Promise<void> {
  const store = await openStore(config.databaseUrl, config.databaseSchema, undefined, config.databaseQueryTimeoutMs);
  try {
    const result = await new AuditService(store.db, store.dialect).verify();
    const from = result.checkpoint
      ? ` (from the checkpoint at entry ${result.checkpoint.id}: entries through ${result.checkpoint.deleted_through} were deleted by the retention)`
      : '';
    if (result.ok) {
      console.log(`Audit chain intact: ${result.entries} entries${from}.`);
      return;
    }
    const bad = result.first_bad;
    console.error(
      `Audit chain broken at entry ${bad?.id}: its sha is ${bad?.sha || '(none)'}, expected ${bad?.expected} (${result.entries} entries before it match)${from}.`,
    );
    process.exitCode = 1;
  } finally {
    await store.close();
  }
}

async function createAdminCommand(config: Config): Promise<void> {
  const store = await openStore(config.databaseUrl, config.databaseSchema, undefined, config.databaseQueryTimeoutMs);
  try {
    const rl = readline.createInterface({ input: process.stdin, output: process.stdout, terminal: process.stdin.isTTY });
    const email = config.adminEmail ?? (await rl.question('Email: ')).trim();
    const password = config.adminPassword ?? (await rl.question('Password (at least 8 characters): '));
    rl.close();
    if (password.length < 8) throw new Error('the password must be at least 8 characters');
    await createAdministrator(store.db, email, password);
    console.log(`Created ${email} with the Administrator role.`);
  } finally {
    await store.close();
  }
}

async function main(): Promise<void> {
  // Whatever the broker writes (database, file store, outbox, uploads being received) is for its own user only.
  process.umask(0o077);
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) {
      console.error(`Invalid configuration: ${err.message}`);
      process.exit(2);
    }
    throw err;
  }
  const args = process.argv.slice(2);
  const withAgent = args.includes('--with-agent');
  const command = args.find((a) => !a.startsWith('--'));
  if (command === 'create-admin') return createAdminCommand(config);
  if (command === 'audit-verify') return auditVerifyCommand(config);
  if (command === 'cve-import') return cveImportCommand(config, args.filter((a) => !a.startsWith('--'))[1]);
  if ((command && command !== 'serve') || args.some((a) => a.startsWith('--') && a !== '--with-agent')) {
    console.error(USAGE);
    process.exit(2);
  }
  const logger = createLogger(config.logLevel);
  applyHeapSettings();
  // A stop asked for while the broker starts (it may be waiting for its database) ends it at once.
  const stopEarly = () => process.exit(0);
  process.once('SIGINT', stopEarly);
  process.once('SIGTERM', stopEarly);
  // The server (and the agent beside it) are loaded only to serve: the commands above open the database alone.
  const { startBroker } = await import('./server.js');
  const broker = await startBroker(config, logger);
  process.off('SIGINT', stopEarly);
  process.off('SIGTERM', stopEarly);
  const agent = withAgent ? await (await import('./local-agent.js')).startLocalAgent(broker.services, broker.url, logger) : undefined;
  logger.info({ url: broker.url, database: broker.services.store.dialect, dataDir: config.dataDir }, 'broker listening');
  const store = broker.services.store;
  const users = await countUsers(store.db);
  console.log(`\nFleet broker on ${broker.url}  (web console at /, API at /api/v2, sandbox at /api/sandbox)`);
  if (broker.firstUser === 'created') console.log(`First user created: sign in as ${config.adminEmail} with ADMIN_PASSWORD.`);
  else if (users === 0) {
    console.log('No user exists yet, so sign-in is refused. Create the first one with:');
    console.log('  ADMIN_EMAIL=you@example.com ADMIN_PASSWORD=<password> npm start      (on an empty database), or');
    console.log('  npm start -- create-admin');
  } else console.log('Sign in with your email and password.');
  if (agent) console.log('An agent for this machine runs beside the broker and enrols itself as a device (--with-agent).');
  const stop = async (signal: string) => {
    logger.info({ signal, drainMs: config.shutdownDrainMs }, 'shutting down');
    // Whatever hangs (a database that stopped answering mid-query), the process ends this long after.
    setTimeout(() => {
      logger.warn({ afterMs: config.shutdownDrainMs + SHUTDOWN_HARD_MS }, 'shutdown did not finish in time: exiting');
      process.exit(1);
    }, config.shutdownDrainMs + SHUTDOWN_HARD_MS).unref();
    // Not ready from now on: a load balancer checking /api/v2/health stops sending here first.
    broker.services.health.drain();
    if (config.shutdownDrainMs > 0) await new Promise((resolve) => setTimeout(resolve, config.shutdownDrainMs));
    agent?.kill('SIGTERM');
    await broker.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop('SIGINT'));
  process.once('SIGTERM', () => void stop('SIGTERM'));
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
