import { describe, expect, it } from 'vitest';
import { appOrigin, appSessionCookie, appSessionOf, APPS_HOST_PATTERN, deviceCookies, deviceMaySetCookie, parseAppHost, samePath } from './origin.js';

const ID = 'ab'.repeat(32);

describe('device web UI origins', () => {
  it('names one origin per device and port, within a DNS label', () => {
    const origin = appOrigin({ scheme: 'https', appsHost: 'apps.example.com', brokerHost: 'fleet.example.com', deviceId: ID, port: 1880 });
    expect(origin).toBe(`https://${ID.slice(0, 32)}-1880.apps.example.com`);
    expect(new URL(origin).hostname.split('.')[0].length).toBeLessThanOrEqual(63);
    // APPS_HOST's own port wins; without one, the port the broker was reached at (development).
    expect(appOrigin({ scheme: 'http', appsHost: 'localhost:9000', brokerHost: 'localhost:8080', deviceId: ID, port: 80 })).toMatch(/\.localhost:9000$/);
    expect(appOrigin({ scheme: 'http', appsHost: 'localhost', brokerHost: 'localhost:8080', deviceId: ID, port: 80 })).toMatch(/-80\.localhost:8080$/);
  });

  it('recognises only its own host names: never the broker, another suffix, a bad port or label', () => {
    expect(parseAppHost(`${ID.slice(0, 32)}-1880.apps.example.com:443`, 'apps.example.com')).toEqual({ prefix: ID.slice(0, 32), port: 1880 });
    expect(parseAppHost(`${ID.slice(0, 32).toUpperCase()}-80.APPS.example.com`, 'apps.example.com')).toEqual({ prefix: ID.slice(0, 32), port: 80 });
    for (const host of [
      'apps.example.com',
      'fleet.example.com',
      `${ID.slice(0, 32)}-80.apps.example.com.evil.net`,
      `${ID.slice(0, 32)}-80.evilapps.example.com`,
      `${ID.slice(0, 32)}-0.apps.example.com`,
      `${ID.slice(0, 32)}-65536.apps.example.com`,
      `${ID.slice(0, 32)}-080.apps.example.com`,
      `${ID.slice(0, 31)}-80.apps.example.com`,
      `x.${ID.slice(0, 32)}-80.apps.example.com`,
    ])
      expect(parseAppHost(host, 'apps.example.com'), host).toBeUndefined();
    expect(parseAppHost(`${ID.slice(0, 32)}-80.apps.example.com`, undefined)).toBeUndefined();
  });

  it('sets a host-only, HttpOnly, SameSite cookie, __Host- and Secure over https', () => {
    expect(appSessionCookie('s3cret', false, 1800)).toBe('fleet_app=s3cret; Max-Age=1800; Path=/; HttpOnly; SameSite=Lax');
    expect(appSessionCookie('s3cret', true, 1800)).toBe('__Host-fleet_app=s3cret; Max-Age=1800; Path=/; HttpOnly; Secure; SameSite=Lax');
    expect(appSessionOf('a=1; __Host-fleet_app=xyz; b=2')).toBe('xyz');
    expect(appSessionOf('a=1')).toBeUndefined();
  });

  it("keeps the device's cookies and takes out the broker's, both ways", () => {
    expect(deviceCookies('theme=dark; fleet_app=x; fleet_refresh=y; __Host-fleet_app=z; sid=1')).toBe('theme=dark; sid=1');
    expect(deviceCookies('fleet_app=x')).toBeUndefined();
    expect(deviceMaySetCookie('sid=1; Path=/')).toBe(true);
    expect(deviceMaySetCookie('fleet_app=forged; Path=/')).toBe(false);
    expect(deviceMaySetCookie(' __Host-fleet_app=forged')).toBe(false);
  });

  it('redirects after entering to a path of the same origin only', () => {
    expect(samePath('/ui/?a=1')).toBe('/ui/?a=1');
    for (const bad of ['//evil.net/x', '/\\evil.net', 'https://evil.net', '', undefined, '/a b']) expect(samePath(bad)).toBe('/');
  });

  it('accepts APPS_HOST as a host name with an optional port', () => {
    for (const ok of ['localhost', 'apps.example.com', 'localhost:8080']) expect(APPS_HOST_PATTERN.test(ok), ok).toBe(true);
    for (const bad of ['*.apps.example.com', 'https://apps.example.com', 'apps.example.com/', '-apps.com', 'apps..com'])
      expect(APPS_HOST_PATTERN.test(bad), bad).toBe(false);
  });
});
