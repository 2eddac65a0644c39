/**
 * The specification's "Permissions needed by UI areas" table, for the areas this console has.
 * A screen or control is offered only when the user holds what its area needs. Per-device
 * limits (resources) are the broker's to judge; GET /remote/access/{id} says what to show on a
 * device page.
 *
 * The spec lists several permissions for the Devices area (cve, inventory and reports reads as
 * well); here the device list needs device:read and each panel of the device page needs its own
 * permission (inventory:read for the inventory, cve:read for its CVEs).
 */
import type { Permission } from '../../shared/permissions.js';
import { can } from './session.js';

export const AREAS = {
  devices: ['device:read'],
  pendingHosts: ['device:approve'],
  /** Removing an approved device: DELETE /removeapprovedhost needs this one. */
  approveDevices: ['device:approve'],
  updateAttributes: ['device:manage'],
  /** Groups and tags (PUT /grouptree, PATCH /grouptree/{node_id}); per-node limits are the broker's. */
  manageTree: ['device:manage'],
  inventory: ['inventory:read'],
  connectConsole: ['remote-access:connect'],
  remoteConsole: ['device:read', 'remote-access:connect'],
  remoteManage: ['remote-access:manage'],
  /** Live sessions: one's own (connect) or others' on devices one manages — either permission (ANY_OF). */
  remoteSessions: ['remote-access:connect', 'remote-access:manage'],
  filesManager: ['files:read'],
  filesWrite: ['files:manage'],
  audit: ['audit:read'],
  logs: ['reports:read'],
  cve: ['cve:read'],
  cveManage: ['cve:manage'],
  logsMarkRead: ['reports:acknowledge'],
  company: ['company:read'],
  companyManage: ['company:manage'],
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
const ANY_OF = new Set<Area>(['remoteSessions']);
