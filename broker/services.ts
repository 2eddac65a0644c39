import type { Logger } from 'pino';
import { AccessService } from './access/access.js';
import type { ControlMessage } from '../shared/protocol.js';
import { AgentHub } from './agents/hub.js';
import { BrokerKey } from './agents/broker-key.js';
import type { AgentLocator } from './agents/locator.js';
import { AuditService } from './audit/service.js';
import { DeviceAuthService, deviceCodeLookupLimit } from './auth/device-auth.js';
import { Authenticator } from './auth/credentials.js';
import { AuthService } from './auth/service.js';
import { ChangeEpoch } from './cache.js';
import { ConfigService } from './config/service.js';
import { deleteDeviceConfigStates } from './config/device-rows.js';
import { ClusterService } from './cluster/service.js';
import { CveService } from './cve/service.js';
import { deleteDeviceCveMatches } from './cve/store.js';
import type { Config } from './environment.js';
import { WriteBatch } from './db/batch.js';
import type { Store } from './db/database.js';
import { ExpirySweep } from './db/expiry.js';
import { DevicesService } from './devices/service.js';
import { DeviceScopes } from './devices/scope.js';
import { EnrolService } from './enrol/service.js';
import { DbFilesService } from './files/db-store.js';
import { FilesService } from './files/service.js';
import type { FileStore } from './files/store.js';
import { HealthService } from './health/service.js';
import { InventoryService } from './inventory/service.js';
import { deleteDeviceInventory } from './inventory/store.js';
import { MailService } from './mail/service.js';
import { MetricsService } from './metrics/service.js';
import { storedFleetFacts } from './metrics/orgstats.js';
import { deleteDeviceMetrics, MetricsStore } from './metrics/store.js';
import { QbeeTransport } from './qbee/transport.js';
import { SshAuthority } from './ssh/authority.js';
import { SshGateway } from './ssh/gateway.js';
import { SshKeys } from './ssh/keys.js';
import { SshService } from './ssh/service.js';
import { DeviceEventStream } from './events/stream.js';
import { RemoteService } from './remote/service.js';
import { AppsService } from './apps/service.js';
import { TicketStore } from './remote/tickets.js';
import { ReportsService } from './reports/service.js';
import { CompanyService } from './company/service.js';
import { BillingService } from './billing/service.js';
import { RolesService } from './roles/service.js';
import { SettingsStore } from './settings.js';
import { isActiveUser, rolesOfUsers, usersOfRoles } from './users/directory.js';
import { UsersService } from './users/service.js';
import { AgentUpdates } from './install/updates.js';

/**
 * Everything the broker is made of, as createServices builds it. No one receives the whole bag:
 * each service is given the few collaborators it uses (createServices), each domain's routes the
 * deps they declare (broker/routes.ts), the request pipeline its PipelineDeps (broker/app.ts).
 */
export interface Services {
  config: Config;
  /** the agent this broker publishes, announced to agents and sent to them (agent updates) */
  agentUpdates: AgentUpdates;
  logger: Logger;
  store: Store;
  settings: SettingsStore;
  /** the broker's signing key, which agents pin at enrolment (shared by every broker on the database) */
  brokerKey: BrokerKey;
  /** Bumped by every change made through the API: empties the hot-path caches. */
  epoch: ChangeEpoch;
  auth: AuthService;
  /** Every entry point's credential (bearer, ticket, qbee's bare token) → the caller: broker/auth/credentials.ts. */
  authenticator: Authenticator;
  /** OAuth 2.0 device authorization (RFC 8628): CLI sign-in approved in the web console. */
  deviceAuth: DeviceAuthService;
  access: AccessService;
  audit: AuditService;
  mail: MailService;
  users: UsersService;
  roles: RolesService;
  devices: DevicesService;
  /** The file store: DATA_DIR/files, or the database with FILE_STORE=db (several brokers). */
  files: FileStore;
  enrol: EnrolService;
  inventory: InventoryService;
  /** Device metrics (agents' samples, series, analysis, fleet counts). */
  metrics: MetricsService;
  /** Several brokers on one database (CLUSTER_SECRET set): presence, peer links, notifications. */
  cluster?: ClusterService;
  /** Agents connected to this broker (connection facts, status). */
  agents: AgentHub;
  /** How remote access, enrolment and inventory reach agents: the hub, or what wraps it. */
  locator: AgentLocator;
  /**
   * Sends a device-level message (ControlMessage) to the device's agent on whichever broker holds
   * it, signed by that broker when it changes the device; false when it is connected nowhere known.
   */
  deliver(deviceId: string, msg: ControlMessage): boolean;
  remote: RemoteService;
  /** Device web UIs on their own origins (APPS_HOST), proxied over tunnel channels. */
  apps: AppsService;
  /** Live device.online/offline events for the web console (GET /api/v2/events). */
  events: DeviceEventStream;
  /** qbee's native remote-access transport (qbee-cli's connect, terminal, copy). */
  qbee: QbeeTransport;
  /** The SSH gateway (SSH_PORT) and its certificate authority. */
  ssh: SshService;
  /** Agent reports (the Logs): what agents send, read/unread per user, retention. */
  reports: ReportsService;
  /** The installation's company record. */
  company: CompanyService;
  /** Seats and, with STRIPE_SECRET_KEY, Stripe. */
  billing: BillingService;
  /** Configuration management: changes, commits, rendering, pushing to agents. */
  configuration: ConfigService;
  /** Deletes expired shared state (rate limits, tickets, device codes) every minute. */
  expiry: ExpirySweep;
  /** CVE findings: the imported OSV feed matched against installed packages, and decisions. */
  cve: CveService;
  /** Readiness for a load balancer (GET /api/v2/health): draining, database, cluster. */
  health: HealthService;
}

export interface ServiceOptions {
  /**
   * Wraps the hub into the AgentLocator the other services use: where a multi-broker locator
   * will plug in, and where tests put in-process agents (test/support/fake-agent.ts).
   */
  locator?: (hub: AgentHub) => AgentLocator;
}

/**
 * The composition root: builds every service in dependency order, each with the narrow
 * collaborators it uses. Two cycles are broken here: the hub asks enrolment who a device is and
 * hands inventory reports on, while enrolment and inventory reach agents through the hub (the
 * hub gets them late-bound); the group tree's online status comes from the locator
 * (setOnlineSource).
 */
export async function createServices(config: Config, logger: Logger, store: Store, options: ServiceOptions = {}): Promise<Services> {
  const settings = new SettingsStore(store.db);
  const brokerKey = await BrokerKey.load(settings);
  const epoch = new ChangeEpoch();
  const mail = new MailService(config, logger, store);
  const auth = new AuthService(store.db, config, settings, mail, epoch, store);
  const deviceAuth = new DeviceAuthService(
    store.db,
    {
      startSession: (userId, ip, userAgent) => auth.startSession(userId, ip, userAgent),
      isActiveUser: (userId) => isActiveUser(store.db, userId),
    },
    config,
    Date.now,
    deviceCodeLookupLimit(store),
  );
  const access = new AccessService(new DeviceScopes(store.db, epoch));
  // Several brokers on one database: audit's restart closes only this broker's sessions (and gone ones').
  const cluster: ClusterService | undefined = config.clusterSecret
    ? new ClusterService({
        config,
        logger,
        db: store.db,
        epoch,
        sessions: { closeOpenSessions: (reason, keep) => audit.closeOpenSessions(reason, keep) },
      })
    : undefined;
  const audit: AuditService = new AuditService(store.db, store.dialect, {
    brokerId: config.brokerId,
    retentionDays: config.auditRetentionDays,
    logger,
    ...(cluster ? { otherLiveBrokers: () => cluster.otherLiveBrokers() } : {}),
  });
  const users = new UsersService(store, config, logger, auth, access);
  // Roles ask users who holds them, while users ask roles which exist: the users' side is handed in.
  const roles = new RolesService(store, access, { usersOfRoles, rolesOfUsers });
  // A removed device takes along what inventory, metrics, CVE findings and configuration hold of it.
  const devices = new DevicesService(store, config, access, epoch, [
    deleteDeviceInventory,
    deleteDeviceMetrics,
    deleteDeviceCveMatches,
    deleteDeviceConfigStates,
  ]);
  const files: FileStore = config.fileStore === 'db' ? new DbFilesService(store, config) : new FilesService(config, logger);

  // The hub asks enrolment who a device is and hands inventory reports on, while both reach agents
  // through the hub: the hub's side is bound late (these run only once agents connect).
  // The writes of each agent's connect (its contact, its "Agent connected" event, its configuration state), committed together
  // with those of the other agents connecting in the same turn: a reconnect storm's thousands.
  const connectWrites = new WriteBatch(store);
  const agents: AgentHub = new AgentHub({
    config,
    logger,
    db: store.db,
    writes: connectWrites,
    standings: { standing: (deviceId) => enrol.standing(deviceId) },
    inventory: { record: (deviceId, data) => inventory.record(deviceId, data) },
    brokerKey,
  });
  const local: AgentLocator = options.locator?.(agents) ?? agents;
  const locator: AgentLocator = cluster ? cluster.locator(agents, local) : local;
  const enrol: EnrolService = new EnrolService(store.db, devices, locator, store, store);
  const cve = new CveService({ db: store.db, logger, access, devices });
  // A device's packages or OS changed: its CVE findings are matched again (a failure is logged, the inventory kept).
  const inventory: InventoryService = new InventoryService(store.db, access, devices, locator, {
    packagesChanged: (deviceId) => cve.rematchDevice(deviceId),
    logger,
  });
  // Typed inventory payloads (software, containers, users, ports, …) from agents.
  agents.handle('inventory_item', (deviceId, msg) => inventory.recordItem(deviceId, msg));
  // "Seen" of a device connected here is its last heartbeat (the database is written once a minute).
  devices.setHeardSource((deviceId) => agents.lastHeard(deviceId));
  // The group tree's online status is the live connection state.
  devices.setOnlineSource((deviceId) => locator.isConnected(deviceId));
  // Reports by severity join /analysis/orgstats once a reports domain exists: pass its counter as `reports`.
  const metrics = new MetricsService({
    store: new MetricsStore(store.db, store.dialect),
    limits: config.metrics,
    logger,
    access,
    devices,
    fleet: storedFleetFacts(store.db, (deviceId) => locator.isConnected(deviceId)),
    // the reports domain is made below; orgstats asks it only when called
    reports: (deviceIds) => reports.severityCounts(deviceIds),
  });
  agents.handle('metrics', (deviceId, msg) => metrics.ingest(deviceId, msg.samples).then(() => undefined));
  // Device web UIs: their tickets are the remote tickets (one table); their sessions are listed with the others.
  const apps = new AppsService({ config, logger, auth, access, audit, locator, tickets: new TicketStore(store.db) });
  const remote = new RemoteService({
    config,
    logger,
    db: store.db,
    auth,
    access,
    audit,
    locator,
    others: { list: () => apps.list(), end: (id, by) => apps.endById(id, by) },
    ...(cluster ? { directory: cluster.sessions, brokerId: cluster.brokerId } : {}),
  });
  cluster?.sessions.bind(remote.sessions);
  const authenticator = new Authenticator({ auth, redeemTicket: (ticket) => remote.tickets.redeem(ticket) });
  const events = new DeviceEventStream({
    hub: agents,
    pending: enrol.pendingChanges,
    access,
    logger,
    ...(cluster ? { elsewhere: cluster.presence, isConnected: (deviceId: string) => locator.isConnected(deviceId) } : {}),
  });
  const qbee = new QbeeTransport({ logger, audit, sessions: remote.sessions, remote });
  const sshAuthority = await SshAuthority.load(settings);
  const sshKeys = new SshKeys(store.db);
  const ssh = new SshService(
    sshAuthority,
    new SshGateway({
      config,
      logger,
      authority: sshAuthority,
      auth,
      audit,
      sessions: remote.sessions,
      access,
      keys: sshKeys,
      // `ssh root@<name>.<fleet host>`: a device the user may connect to, by its name (unique among those).
      findDevice: async (principal, label) => {
        const named = (await devices.listVisibleDevices(principal, 'remote-access:connect')).filter((d) => d.title.toLowerCase() === label.toLowerCase());
        return named.length === 1 ? named[0].deviceId : undefined;
      },
    }),
    auth,
    sshKeys,
  );
  const reports = new ReportsService({ db: store.db, logger, config, access, devices });
  // Reports agents send outside a configuration run (watchers, agent events); the configuration
  // domain hands those of `config_applied` to reports.record itself.
  agents.handle('reports', async (deviceId, msg) => {
    await reports.recordChecked(deviceId, msg.reports);
  });
  // The agent's own events, as qbee shows them: bundle agent_internal.
  agents.on('connected', (deviceId) => {
    const version = agents.connectionInfo(deviceId)?.version;
    connectWrites
      .run(() => reports.agentEvent(deviceId, 'INFO', `Agent connected${version ? ` (version ${version})` : ''}`))
      .catch((err) => logger.warn({ err, deviceId }, 'agent event not recorded'));
  });
  const company = new CompanyService({ db: store.db, auth, users, access });
  const billing = new BillingService({ db: store.db, logger, config, settings, users, company });
  const configuration = new ConfigService({
    store,
    settings,
    agentDefaults: () => company.agentDefaults(),
    access,
    audit,
    files,
    agents: {
      send: (deviceId, msg) => agents.send(deviceId, msg),
      isConnected: (deviceId) => locator.isConnected(deviceId),
      open: (deviceId, kind, params) => locator.open(deviceId, kind, params),
      ...(cluster ? { pushElsewhere: (deviceIds: string[]) => cluster.configElsewhere(deviceIds) } : {}),
    },
    reports,
    logger,
    connectWrites,
  });
  agents.handle('config_applied', (deviceId, msg) => configuration.onApplied(deviceId, msg));
  agents.handle('file_request', (deviceId, msg) => configuration.onFileRequest(deviceId, msg));
  agents.on('connected', (deviceId) => {
    configuration.onConnected(deviceId).catch((err) => logger.error({ err, deviceId }, 'configuration not sent to the agent'));
  });
  // A commit made through another broker, for an agent connected here.
  cluster?.onConfigWanted((deviceIds) => configuration.pushCurrent(deviceIds));
  // Agent updates: the published agent is announced to each agent and sent over its own connection.
  const agentUpdates = new AgentUpdates({
    dir: config.agentArtifactsDir,
    logger,
    agents,
    ...(cluster ? { onNewRelease: (r: { version: string; sha256: string }) => cluster.announceRelease(r.version, r.sha256) } : {}),
  });
  // Another broker found a new build: this one looks at its own directory now (shared: its agents hear of it at once).
  cluster?.onReleaseHeard((from, version, sha256) => {
    agentUpdates.checkPublished({ from, version, sha256 }).catch((err) => logger.warn({ err }, 'published agent not checked'));
  });
  agents.handle('agent_update_request', (deviceId, msg) => agentUpdates.onRequest(deviceId, msg));
  agents.on('connected', (deviceId) => {
    agentUpdates.onConnected(deviceId).catch((err) => logger.warn({ err, deviceId }, 'agent update not announced'));
  });

  const services: Services = {
    config,
    logger,
    store,
    settings,
    brokerKey,
    epoch,
    auth,
    authenticator,
    deviceAuth,
    access,
    audit,
    mail,
    users,
    roles,
    devices,
    files,
    enrol,
    inventory,
    metrics,
    cluster,
    agents,
    locator,
    deliver: (deviceId, msg) => (cluster ? cluster.deliver(deviceId, msg) : agents.send(deviceId, msg)),
    remote,
    apps,
    events,
    qbee,
    ssh,
    reports,
    company,
    billing,
    configuration,
    agentUpdates,
    expiry: new ExpirySweep(store.db, logger),
    cve,
    health: new HealthService({ db: store.db, cluster }),
  };
  await auth.init();
  await cluster?.init();
  await audit.init();
  for (const s of [users, roles, devices, files, enrol, inventory, metrics, agents, remote, reports, configuration, cve]) {
    await s.init();
  }
  audit.start();
  await ssh.gateway.start();
  events.init();
  configuration.watch(epoch);
  services.expiry.start();
  agentUpdates.start();
  return services;
}

export async function closeServices(services: Services): Promise<void> {
  // Not ready from the first moment of a shutdown: a load balancer stops sending here.
  services.health.drain();
  services.qbee.close();
  await services.ssh.gateway.close();
  services.events.close();
  services.agentUpdates.stop();
  await services.expiry.close();
  await services.configuration.close();
  await services.cve.close();
  await services.reports.close();
  await services.remote.close();
  await services.apps.close();
  // Leaves the cluster before the agents go: one DELETE for their presence, not one per agent.
  await services.cluster?.close();
  for (const s of [services.agents, services.metrics, services.enrol, services.inventory, services.files, services.devices, services.roles, services.users]) {
    await s.close();
  }
  // Last: the summaries of refusals counted until now are written.
  await services.audit.close();
  services.mail.close();
}
