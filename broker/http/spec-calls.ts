import type { Permission } from '../../shared/permissions.js';
import type { Method } from './route.js';

/**
 * Every call of the specification's "Calls grouped by permission" table. The route table must
 * hold each of them; a call not built yet answers 501 (after authentication and authorization).
 */
const TABLE: Record<string, string> = {
  'analysis:read': 'GET /analysis; POST /analysis; GET /analysis/orgstats',
  'audit:read': 'GET /commitlist',
  'billing:read': 'GET /stripe/subscriptions',
  'billing:manage': 'POST /stripe/create-customer-portal; POST /stripe/create-checkout-session; DELETE /stripe/cancel-subscription/{uuid}',
  'bootstrap-keys:read': 'GET /bootstrapkey/{bootstrapkey_id}; GET /bootstrapkeylist',
  'bootstrap-keys:manage': 'PUT /bootstrapkey/{bootstrap_key}; POST /bootstrapkey; DELETE /bootstrapkey/{bootstrap_key}',
  'company:read': 'GET /company/{company_id}',
  'company:manage': 'PUT /company/{company_id}; PATCH /company/{company_id}',
  'configuration:read':
    'GET /change/{sha}; GET /changelist; GET /commit/{sha}; GET /config/{type}/{item_id}; GET /configpreview/{type}/{item_id}; GET /config/{device_id}; GET /configpreview/{node_id}',
  'configuration:manage': 'DELETE /changes; DELETE /change/{sha}; POST /change; POST /commit',
  'cve:read': 'GET /cve/{cve_id}; GET /cvelist; GET /cvescorestats; GET /cve_hosts_max_count',
  'cve:manage': 'PATCH /cve/{cve_id}; GET /cve/status/cves; DELETE /cve/{cve_id}',
  'device:read':
    'GET /grouptree; GET /grouptree/{node_id}; GET /node/{node_id}; GET /groupreportssummary/{group_id}; GET /deviceattribute/{device_id}; GET /tagslist',
  'device:manage': 'PUT /grouptree; PATCH /deviceattribute/{device_id}; DELETE /inventory/{device_id}; PATCH /grouptree/{node_id}',
  'device:approve': 'POST /pendinghost; GET /pendinghost; DELETE /removeapprovedhost/{node_id}; DELETE /pendinghost/{node_id}',
  'files:read': 'GET /file; GET /files; GET /file/stats',
  'files:manage': 'POST /file; POST /file/createdir; PATCH /file; DELETE /file',
  'inventory:read':
    'GET /inventory/{device_id}; GET /inventorylist; GET /inventory; GET /inventoryreport/{device_id}; GET /inventoryreport/docker/{device_id}; GET /inventorysummarybytype/{node_id}; GET /inventoryonlinestats',
  'remote-access:manage': 'POST /service-connect/portmap; PATCH /service-connect/portmap',
  'reports:acknowledge': 'PATCH /reportmarkread',
  'reports:read': 'GET /reportlist; GET /reportsummary/{device_id}',
  'roles:read': 'GET /role/{role_id}; GET /roleslist; GET /permissionslist',
  'roles:manage': 'POST /role; PUT /role/{role_id}; DELETE /role/{role_id}',
  'users:read': 'GET /user/{user_id}; GET /userlist',
  'users:manage': 'POST /user; PUT /user/{user_id}; PATCH /user/{user_id}; DELETE /user/{user_id}',
};

export interface SpecCall {
  method: Method;
  path: string;
  permission: Permission;
}

export const SPEC_CALLS: SpecCall[] = Object.entries(TABLE).flatMap(([permission, calls]) =>
  calls.split('; ').map((call) => {
    const [method, path] = call.split(' ');
    return { method: method.toLowerCase() as Method, path, permission: permission as Permission };
  }),
);

/**
 * Express matches `/config/{type}/{item_id}` and `/config/{device_id}` by segment count, but
 * `/configpreview/{type}/{item_id}` vs `/configpreview/{node_id}` likewise: no two spec paths
 * collide, which the route-table test checks.
 */
export function routeKey(method: string, path: string): string {
  return `${method.toUpperCase()} ${path.replace(/\{[^}]+\}/g, '{}')}`;
}
