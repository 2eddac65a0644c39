/**
 * Device web UIs on their own origins (APPS_HOST): a ticket from the broker's origin, traded once on
 * `<device>-<port>.<APPS_HOST>` for a host-only cookie, requests and WebSockets proxied over the
 * tunnel channel to a real HTTP server on this machine (the "device", behind the real session
 * handlers). Hostile cases: another device or port with the same cookie, a user without the tunnel
 * grant, spent and expired tickets, the broker's origin asked for device content, withdrawal.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { appHostName } from '../../broker/apps/origin.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { FakeAgents, type FakeAgent } from '../support/fake-agent.js';
import { eventually } from '../support/agent.js';

const APPS = 'apps.test';
let t: TestBroker;
const fakes = new FakeAgents();
let device: string;
let other: string;
let agents: FakeAgent[] = [];
let app: http.Server;
let appPort: number;
let wss: WebSocketServer;
/** What the device's web server saw of each request. */
const seen: { url: string; host: string; cookie?: string; origin?: string }[] = [];

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A request to the broker's port naming `host`, as a browser on that origin would send it. */
function get(host: string, path: string, headers: Record<string, string> = {}): Promise<Answer> {
  const { port } = new URL(t.url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path, headers: { host, ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end();
  });
}

const brokerPort = () => new URL(t.url).port;
const appHost = (id: string, port: number) => `${appHostName(APPS, id, port)}:${brokerPort()}`;

async function audit(query: string) {
  const r = await t.api('GET', `/api/v2/commitlist?${query}`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items as any[];
}

/** Opens the web UI as `token`: the link from the broker's origin, traded on the app's origin; the cookie it sets. */
async function enter(token: string, port = appPort, id = device): Promise<{ cookie: string; setCookie: string; url: URL }> {
  const r = await t.api('POST', `/api/v2/remote/apps/${id}`, { token, body: { port, path: '/start?x=1' } });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  const url = new URL(r.body.url);
  const answer = await get(url.host, `${url.pathname}${url.search}`);
  expect(answer.status, answer.body).toBe(303);
  expect(answer.headers.location).toBe('/start?x=1');
  const setCookie = (answer.headers['set-cookie'] ?? [])[0];
  return { cookie: setCookie.split(';')[0], setCookie, url };
}

beforeAll(async () => {
  t = await startTestBroker({ locator: fakes.locator, env: { APPS_HOST: APPS } });
  device = await t.addDevice({ tags: ['web'], name: 'router' });
  other = await t.addDevice({ tags: ['web'], name: 'other-router' });
  agents = [await fakes.attach(device, t.dataDir), await fakes.attach(other, t.dataDir)];
  app = http.createServer((req, res) => {
    seen.push({ url: req.url ?? '', host: req.headers.host ?? '', cookie: req.headers.cookie, origin: req.headers.origin });
    if (req.url === '/redirect') {
      res.writeHead(302, { Location: `http://127.0.0.1:${appPort}/login` });
      return res.end();
    }
    res.writeHead(200, { 'Content-Type': 'text/plain', 'Set-Cookie': ['device_session=abc; Path=/', 'fleet_app=forged; Path=/'] });
    res.end(`device page ${req.url}`);
  });
  wss = new WebSocketServer({ server: app });
  wss.on('connection', (ws, req) => {
    seen.push({ url: req.url ?? '', host: req.headers.host ?? '', cookie: req.headers.cookie, origin: req.headers.origin });
    ws.on('message', (data) => ws.send(`echo:${String(data)}`));
  });
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  appPort = (app.address() as AddressInfo).port;
});

afterAll(async () => {
  for (const a of agents.reverse()) await a.close();
  wss?.close();
  app?.close();
  await t?.close();
});

describe('device web UIs', () => {
  it('opens through a one-time link on its own origin, with a host-only HttpOnly SameSite cookie, audited as a tunnel', async () => {
    const { cookie, setCookie, url } = await enter(t.adminToken);
    expect(url.hostname).toBe(`${device.slice(0, 32)}-${appPort}.${APPS}`);
    expect(url.port).toBe(brokerPort());
    expect(setCookie).toMatch(/^fleet_app=[A-Za-z0-9_-]{43}; Max-Age=1800; Path=\/; HttpOnly; SameSite=Lax$/);
    expect(setCookie).not.toMatch(/Domain=/i);

    const r = await get(url.host, '/hello', { cookie: `theme=dark; ${cookie}; fleet_refresh=secret-refresh` });
    expect(r.status).toBe(200);
    expect(r.body).toBe('device page /hello');
    const request = seen.at(-1);
    expect(request).toMatchObject({ url: '/hello', host: `127.0.0.1:${appPort}`, cookie: 'theme=dark' });
    // The device may set its own cookies, never the broker's.
    expect(r.headers['set-cookie']).toEqual(['device_session=abc; Path=/']);
    // A redirect to itself stays on the app's origin.
    expect((await get(url.host, '/redirect', { cookie })).headers.location).toBe('/login');

    const start = await eventually(async () =>
      (await audit(`device_id=${device}&event=remote.tunnel.start`)).find((e) => e.options?.via === 'web_app' && e.options?.port === appPort),
    );
    expect(start).toMatchObject({ action: 'tunnel', result: 'allowed', source: 'web', options: { proto: 'tcp', dst: '127.0.0.1' } });
  });

  it('proxies WebSocket upgrades over the tunnel', async () => {
    const { cookie, url } = await enter(t.adminToken);
    const ws = new WebSocket(`ws://127.0.0.1:${brokerPort()}/live`, { headers: { host: url.host, cookie, origin: `http://${url.host}` } });
    const reply = await new Promise<string>((resolve, reject) => {
      ws.on('open', () => ws.send('ping'));
      ws.on('message', (data) => resolve(String(data)));
      ws.on('error', reject);
    });
    expect(reply).toBe('echo:ping');
    expect(seen.at(-1)).toMatchObject({ url: '/live', host: `127.0.0.1:${appPort}`, origin: `http://127.0.0.1:${appPort}` });
    ws.close();
    const refused = new WebSocket(`ws://127.0.0.1:${brokerPort()}/live`, { headers: { host: url.host } });
    const status = await new Promise<number>((resolve) => refused.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)));
    expect(status).toBe(403);
  });

  it('a cookie for one device and port opens neither another device nor another port', async () => {
    const { cookie } = await enter(t.adminToken);
    const otherDevice = await get(appHost(other, appPort), '/hello', { cookie });
    expect(otherDevice.status).toBe(403);
    expect(otherDevice.body).not.toContain('device page');
    const otherPort = await get(appHost(device, appPort + 1 > 65535 ? appPort - 1 : appPort + 1), '/hello', { cookie });
    expect(otherPort.status).toBe(403);
    expect((await get(appHost(device, appPort), '/hello')).status).toBe(403);
    expect((await get(appHost(device, appPort), '/hello', { cookie: 'fleet_app=made-up' })).status).toBe(403);
  });

  it('refuses a user without the tunnel grant for that port, audited, and a link naming another device than its host', async () => {
    const wrongPort = await t.userWith([
      { permission: 'remote-access:connect', resources: [`tag:web/tunnel(proto=tcp;port=${appPort === 1 ? 2 : appPort - 1})`] },
    ]);
    const r = await t.api('POST', `/api/v2/remote/apps/${device}`, { token: wrongPort.token, body: { port: appPort } });
    expect(r.status).toBe(403);
    const consoleOnly = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:web/console'] }]);
    expect((await t.api('POST', `/api/v2/remote/apps/${device}`, { token: consoleOnly.token, body: { port: appPort } })).status).toBe(403);
    const none = await t.userWith([{ permission: 'device:read', resources: ['*'] }]);
    expect((await t.api('POST', `/api/v2/remote/apps/${device}`, { token: none.token, body: { port: appPort } })).status).toBe(403);
    for (const who of [wrongPort, consoleOnly, none]) {
      const denied = await eventually(async () => {
        const found = await audit(`device_id=${device}&user_id=${who.id}&event=remote.tunnel.denied`);
        return found.length > 0 && found;
      });
      expect(denied[0].action).toBe('tunnel');
    }
    // A ticket of theirs (for any socket) still opens nothing here: entering decides again, and audits.
    const ticket = (await t.api('POST', '/api/v2/remote/ticket', { token: wrongPort.token, body: {} })).body.ticket;
    const entered = await get(appHost(device, appPort), `/.fleet-app/enter?ticket=${ticket}&device=${device}&path=/`);
    expect(entered.status).toBe(403);
    expect(entered.headers['set-cookie']).toBeUndefined();
    expect((await audit(`device_id=${device}&user_id=${wrongPort.id}&event=remote.tunnel.denied`)).length).toBe(2);

    const admin = (await t.api('POST', '/api/v2/remote/ticket', { token: t.adminToken, body: {} })).body.ticket;
    const mismatch = await get(appHost(device, appPort), `/.fleet-app/enter?ticket=${admin}&device=${other}&path=/`);
    expect(mismatch.status).toBe(400);
  });

  it('tickets are single-use and expire', async () => {
    const r = await t.api('POST', `/api/v2/remote/apps/${device}`, { token: t.adminToken, body: { port: appPort } });
    const url = new URL(r.body.url);
    expect((await get(url.host, `${url.pathname}${url.search}`)).status).toBe(303);
    const again = await get(url.host, `${url.pathname}${url.search}`);
    expect(again.status).toBe(401);
    expect(again.headers['set-cookie']).toBeUndefined();

    const late = new URL((await t.api('POST', `/api/v2/remote/apps/${device}`, { token: t.adminToken, body: { port: appPort } })).body.url);
    await t.broker.services.store.db
      .updateTable('remote_tickets')
      .set({ expires_at: Date.now() - 1000 })
      .execute();
    expect((await get(late.host, `${late.pathname}${late.search}`)).status).toBe(401);
  });

  it("never serves device content on the broker's origin, nor the broker's API on the app's", async () => {
    const { cookie, url } = await enter(t.adminToken);
    const before = seen.length;
    const onBroker = await get(new URL(t.url).host, '/hello', { cookie });
    expect(onBroker.body).not.toContain('device page');
    const link = new URL((await t.api('POST', `/api/v2/remote/apps/${device}`, { token: t.adminToken, body: { port: appPort } })).body.url);
    const traded = await get(new URL(t.url).host, `${link.pathname}${link.search}`);
    expect(traded.headers['set-cookie']).toBeUndefined();
    expect(seen.length).toBe(before);
    // On the app's origin the broker's API is not there: without the cookie it is refused, with it the device answers.
    const api = await get(url.host, '/api/v2/health');
    expect(api.status).toBe(403);
    expect(api.headers['content-type']).toMatch(/^text\/plain/);
    expect((await get(url.host, '/api/v2/health', { cookie })).body).toBe('device page /api/v2/health');
  });

  it("passes another site's requests only as a top-level GET navigation, and never its WebSockets", async () => {
    const { cookie, url } = await enter(t.adminToken);
    const sibling = `http://${appHost(other, appPort)}`;
    const before = seen.length;
    // Another device's page (the same site: every app origin shares APPS_HOST) posting with this app's cookie.
    expect((await get(url.host, '/admin/reboot', { cookie, 'sec-fetch-site': 'same-site', 'sec-fetch-mode': 'no-cors', origin: sibling })).status).toBe(403);
    expect((await get(url.host, '/data', { cookie, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'cors' })).status).toBe(403);
    expect((await get(url.host, '/data', { cookie, origin: 'null' })).status).toBe(403);
    expect(seen.length).toBe(before);
    // Following a link to it is fine, and so is the app's own page.
    expect((await get(url.host, '/linked', { cookie, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate' })).status).toBe(200);
    expect((await get(url.host, '/own', { cookie, 'sec-fetch-site': 'same-origin', origin: `http://${url.host}` })).status).toBe(200);
    const hijack = new WebSocket(`ws://127.0.0.1:${brokerPort()}/live`, { headers: { host: url.host, cookie, origin: sibling } });
    const status = await new Promise<number>((resolve) => hijack.on('unexpected-response', (_req, res) => resolve(res.statusCode ?? 0)));
    expect(status).toBe(403);
  });

  it('is listed with the live sessions, and ended from there by its owner or a manager, not by another user', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`tag:web/tunnel(proto=tcp;port=${appPort})`] }]);
    const { cookie, url } = await enter(user.token);
    expect((await get(url.host, '/listed', { cookie })).status).toBe(200);
    const mine = await t.api('GET', '/api/v2/remote/sessions', { token: user.token });
    const listed = mine.body.items.find((s: { kind: string; device: { id: string } }) => s.kind === 'tunnel' && s.device.id === device);
    expect(listed).toMatchObject({ user: { id: user.id }, source: 'web', can_end: true });
    expect(listed.bytes_out).toBeGreaterThan(0);
    const stranger = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:web/console'] }]);
    expect((await t.api('GET', '/api/v2/remote/sessions', { token: stranger.token })).body.items.some((s: { id: string }) => s.id === listed.id)).toBe(false);
    expect((await t.api('DELETE', `/api/v2/remote/sessions/${listed.id}`, { token: stranger.token })).status).toBe(403);
    expect((await get(url.host, '/still', { cookie })).status).toBe(200);
    expect((await t.api('DELETE', `/api/v2/remote/sessions/${listed.id}`, { token: t.adminToken })).status).toBe(204);
    expect((await get(url.host, '/after', { cookie })).status).toBe(403);
    const end = await eventually(async () => (await audit(`device_id=${device}&user_id=${user.id}&event=remote.tunnel.end`))[0]);
    expect(end.reason).toMatch(/^ended by admin@example.com/);
  });

  it('cuts an open WebSocket of the session once access is withdrawn, with no request needed', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`tag:web/tunnel(proto=tcp;port=${appPort})`] }]);
    const { cookie, url } = await enter(user.token);
    const ws = new WebSocket(`ws://127.0.0.1:${brokerPort()}/live`, { headers: { host: url.host, cookie } });
    await new Promise<void>((resolve, reject) => {
      ws.on('open', () => resolve());
      ws.on('error', reject);
    });
    const closed = new Promise<void>((resolve) => ws.on('close', () => resolve()));
    expect((await t.api('POST', '/api/v2/logout', { token: user.token, body: {} })).status).toBeLessThan(300);
    await closed;
    const end = await eventually(async () => (await audit(`device_id=${device}&user_id=${user.id}&event=remote.tunnel.end`))[0]);
    expect(end.reason).toMatch(/^access withdrawn/);
  });

  it('ends the session when access is withdrawn (signed out), audited with its bytes', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`tag:web/tunnel(proto=tcp;port=${appPort})`] }]);
    const { cookie, url } = await enter(user.token);
    expect((await get(url.host, '/one', { cookie })).status).toBe(200);
    expect((await t.api('POST', '/api/v2/logout', { token: user.token, body: {} })).status).toBeLessThan(300);
    await expect.poll(async () => (await get(url.host, '/two', { cookie })).status, { timeout: 15_000, interval: 500 }).toBe(403);
    const end = await eventually(async () => (await audit(`device_id=${device}&user_id=${user.id}&event=remote.tunnel.end`))[0]);
    expect(end.reason).toMatch(/^access withdrawn/);
    expect(end.bytes_out).toBeGreaterThan(0);
    expect(end.bytes_in).toBeGreaterThan(0);
  });
});

describe('without APPS_HOST', () => {
  it('answers 409 naming what to set', async () => {
    const broker = await startTestBroker();
    try {
      const id = await broker.addDevice({ name: 'no-apps' });
      const r = await broker.api('POST', `/api/v2/remote/apps/${id}`, { token: broker.adminToken, body: { port: 80 } });
      expect(r.status).toBe(409);
      expect(r.body).toMatchObject({ error: 'apps_host_not_configured' });
      expect(r.body.message).toContain('APPS_HOST');
    } finally {
      await broker.close();
    }
  });
});
