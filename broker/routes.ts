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
import { defineRoute, mountRoute, type MountedRoute, type RouteSpec } from './http/route.js';
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
import type { Services } from './services.js';

/** The deps of routes that use none (the calls not built yet). */
type NoDeps = Record<string, never>;

/** One domain's routes and the deps its handlers get, drawn from the services. */
interface Domain {
  routes: RouteSpec[];
  mount(services: Services): MountedRoute[];
}

/**
 * `D` is the deps type the routes module declares; the object given for it must be that and
 * nothing more (a key it does not declare is `never`), so a handler is never handed the services.
 */
function domain<D, G extends D>(routes: RouteSpec<D>[], deps: (services: Services) => G & Record<Exclude<keyof G, keyof D>, never>): Domain {
  return {
    routes,
    mount(services) {
      const given = deps(services);
      return routes.map((route) => mountRoute(route, given));
    },
  };
}

/**
 * Every domain's routes with what its handlers may reach: the one place where handlers' deps come
 * from the services (a handler reaching anything its routes module does not declare fails tsc).
 */
function domains(): Domain[] {
  return [
    domain(authRoutes, (s) => ({ auth: s.auth, users: s.users, audit: s.audit, logger: s.logger, db: s.store.db })),
    domain(deviceAuthRoutes, (s) => ({ deviceAuth: s.deviceAuth, auth: s.auth, audit: s.audit, logger: s.logger })),
    domain(usersRoutes, (s) => ({ users: s.users, db: s.store.db })),
    domain(rolesRoutes, (s) => ({ roles: s.roles, db: s.store.db })),
    domain(devicesRoutes, (s) => ({ devices: s.devices, db: s.store.db })),
    domain(eventsRoutes, (s) => ({ events: s.events, auth: s.auth })),
    domain(filesRoutes, (s) => ({ files: s.files })),
    domain(auditRoutes, (s) => ({ audit: s.audit, configuration: s.configuration })),
    domain(enrolRoutes, (s) => ({ enrol: s.enrol, brokerKey: s.brokerKey, access: s.access, db: s.store.db })),
    domain(inventoryRoutes, (s) => ({
      inventory: s.inventory,
      agents: s.agents,
      configuration: s.configuration,
      enrol: s.enrol,
      config: s.config,
      db: s.store.db,
    })),
    domain(metricsRoutes, (s) => ({ metrics: s.metrics })),
    domain(remoteRoutes, (s) => ({ remote: s.remote, db: s.store.db })),
    domain(appsRoutes, (s) => ({ apps: s.apps })),
    domain(sshRoutes, (s) => ({ ssh: s.ssh, config: s.config })),
    domain(reportsRoutes, (s) => ({ reports: s.reports })),
    domain(companyRoutes, (s) => ({ company: s.company })),
    domain(billingRoutes, (s) => ({ billing: s.billing })),
    domain(configRoutes, (s) => ({ configuration: s.configuration })),
    domain(installRoutes, (s) => ({ brokerKey: s.brokerKey, config: s.config, logger: s.logger })),
    domain(webConsoleRoutes, (s) => ({ config: s.config })),
    domain(cveRoutes, (s) => ({ cve: s.cve })),
    domain(healthRoutes, (s) => ({ health: s.health })),
  ];
}

/** Calls of the specification that no domain has built yet: authenticated, authorized, then 501. */
function unbuiltCalls(built: RouteSpec[]): RouteSpec<NoDeps>[] {
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

/** The built domains and, after them, the calls none has built. */
function allDomains(): Domain[] {
  const built = domains();
  return [...built, domain(unbuiltCalls(built.flatMap((d) => d.routes)), () => ({}))];
}

/** Static paths first, so `/file/stats` is not taken by a `/file/{x}` pattern (the sort is stable). */
function staticFirst<T>(items: T[], pathOf: (item: T) => string): T[] {
  return items.sort((a, b) => Number(pathOf(a).includes('{')) - Number(pathOf(b).includes('{')));
}

/** The route table: every call of the API with the permission it needs (for documents and tests). */
export function routeTable(): RouteSpec[] {
  return staticFirst(
    allDomains().flatMap((d) => d.routes),
    (r) => r.path,
  );
}

/** The route table as served: each route with its domain's deps, in routeTable's order. */
export function mountedRouteTable(services: Services): MountedRoute[] {
  return staticFirst(
    allDomains().flatMap((d) => d.mount(services)),
    (m) => m.route.path,
  );
}
