/**
 * Walks the whole route table, built routes and the 501 ones alike, so that a route added later
 * is checked without touching this file:
 * - no token → 401; a user without the route's permission → 403 (`authenticated` routes aside);
 * - a route concerning a device, under a permission that accepts resources: holding the permission
 *   only on `tag:elsewhere` → 403 on a device outside it, and not 401/403 on a device carrying it;
 * - a route naming its devices by resource strings in the body (`targets`): `*`, a node or a tag
 *   outside the caller's `tag:elsewhere` → 403, a covered tag or node → not 401/403; every other
 *   route under a resource-filtered permission names its device or is a listed exception; the same
 *   for a target in a stored record (a port preset) the call addresses;
 * - holding the permission on `*` → neither 401 nor 403;
 * - every error answers the contract shape {code, error, message}; every 2xx JSON answer matches
 *   the route's declared `response` schema (the broker checks it: `checkResponses`);
 * - every call of the specification is in the table with its permission, and every route is in
 *   the OpenAPI document with the same permission.
 */
import crypto from 'node:crypto';
import { z } from 'zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { acceptsResources } from '../../shared/permissions.js';
import { accessLabel, type RouteSpec } from '../../broker/http/route.js';
import { API_PREFIX } from '../../broker/http/api-paths.js';
import { routeKey, SPEC_CALLS } from '../../broker/http/spec-calls.js';
import { routeTable } from '../../broker/routes.js';
import { startTestBroker, type ApiAnswer, type TestBroker } from '../support/broker.js';

const routes = routeTable();
let t: TestBroker;
/** A device outside `tag:elsewhere`; requests that reach it are refused before any handler runs. */
let fenced: string;
let nobody: string;

beforeAll(async () => {
  t = await startTestBroker({ checkResponses: true });
  fenced = await t.addDevice({ tags: ['here'] });
  nobody = await t.tokenWith([]);
});
afterAll(async () => {
  await t?.close();
});

const concernsDevice = /device|node|group/i;

/** Plausible path values: the device for anything naming a device, node or group. */
function fillPath(route: RouteSpec, deviceId: string): string {
  const path = route.path.replace(/\{([^}]+)\}/g, (_m, name: string) => {
    if (concernsDevice.test(name)) return deviceId;
    if (/user|role|uuid/i.test(name)) return crypto.randomUUID();
    if (/sha/i.test(name)) return 'a'.repeat(40);
    return 'walk-value';
  });
  return route.absolute ? path : `${API_PREFIX}${path}`;
}

type JsonSchema = {
  type?: string | string[];
  const?: unknown;
  enum?: unknown[];
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  properties?: Record<string, JsonSchema>;
  required?: string[];
  items?: JsonSchema;
  minItems?: number;
  minLength?: number;
  minimum?: number;
  format?: string;
  default?: unknown;
};

/** A minimal value a schema accepts, with the device id wherever a field names a device or node. */
function sample(schema: JsonSchema, name: string, deviceId: string): unknown {
  if (schema.const !== undefined) return schema.const;
  if (schema.enum?.length) return schema.enum[0];
  const alternatives = schema.anyOf ?? schema.oneOf;
  if (alternatives?.length) return sample(alternatives.find((a) => a.type !== 'null') ?? alternatives[0], name, deviceId);
  const type = Array.isArray(schema.type) ? schema.type.find((x) => x !== 'null') : schema.type;
  switch (type) {
    case 'object': {
      const out: Record<string, unknown> = {};
      for (const key of schema.required ?? []) out[key] = sample(schema.properties?.[key] ?? {}, key, deviceId);
      return out;
    }
    case 'array':
      return Array.from({ length: schema.minItems ?? 0 }, () => sample(schema.items ?? {}, name, deviceId));
    case 'integer':
    case 'number':
      return schema.minimum ?? 1;
    case 'boolean':
      return false;
    case 'string':
      if (concernsDevice.test(name)) return deviceId;
      if (schema.format === 'email') return 'walker@example.com';
      if (schema.format === 'uuid') return crypto.randomUUID();
      if (schema.format === 'date-time') return new Date().toISOString();
      return 'x'.repeat(Math.max(1, schema.minLength ?? 1));
    default:
      return schema.default ?? (concernsDevice.test(name) ? deviceId : 'x');
  }
}

function sampleOf(schema: RouteSpec['body'], deviceId: string): unknown {
  if (!schema) return undefined;
  try {
    return sample(z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' }) as JsonSchema, '', deviceId);
  } catch {
    return {};
  }
}

/** A port preset made by the administrator, for routes that address a stored record naming its devices. */
async function preset(target: string): Promise<string> {
  const r = await t.api('POST', `${API_PREFIX}/service-connect/portmap`, { token: t.adminToken, body: { target, name: 'walk', port: 22 } });
  expect(r.status).toBe(201);
  return r.body.id;
}

/**
 * Routes whose devices are named by a stored record (see `targets`): how to make one with a given
 * target and the call that addresses it. A route with `targets` must be here unless its body names
 * the target.
 */
const storedTargets: Record<string, (target: string) => Promise<{ path: string; body?: unknown }>> = {
  'PATCH /service-connect/portmap': async (target) => ({ path: `${API_PREFIX}/service-connect/portmap`, body: { id: await preset(target), port: 2222 } }),
  'DELETE /service-connect/portmap/{}': async (target) => ({ path: `${API_PREFIX}/service-connect/portmap/${await preset(target)}` }),
};

/** The body field of that name, when the route's body has one. */
function bodyFieldNamed(route: RouteSpec, name: string): string | undefined {
  try {
    const schema = z.toJSONSchema(route.body as z.ZodType, { io: 'input', unrepresentable: 'any' }) as JsonSchema;
    return schema.properties && name in schema.properties ? name : undefined;
  } catch {
    return undefined;
  }
}

function queryOf(route: RouteSpec, deviceId: string): string {
  const q = sampleOf(route.query, deviceId);
  if (!q || typeof q !== 'object') return '';
  const entries = Object.entries(q as Record<string, unknown>).map(([k, v]) => [k, String(v)]);
  return entries.length ? `?${new URLSearchParams(entries)}` : '';
}

async function call(route: RouteSpec, options: { token?: string; deviceId: string; sampled?: boolean }): Promise<ApiAnswer> {
  const path = fillPath(route, options.deviceId) + (options.sampled ? queryOf(route, options.deviceId) : '');
  const body = route.method === 'get' ? undefined : options.sampled ? (sampleOf(route.body, options.deviceId) ?? {}) : {};
  if (route.stream) return openStream(path, options.token);
  const r = await t.api(route.method.toUpperCase(), path, { token: options.token, body });
  // The broker checks each 2xx JSON answer against the route's declared `response` (checkResponses).
  expect(r.body?.error, `${label(route)}: ${r.body?.message}`).not.toBe('response_mismatch');
  return r;
}

/** A long-lived answer (the event stream): its status and headers, an error's body, then the stream is dropped. */
async function openStream(path: string, token?: string): Promise<ApiAnswer> {
  const aborted = new AbortController();
  const res = await fetch(`${t.url}${path}`, { headers: token ? { authorization: `Bearer ${token}` } : {}, signal: aborted.signal });
  const json = (res.headers.get('content-type') ?? '').includes('json');
  const body: unknown = json ? await res.json() : undefined;
  aborted.abort();
  return { status: res.status, body, headers: res.headers };
}

function expectContractError(r: ApiAnswer, label: string) {
  expect(r.body, `${label}: error body`).toMatchObject({ code: r.status, error: expect.any(String), message: expect.any(String) });
}

/**
 * Calls about one device under a permission that accepts no resources (inventory:read, metrics:read):
 * the devices it reaches are those device:read reaches, never inferred from device:read's absence,
 * so they also need device:read on the device.
 */
const DEVICE_READ_TOO = new Set([
  'GET /inventory/{}',
  'GET /inventoryreport/{}',
  'GET /inventoryreport/docker/{}',
  'GET /device/{}/metrics',
  'GET /device/{}/metrics/latest',
]);

const label = (route: RouteSpec) => `${route.method.toUpperCase()} ${route.absolute ? '' : API_PREFIX}${route.path}`;

describe('the route table', () => {
  it('holds every call of the specification with its permission', () => {
    for (const call of SPEC_CALLS) {
      const match = routes.filter((r) => !r.absolute && routeKey(r.method, r.path) === routeKey(call.method, call.path));
      expect(match, `${call.method.toUpperCase()} ${call.path}`).toHaveLength(1);
      expect(match[0].access, `${call.method.toUpperCase()} ${call.path}`).toBe(call.permission);
    }
  });

  /** A built route guarded by a permission that accepts resources: its device must be checked somewhere. */
  const builtUnderResourceFilter = (r: (typeof routes)[number]) =>
    !r.notImplemented && typeof r.access === 'string' && r.access !== 'public' && r.access !== 'authenticated' && acceptsResources(r.access);

  it('has no two routes answering the same method and path', () => {
    const keys = routes.map((r) => `${r.absolute ? 'root' : 'api'} ${routeKey(r.method, r.path)}`);
    expect(keys.filter((k, i) => keys.indexOf(k) !== i)).toEqual([]);
  });

  it('names the device for every built route whose path addresses one under a resource-filtered permission', () => {
    // A node that may be a group is no device: the service decides it (configuration reaches groups by their place in the tree).
    const nodeDecidedInService = new Set(['GET /configpreview/{}']);
    const unchecked = routes.filter(
      (r) => builtUnderResourceFilter(r) && /\{(device_id|node_id)\}/.test(r.path) && !r.device && !nodeDecidedInService.has(routeKey(r.method, r.path)),
    );
    expect(unchecked.map(label)).toEqual([]);
  });

  it('checks the devices of every other built route under a resource-filtered permission: by `targets`, or as a listed exception', () => {
    // Routes that name no single device and declare no targets decide per device themselves.
    const decidedInService: Record<string, string> = {
      'GET /grouptree': 'a listing: shows only the devices the caller may read',
      'PUT /grouptree': 'each change is decided per node by the devices service',
      'GET /tagslist': 'a listing: tags of readable devices only',
      'GET /groups': "a listing: the groups of the caller's view of the tree",
      'GET /reportlist': 'a listing: only reports of devices the caller reads',
      'DELETE /remote/sessions/{}':
        "a live session's device is known only to the sessions service: its owner may end it, others need remote-access:manage on it",
      // configuration:* reach nodes (groups included) and tags, decided per entity by the configuration service (mayConfigure)
      ...Object.fromEntries(
        [
          'POST /change',
          'GET /change/{}',
          'DELETE /change/{}',
          'DELETE /changes',
          'GET /changelist',
          'POST /commit',
          'GET /commit/{}',
          'GET /config/{}/{}',
          'GET /configpreview/{}/{}',
          'GET /configpreview/{}',
        ].map((k) => [k, 'the configuration service decides each node or tag (own changes only; a commit re-checks every entity)']),
      ),
    };
    const unchecked = routes.filter((r) => builtUnderResourceFilter(r) && !r.device && !r.targets && !decidedInService[routeKey(r.method, r.path)]);
    expect(unchecked.map(label)).toEqual([]);
  });

  it('knows how to reach the stored record of every route whose targets are not in its body', () => {
    const unreachable = routes.filter((r) => r.targets && !bodyFieldNamed(r, 'target') && !storedTargets[routeKey(r.method, r.path)]);
    expect(unreachable.map(label)).toEqual([]);
  });

  it('gives every route a summary and a tag', () => {
    for (const route of routes) {
      expect(route.summary?.trim(), label(route)).toBeTruthy();
      expect(route.tag, label(route)).toBeTruthy();
    }
  });

  it('answers a call it does not have with 404 unknown_call, a code clients tell from an unknown entity', async () => {
    for (const p of [`${API_PREFIX}/no-such-call`, '/api/no-such-call']) {
      const r = await t.api('GET', p, { token: t.adminToken });
      expect(r.status).toBe(404);
      expect(r.body).toMatchObject({ code: 404, error: 'unknown_call' });
    }
  });

  it('answers a known path asked with another method with 405, its methods in Allow, in the contract shape (not 404 unknown_call)', async () => {
    const METHODS = ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'];
    const asRegExp = (r: RouteSpec) =>
      new RegExp(
        `^${fillPath(r, '\u0000')
          .replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
          .replace(/\u0000|walk-value|[0-9a-f-]{36}|a{40}/g, '[^/]+')}$`,
      );
    const patterns = routes.map((r) => ({ route: r, pattern: asRegExp(r) }));
    let checked = 0;
    for (const route of routes) {
      const url = fillPath(route, fenced);
      const has = new Set(patterns.filter((p) => p.pattern.test(url)).map((p) => p.route.method.toUpperCase()));
      const wrong = METHODS.find((m) => !has.has(m));
      if (!wrong) continue;
      const r = await t.api(wrong, url, { token: t.adminToken });
      expect(r.status, `${wrong} ${url}`).toBe(405);
      expectContractError(r, `${wrong} ${url}`);
      expect(r.body.error, `${wrong} ${url}`).toBe('method_not_allowed');
      const allow = new Set((r.headers.get('allow') ?? '').split(/,\s*/));
      for (const m of has) expect(allow.has(m), `${wrong} ${url}: Allow ${r.headers.get('allow')} lacks ${m}`).toBe(true);
      expect(allow.has(wrong), `${wrong} ${url}`).toBe(false);
      checked++;
    }
    expect(checked).toBeGreaterThan(routes.length / 2);
  });

  it('documents every route in the OpenAPI document with its permission', async () => {
    const r = await t.api('GET', `${API_PREFIX}/openapi.json`);
    expect(r.status).toBe(200);
    for (const route of routes) {
      const full = route.absolute ? route.path : `${API_PREFIX}${route.path}`;
      const op = r.body.paths?.[full]?.[route.method];
      expect(op, label(route)).toBeDefined();
      expect(op['x-permission'], label(route)).toBe(accessLabel(route.access));
    }
  });
});

describe.each(routes.filter((r) => r.access !== 'public').map((r) => [label(r), r] as const))('%s', (name, route) => {
  // A list of permissions (any one of them lets the caller in): walked with its first.
  const permission = typeof route.access === 'string' ? route.access : route.access[0];
  const deviceScoped = permission !== 'authenticated' && acceptsResources(permission) && route.device !== undefined;

  it('answers 401 without a token', async () => {
    const r = await call(route, { deviceId: fenced });
    expect(r.status, name).toBe(401);
    expectContractError(r, name);
  });

  // Routes open to every signed-in user have no "without the permission" case.
  if (permission !== 'authenticated') {
    it('answers 403 to a user without the permission', async () => {
      const r = await call(route, { token: nobody, deviceId: fenced });
      expect(r.status, name).toBe(403);
      expectContractError(r, name);
    });
  }

  if (deviceScoped)
    it('answers 403 on a device outside the caller’s resources, and lets a matching device through', async () => {
      const fencedOut = await t.tokenWith([{ permission, resources: ['tag:elsewhere'] }]);
      const refused = await call(route, { token: fencedOut, deviceId: fenced, sampled: true });
      expect(refused.status, `${name} on a device outside tag:elsewhere: ${JSON.stringify(refused.body)}`).toBe(403);
      expectContractError(refused, name);
      const inside = await t.addDevice({ tags: ['elsewhere'] });
      const allowed = await call(route, { token: fencedOut, deviceId: inside, sampled: true });
      expect([401, 403], `${name} on a device carrying tag:elsewhere: ${JSON.stringify(allowed.body)}`).not.toContain(allowed.status);
    });

  // Calls whose devices are named by a resource string in the body rather than a device id.
  const targetField = route.body && route.targets ? bodyFieldNamed(route, 'target') : undefined;
  if (targetField && permission !== 'authenticated' && acceptsResources(permission))
    it('answers 403 when the body targets devices outside the caller’s resources, and lets a covered target through', async () => {
      const fencedOut = await t.tokenWith([{ permission, resources: ['tag:elsewhere'] }]);
      const withTarget = (target: string) => ({ ...((sampleOf(route.body, fenced) as object) ?? {}), [targetField]: target });
      for (const target of ['*', `node:${fenced}`, 'tag:here']) {
        const r = await t.api(route.method.toUpperCase(), fillPath(route, fenced), { token: fencedOut, body: withTarget(target) });
        expect(r.status, `${name} with ${targetField} ${target}: ${JSON.stringify(r.body)}`).toBe(403);
        expectContractError(r, name);
      }
      const inside = await t.addDevice({ tags: ['elsewhere'] });
      for (const target of ['tag:elsewhere', `node:${inside}`]) {
        const r = await t.api(route.method.toUpperCase(), fillPath(route, inside), { token: fencedOut, body: withTarget(target) });
        expect([401, 403], `${name} with ${targetField} ${target}: ${JSON.stringify(r.body)}`).not.toContain(r.status);
      }
    });

  const stored = route.targets ? storedTargets[routeKey(route.method, route.path)] : undefined;
  if (stored && permission !== 'authenticated' && acceptsResources(permission))
    it('answers 403 on a stored record whose target reaches outside the caller’s resources, and lets a covered one through', async () => {
      const fencedOut = await t.tokenWith([{ permission, resources: ['tag:elsewhere'] }]);
      for (const target of ['*', `node:${fenced}`, 'tag:here']) {
        const { path, body } = await stored(target);
        const r = await t.api(route.method.toUpperCase(), path, { token: fencedOut, body });
        expect(r.status, `${name} on a record for ${target}: ${JSON.stringify(r.body)}`).toBe(403);
        expectContractError(r, name);
      }
      const { path, body } = await stored('tag:elsewhere');
      const r = await t.api(route.method.toUpperCase(), path, { token: fencedOut, body });
      expect([401, 403], `${name} on a record for tag:elsewhere: ${JSON.stringify(r.body)}`).not.toContain(r.status);
      expect(r.status, `${name}: ${JSON.stringify(r.body)}`).toBeLessThan(300);
    });

  it('lets a holder of the permission on * through (neither 401 nor 403), answering in the contract shape', async () => {
    // A device's inventory and metrics are read on the devices device:read reaches (none without it): those calls need both.
    const alsoDeviceRead = DEVICE_READ_TOO.has(routeKey(route.method, route.path));
    const token = await t.tokenWith(permission === 'authenticated' ? [] : [{ permission }, ...(alsoDeviceRead ? [{ permission: 'device:read' }] : [])]);
    const deviceId = await t.addDevice();
    const r = await call(route, { token, deviceId });
    // A 403 here means the handler asks for more than the route declares: the route table must say it.
    const why = `${name} refused a holder of its declared access (${permission}${permission === 'authenticated' ? '' : ' on *'}): it needs a permission the route table does not show. ${r.status} ${JSON.stringify(r.body)}`;
    expect([401, 403], why).not.toContain(r.status);
    expect(r.status, `${name}: ${JSON.stringify(r.body)}`).not.toBe(500);
    if (r.status >= 400) expectContractError(r, name);
  });
});
