/**
 * The specification's "Permissions needed by UI areas" table, for the areas this console has.
 * A screen or control is offered only when the user holds what its area needs. Per-device
 * limits (resources) are the broker's to judge; GET /remote/access/{id} says what to show on a
 * device page.
 *
 * The spec lists several permissions for the Devices area: device:read for the list and the
 * device page, and cve:read, inventory:read and reports:read for what those show of each device.
 * The list and page need device:read; each panel of the device page needs the permission of its
 * data (inventory:read for the inventory, reports:read for the reports, cve:read for its CVEs), so a user lacking one sees the rest and the API
 * refuses that panel's calls.
 */
import type { Permission } from '../../shared/permissions.js';
import { can } from './session.js';

export const AREAS = {
  /** The landing screen; each of its cards also needs the permission of its own data. */
  dashboard: ['analysis:read', 'device:read', 'inventory:read', 'metrics:read', 'reports:read'],
  devices: ['device:read'],
  /** The Devices area's reports panel (GET /reportsummary/{id}). */
  deviceReports: ['reports:read'],
  /** "Devices, Show configuration": GET /config/{device_id}. */
  showConfiguration: ['configuration:read'],
  map: ['inventory:read'],
  pendingHosts: ['device:approve'],
  /** "Devices, Update attributes and Delete": attribute editing and removing a device (DELETE /inventory/{id}). */
  updateAttributes: ['device:manage'],
  /** Groups and tags (PUT /grouptree, PATCH /grouptree/{node_id}); per-node limits are the broker's. */
  manageTree: ['device:manage'],
  inventory: ['inventory:read'],
  connectConsole: ['remote-access:connect'],
  /** "Remote console": the device page's Tunnels panel (port presets, `fleet connect`); the broker still decides per device (GET /remote/access/{id}). */
  remoteConsole: ['device:read', 'inventory:read', 'remote-access:connect'],
  remoteManage: ['remote-access:manage'],
  /** Live sessions: one's own (connect) or others' on devices one manages — either permission (ANY_OF). */
  remoteSessions: ['remote-access:connect', 'remote-access:manage'],
  filesManager: ['files:read'],
  filesWrite: ['files:manage'],
  /** The Configure area; changing (staging, committing, discarding) needs configuration:manage. */
  configure: ['configuration:read', 'device:read'],
  configureModify: ['configuration:manage'],
  /** "Configure, File selector": the file store's files offered in file source fields (GET /files). */
  configureFileSelector: ['files:read'],
  /** "Configure, User and Ports popups": a device's users and listening ports offered (GET /inventoryreport/{id}). */
  configureInventoryPopups: ['inventory:read'],
  audit: ['audit:read'],
  /**
   * A console's recording (GET /remote/recordings/{id}): its owner (who held remote-access:connect)
   * or a manager of remote access on its device — either permission (ANY_OF); the broker decides per recording.
   */
  recordings: ['remote-access:connect', 'remote-access:manage'],
  /** "Audit, Show reports": a configuration commit's reports, in Logs (GET /reportlist?commit_id=). */
  auditReports: ['reports:read'],
  analysis: ['analysis:read', 'device:read'],
  /** The device page's Metrics panel (GET /device/{id}/metrics and /metrics/latest). */
  deviceMetrics: ['metrics:read'],
  logs: ['reports:read'],
  cve: ['cve:read'],
  cveManage: ['cve:manage'],
  logsMarkRead: ['reports:acknowledge'],
  company: ['company:read'],
  companyManage: ['company:manage'],
  /** "Order subscription": GET /stripe/subscriptions; Manage: checkout, customer portal, cancelling. */
  subscription: ['billing:read'],
  subscriptionManage: ['billing:manage'],
  bootstrapKeys: ['bootstrap-keys:read', 'device:read'],
  bootstrapKeysManage: ['bootstrap-keys:manage'],
  users: ['users:read'],
  usersManage: ['roles:read', 'users:manage'],
  roles: ['roles:read'],
  rolesManage: ['roles:manage'],
} as const satisfies Record<string, readonly Permission[]>;

export type Area = keyof typeof AREAS;

/** Whether the signed-in user may use this area of the console. */
export function allowed(area: Area): boolean {
  const needed: readonly Permission[] = AREAS[area];
  return ANY_OF.has(area) ? needed.some((p) => can(p)) : can(...needed);
}

/** Areas open to holders of any one of their permissions, rather than all of them. */
const ANY_OF = new Set<Area>(['remoteSessions', 'recordings']);
