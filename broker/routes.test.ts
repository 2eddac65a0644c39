import { Duplex } from 'node:stream';
import type { IncomingMessage } from 'node:http';
import { describe, expect, it } from 'vitest';
import { NOT_BUILT_PERMISSIONS, PERMISSION_NAMES } from '../shared/permissions.js';
import { isHeaderCredential } from './auth/credentials.js';
import { UpgradeRouter, type UpgradeSpec } from './http/upgrade.js';
import { createLogger } from './logger.js';
import { mountedRouteTable, routeTable } from './routes.js';
import type { Services } from './services.js';
import { upgradeTable } from './upgrades.js';
import { DomainError, unauthenticated } from './errors.js';

describe('route table', () => {
  it('lists as not built exactly the permissions none of whose calls is built (the role editor marks them)', () => {
    const built = new Set(routeTable().flatMap((r) => (r.notImplemented ? [] : [r.access].flat())));
    expect([...NOT_BUILT_PERMISSIONS].sort()).toEqual(PERMISSION_NAMES.filter((p) => !built.has(p)).sort());
  });

  it('holds the event stream as a call: a credential a browser can send, and the permissions it tells of', () => {
    const events = routeTable().find((r) => r.path === '/events');
    expect(events).toMatchObject({ method: 'get', credential: 'bearer-or-ticket', stream: true, access: ['device:read', 'device:approve'] });
  });
});

describe('mounted route table', () => {
  // Each service stands for itself by name; the store's database likewise.
  const services = new Proxy({} as Services, { get: (_t, name) => (name === 'store' ? { db: 'store.db' } : `service ${String(name)}`) });
  const mounted = mountedRouteTable(services);

  it('serves the calls the route table lists, in its order', () => {
    expect(mounted.map((m) => `${m.route.method} ${m.route.path}`)).toEqual(routeTable().map((r) => `${r.method} ${r.path}`));
  });

  it("hands each route its domain's deps, never the services", () => {
    for (const { route, deps } of mounted) expect(deps, route.path).not.toBe(services);
    const users = mounted.find((m) => m.route.path === '/userlist');
    expect(users?.deps).toEqual({ users: 'service users', db: 'store.db' });
    const health = mounted.find((m) => m.route.path === '/health');
    expect(health?.deps).toEqual({ health: 'service health' });
  });
});

describe('upgrade table', () => {
  const upgrades = upgradeTable();

  it('declares every WebSocket entry point once, each with its credential, access and audit', () => {
    expect(upgrades.map((u) => u.path).sort()).toEqual(
      ['/api/v2/agent/ws', '/api/v2/cluster/peer', '/api/v2/remote/console', '/api/v2/remote/copy', '/api/v2/remote/tunnel', '/device/'].sort(),
    );
    for (const u of upgrades) {
      expect(u.summary.trim(), u.path).toBeTruthy();
      expect(u.credential, u.path).toBeTruthy();
      expect(u.access, u.path).toBeTruthy();
      // A user's credential is checked by the pipeline: a refused attempt must be audited and answered by its endpoint.
      if (isHeaderCredential(u.credential)) {
        expect(u.audit, u.path).toMatch(/^remote\./);
        expect(u.refused, u.path).toBeTypeOf('function');
      } else expect(['enrolled-device', 'cluster-peer'], u.path).toContain(u.access);
    }
  });

  it('refuses an attempt without a credential before its handler runs, and answers an unknown path 404', async () => {
    const steps: string[] = [];
    const spec: UpgradeSpec<object> = {
      path: '/x',
      summary: 'x',
      credential: 'bearer-or-ticket',
      access: 'remote-access:connect',
      audit: 'remote.x',
      refused: (_d, _a, err) => void steps.push(`refused ${(err as DomainError).code}`),
      open: () => void steps.push('open'),
    };
    const authenticator = {
      authenticate: async (_c: unknown, headers: { authorization?: string }) => {
        if (!headers.authorization) throw unauthenticated('no');
        return { principal: {} as never, token: 't', viaTicket: false };
      },
    };
    const router = new UpgradeRouter([spec], {}, authenticator, createLogger('silent'));
    const socket = () => {
      const written: string[] = [];
      const s = new Duplex({
        read() {},
        write(c, _e, cb) {
          written.push(String(c));
          cb();
        },
      });
      return { s, written };
    };
    router.handle({ url: '/x', headers: {} } as IncomingMessage, socket().s, Buffer.alloc(0));
    router.handle({ url: '/x', headers: { authorization: 'Bearer t' } } as IncomingMessage, socket().s, Buffer.alloc(0));
    await expect.poll(() => steps.length, { timeout: 10_000 }).toBe(2);
    expect(steps.sort()).toEqual(['open', 'refused unauthorized']);
    const unknown = socket();
    router.handle({ url: '/y', headers: {} } as IncomingMessage, unknown.s, Buffer.alloc(0));
    expect(unknown.written.join('')).toContain('404 Not Found');
  });
});
