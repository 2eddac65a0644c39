import { z } from 'zod';
import { auditRoutes } from './audit/routes.js';
import { configRoutes } from './config/routes.js';
import { cveRoutes } from './cve/routes.js';
import { deviceAuthRoutes } from './auth/device-auth-routes.js';
import { authRoutes } from './auth/routes.js';
import { devicesRoutes } from './devices/routes.js';
import { enrolRoutes } from './enrol/routes.js';
import { eventsRoutes } from './events/routes.js';
import { filesRoutes } from './files/routes.js';
import { defineRoute, type RouteSpec } from './http/route.js';
import { routeKey, SPEC_CALLS } from './http/spec-calls.js';
import { healthRoutes } from './health/routes.js';
import { installRoutes } from './install/routes.js';
import { inventoryRoutes } from './inventory/routes.js';
import { metricsRoutes } from './metrics/routes.js';
import { remoteRoutes } from './remote/routes.js';
import { appsRoutes } from './apps/routes.js';
import { sshRoutes } from './ssh/routes.js';
import { rolesRoutes } from './roles/routes.js';
import { usersRoutes } from './users/routes.js';
import { reportsRoutes } from './reports/routes.js';
import { companyRoutes } from './company/routes.js';
import { billingRoutes } from './billing/routes.js';
import { webConsoleRoutes } from './webconsole/routes.js';

/** Calls of the specification that no domain has built yet: authenticated, authorized, then 501. */
function unbuiltCalls(built: RouteSpec[]): RouteSpec[] {
  const have = new Set(built.map((r) => routeKey(r.method, r.path)));
  return SPEC_CALLS.filter((c) => !have.has(routeKey(c.method, c.path))).map((c) =>
    defineRoute({
      method: c.method,
      path: c.path,
      tag: 'not-built',
      summary: `${c.method.toUpperCase()} ${c.path} (not built yet: answers 501)`,
      access: c.permission,
      params: z.record(z.string(), z.string()),
      query: z.record(z.string(), z.unknown()),
      body: z.unknown(),
      notImplemented: true,
      audit: false,
      handler: async () => undefined,
    }),
  );
}

/** The route table: every call of the API with the permission it needs. */
export function routeTable(): RouteSpec[] {
  const built = [
    ...authRoutes,
    ...deviceAuthRoutes,
    ...usersRoutes,
    ...rolesRoutes,
    ...devicesRoutes,
    ...eventsRoutes,
    ...filesRoutes,
    ...auditRoutes,
    ...enrolRoutes,
    ...inventoryRoutes,
    ...metricsRoutes,
    ...remoteRoutes,
    ...appsRoutes,
    ...sshRoutes,
    ...reportsRoutes,
    ...companyRoutes,
    ...billingRoutes,
    ...configRoutes,
    ...installRoutes,
    ...webConsoleRoutes,
    ...cveRoutes,
    ...healthRoutes,
  ];
  // Static paths first, so `/file/stats` is not taken by a `/file/{x}` pattern.
  const all = [...built, ...unbuiltCalls(built)];
  return all.sort((a, b) => Number(a.path.includes('{')) - Number(b.path.includes('{')));
}
