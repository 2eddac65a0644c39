import type { Logger } from 'pino';
import { AccessService } from './access/access.js';
import { AgentHub } from './agents/hub.js';
import { AuditService } from './audit/service.js';
import { DeviceAuthService } from './auth/device-auth.js';
import { AuthService } from './auth/service.js';
import { ChangeEpoch } from './cache.js';
import type { Config } from './config.js';
import type { Store } from './db/database.js';
import { DevicesService } from './devices/service.js';
import { DeviceScopes } from './devices/scope.js';
import { EnrolService } from './enrol/service.js';
import { FilesService } from './files/service.js';
import { UpgradeRouter } from './http/upgrade.js';
import { InventoryService } from './inventory/service.js';
import { MailService } from './mail/service.js';
import { RemoteService } from './remote/service.js';
import { RolesService } from './roles/service.js';
import { SettingsStore } from './settings.js';
import { UsersService } from './users/service.js';

/**
 * Everything a handler may call. Each domain's service receives this object and reaches its
 * neighbours through it, so construction order does not matter.
 */
export interface Services {
  config: Config;
  logger: Logger;
  store: Store;
  settings: SettingsStore;
  /** Bumped by every change made through the API: empties the hot-path caches. */
  epoch: ChangeEpoch;
  auth: AuthService;
  /** OAuth 2.0 device authorization (RFC 8628): CLI sign-in approved in the web console. */
  deviceAuth: DeviceAuthService;
  access: AccessService;
  audit: AuditService;
  mail: MailService;
  users: UsersService;
  roles: RolesService;
  devices: DevicesService;
  files: FilesService;
  enrol: EnrolService;
  inventory: InventoryService;
  /** Agents connected to this broker; remote access reaches them through the AgentLocator seam. */
  agents: AgentHub;
  remote: RemoteService;
  upgrades: UpgradeRouter;
}

export async function createServices(config: Config, logger: Logger, store: Store): Promise<Services> {
  const settings = new SettingsStore(store.db);
  const services = { config, logger, store, settings, epoch: new ChangeEpoch() } as Services;
  services.mail = new MailService(config, logger);
  services.auth = new AuthService(store.db, config, settings, services.mail, services.epoch);
  services.deviceAuth = new DeviceAuthService(
    {
      startSession: (userId, ip, userAgent) => services.auth.startSession(userId, ip, userAgent),
      isActiveUser: async (userId) => (await store.db.selectFrom('users').select('disabled').where('id', '=', userId).executeTakeFirst())?.disabled === 0,
    },
    config,
  );
  services.access = new AccessService(new DeviceScopes(store.db, services.epoch));
  services.audit = new AuditService(store.db);
  services.upgrades = new UpgradeRouter(logger);
  services.users = new UsersService(services);
  services.roles = new RolesService(services);
  services.devices = new DevicesService(services);
  services.files = new FilesService(services);
  services.enrol = new EnrolService(services);
  services.inventory = new InventoryService(services);
  services.agents = new AgentHub(services);
  services.remote = new RemoteService(services);
  await services.auth.init();
  for (const s of [services.users, services.roles, services.devices, services.files, services.enrol, services.inventory, services.agents, services.remote]) {
    await s.init();
  }
  return services;
}

export async function closeServices(services: Services): Promise<void> {
  for (const s of [services.remote, services.agents, services.enrol, services.inventory, services.files, services.devices, services.roles, services.users]) {
    await s.close();
  }
  services.mail.close();
}
