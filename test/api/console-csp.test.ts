/**
 * The web console's Content-Security-Policy lets its WebSockets reach this broker only: `connect-src`
 * names this broker's origin (from the Host it was asked at, and PUBLIC_URL), never any ws:/wss: host.
 */
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { webSocketOrigins } from '../../broker/app.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let plain: TestBroker;
let published: TestBroker;

beforeAll(async () => {
  plain = await startTestBroker();
  published = await startTestBroker({ env: { PUBLIC_URL: 'https://fleet.example.com/' } });
});

afterAll(async () => {
  await plain?.close();
  await published?.close();
});

/** GET a console page with this Host header (fetch does not let one set it). */
function policyFor(t: TestBroker, host: string): Promise<string> {
  const url = new URL('/devices', t.url);
  return new Promise((resolve, reject) => {
    const req = http.get({ host: url.hostname, port: url.port, path: url.pathname, headers: { host } }, (res) => {
      res.resume();
      resolve(String(res.headers['content-security-policy'] ?? ''));
    });
    req.on('error', reject);
  });
}

const connectSrc = (policy: string) => /connect-src ([^;]*);/.exec(policy)?.[1].split(' ');

describe("the console's connect-src", () => {
  it('names the origin the console was loaded from, not every WebSocket host', async () => {
    const page = await plain.api('GET', '/devices');
    expect(page.status).toBe(200);
    const host = new URL(plain.url).host;
    const sources = connectSrc(page.headers.get('content-security-policy') ?? '');
    expect(sources).toEqual(["'self'", `ws://${host}`, `wss://${host}`]);
    expect(sources).not.toContain('ws:');
    expect(sources).not.toContain('wss:');
  });

  it('follows the Host header per request, and a Host that is not a host name adds nothing', async () => {
    expect(connectSrc(await policyFor(plain, 'fleet.internal:8443'))).toEqual(["'self'", 'ws://fleet.internal:8443', 'wss://fleet.internal:8443']);
    const hostile = await policyFor(plain, 'evil.example;script-src');
    expect(connectSrc(hostile)).toEqual(["'self'"]);
    expect(hostile).not.toContain('evil');
  });

  it('names PUBLIC_URL (wss for https) beside the Host asked at', async () => {
    const sources = connectSrc(await policyFor(published, 'fleet.example.com'));
    expect(sources).toEqual(["'self'", 'wss://fleet.example.com', 'ws://fleet.example.com']);
    expect(webSocketOrigins(undefined, true, 'https://fleet.example.com:8443/x')).toEqual(['wss://fleet.example.com:8443']);
    expect(webSocketOrigins('[::1]:3000', true)).toEqual(['wss://[::1]:3000']);
  });
});
