/**
 * GET /webconsole/settings: what the web console learns of the broker (the map's tile source), and
 * the console's Content-Security-Policy letting images come from that source only when it is set.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let plain: TestBroker;
let tiled: TestBroker;

beforeAll(async () => {
  plain = await startTestBroker();
  tiled = await startTestBroker({ env: { MAP_TILE_URL: 'https://{s}.tiles.example.net/{z}/{x}/{y}.png', MAP_TILE_ATTRIBUTION: '© Example tiles' } });
});

afterAll(async () => {
  await plain?.close();
  await tiled?.close();
});

describe('GET /webconsole/settings', () => {
  it('answers no tile source by default, to any signed-in user, and the console loads images from itself only', async () => {
    const user = await plain.userWith([]);
    const r = await plain.api('GET', '/api/v2/webconsole/settings', { token: user.token });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ map: { tile_url: null, attribution: '' } });
    const page = await plain.api('GET', '/map');
    // The console is built (npm install builds it): its pages carry the policy.
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("img-src 'self' data:;");
  });

  it('answers MAP_TILE_URL and its credit, and the console may load images from that origin', async () => {
    const r = await tiled.api('GET', '/api/v2/webconsole/settings', { token: tiled.adminToken });
    expect(r.body).toEqual({ map: { tile_url: 'https://{s}.tiles.example.net/{z}/{x}/{y}.png', attribution: '© Example tiles' } });
    const page = await tiled.api('GET', '/map');
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("img-src 'self' data: https://*.tiles.example.net;");
  });

  it('refuses a caller without a session or with a bad token, and takes no parameters', async () => {
    expect((await plain.api('GET', '/api/v2/webconsole/settings')).status).toBe(401);
    expect((await plain.api('GET', '/api/v2/webconsole/settings', { token: 'not-a-token' })).status).toBe(401);
    expect((await plain.api('POST', '/api/v2/webconsole/settings', { token: plain.adminToken, body: { map: {} } })).status).toBe(405);
  });
});
