/**
 * Every permission of the product, with what it grants and whether it can be narrowed to devices
 * by resource strings. Shared by the broker (role validation, route table) and the web console.
 */
export const PERMISSIONS = {
  'analysis:read': { description: 'Read fleet analysis and organisation statistics', accepts_resources: false },
  'audit:read': { description: 'Read the audit log', accepts_resources: false },
  'billing:read': { description: 'Read the subscription', accepts_resources: false },
  'billing:manage': { description: 'Change and cancel the subscription', accepts_resources: false },
  'bootstrap-keys:read': { description: 'Read bootstrap keys used to enrol devices', accepts_resources: false },
  'bootstrap-keys:manage': { description: 'Create, change and delete bootstrap keys', accepts_resources: false },
  'company:read': { description: 'Read the company record', accepts_resources: false },
  'company:manage': { description: 'Change the company record', accepts_resources: false },
  'configuration:read': { description: 'Read device and group configuration', accepts_resources: true },
  'configuration:manage': { description: 'Change and commit configuration', accepts_resources: true },
  'cve:read': { description: 'Read vulnerability (CVE) findings', accepts_resources: false },
  'cve:manage': { description: 'Manage vulnerability (CVE) findings', accepts_resources: false },
  'device:read': { description: 'Read devices, the group tree, tags and device attributes', accepts_resources: true },
  'device:manage': { description: 'Change the group tree, device attributes and remove devices', accepts_resources: true },
  'device:approve': { description: 'Approve, reject and remove enrolling devices', accepts_resources: false },
  'files:read': { description: 'Read the file store', accepts_resources: false },
  'files:manage': { description: 'Upload, rename and delete files in the file store', accepts_resources: false },
  'inventory:read': { description: 'Read device inventory', accepts_resources: false },
  'metrics:read': { description: 'Read device metrics', accepts_resources: false },
  'remote-access:connect': {
    description: 'Open consoles, tunnels and file copies to devices and reload their agent',
    accepts_resources: true,
  },
  'remote-access:manage': { description: 'Manage remote-access port presets (portmaps)', accepts_resources: true },
  'reports:read': { description: 'Read device reports and logs', accepts_resources: true },
  'reports:markread': { description: 'Mark reports as read', accepts_resources: true },
  'reports:acknowledge': { description: 'Acknowledge reports (mark as read in the log view)', accepts_resources: false },
  'roles:read': { description: 'Read roles and the permission list', accepts_resources: false },
  'roles:manage': { description: 'Create, change and delete roles', accepts_resources: false },
  'users:read': { description: 'Read users', accepts_resources: false },
  'users:manage': { description: 'Create, change, disable and delete users', accepts_resources: false },
} as const satisfies Record<string, { description: string; accepts_resources: boolean }>;

export type Permission = keyof typeof PERMISSIONS;

/**
 * Permissions none of whose calls is built yet (each answers 501): the role editor lists them
 * last, marked, so a role is not given a grant that does nothing. broker/routes.test.ts keeps this
 * list equal to the route table.
 */
export const NOT_BUILT_PERMISSIONS: readonly Permission[] = [];

export const PERMISSION_NAMES = Object.keys(PERMISSIONS) as Permission[];

export function isPermission(value: string): value is Permission {
  return Object.prototype.hasOwnProperty.call(PERMISSIONS, value);
}

export function acceptsResources(permission: string): boolean {
  return isPermission(permission) && PERMISSIONS[permission].accepts_resources;
}
