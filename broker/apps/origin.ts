/**
 * Device web UIs get an origin of their own, never the broker's: `<device>-<port>.<APPS_HOST>`,
 * one per device and port, so a device's page can read neither the operator's tokens nor another
 * device's cookies. These are the pure rules: the host name, the cookie, what is forwarded.
 */
import { parseCookie, parseSetCookie, stringifySetCookie } from 'cookie';

/** Device id characters in the host: a DNS label holds at most 63, a device id is 64 hex digits. */
export const APP_LABEL_ID_CHARS = 32;
/** Where the apps origin redeems a ticket; a path of the broker, never forwarded to the device. */
export const APP_ENTER_PATH = '/.fleet-app/enter';
/** The app session cookie: `__Host-` (host-only, Secure, Path=/, enforced by browsers) over https. */
export const APP_COOKIE = 'fleet_app';
export const APP_COOKIE_SECURE = '__Host-fleet_app';
/** Cookies of the broker that never reach a device: the app session's own, the console's refresh cookie. */
const BROKER_COOKIES = new Set([APP_COOKIE, APP_COOKIE_SECURE, 'fleet_refresh']);

/** An APPS_HOST value: a host name (lower case, dots, dashes), optionally `:port`. */
export const APPS_HOST_PATTERN = /^(?=.{1,200}$)[a-z0-9](?:[a-z0-9-]*[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]*[a-z0-9])?)*(?::\d{1,5})?$/;

export interface AppTarget {
  /** the first APP_LABEL_ID_CHARS hex digits of the device id */
  prefix: string;
  port: number;
}

function hostName(hostPort: string): string {
  return hostPort.replace(/:\d{1,5}$/, '').toLowerCase();
}

/** The host name of a device's web UI on port `port`. */
export function appHostName(appsHost: string, deviceId: string, port: number): string {
  return `${deviceId.slice(0, APP_LABEL_ID_CHARS)}-${port}.${hostName(appsHost)}`;
}

/**
 * The device and port a Host header names on the apps host, or undefined when it is not one of
 * its names (the broker's own origin, anything else): only such requests are proxied.
 */
export function parseAppHost(hostHeader: string | undefined, appsHost: string | undefined): AppTarget | undefined {
  if (!hostHeader || !appsHost) return undefined;
  const host = hostName(hostHeader);
  const suffix = `.${hostName(appsHost)}`;
  if (!host.endsWith(suffix)) return undefined;
  const m = /^([0-9a-f]{32})-(\d{1,5})$/.exec(host.slice(0, -suffix.length));
  if (!m) return undefined;
  const port = Number(m[2]);
  if (port < 1 || port > 65535 || String(port) !== m[2]) return undefined;
  return { prefix: m[1], port };
}

/** The origin of a device's web UI: the scheme of the broker, APPS_HOST's port, else the port the broker was reached at. */
export function appOrigin(options: { scheme: 'http' | 'https'; appsHost: string; brokerHost: string; deviceId: string; port: number }): string {
  const explicit = /:(\d{1,5})$/.exec(options.appsHost)?.[1];
  const seen = /:(\d{1,5})$/.exec(options.brokerHost)?.[1];
  const port = explicit ?? seen;
  return `${options.scheme}://${appHostName(options.appsHost, options.deviceId, options.port)}${port ? `:${port}` : ''}`;
}

/** The Set-Cookie value of an app session: host-only (no Domain), HttpOnly, SameSite=Lax, short-lived. */
export function appSessionCookie(value: string, secure: boolean, maxAgeSeconds: number): string {
  const name = secure ? APP_COOKIE_SECURE : APP_COOKIE;
  return stringifySetCookie({ name, value, path: '/', maxAge: maxAgeSeconds, httpOnly: true, sameSite: 'lax', secure });
}

/**
 * The cookies of a Cookie header, name and the pair as sent, in order: what a device gets is forwarded
 * byte for byte, which a parser that decodes values (the cookie package) would not give back.
 */
function cookiePairs(header: string | undefined): { name: string; raw: string }[] {
  if (!header) return [];
  return header
    .split(';')
    .map((raw) => raw.trim())
    .filter(Boolean)
    .map((raw) => ({ name: raw.split('=', 1)[0].trim(), raw }));
}

/** The app session's cookie value from a Cookie header (either name), if any. */
export function appSessionOf(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const cookies = parseCookie(header);
  return cookies[APP_COOKIE_SECURE] ?? cookies[APP_COOKIE];
}

/** The Cookie header a device gets: the device's own cookies, the broker's taken out (undefined when none remain). */
export function deviceCookies(header: string | undefined): string | undefined {
  const kept = cookiePairs(header).filter((c) => !BROKER_COOKIES.has(c.name));
  return kept.length ? kept.map((c) => c.raw).join('; ') : undefined;
}

/** A Set-Cookie a device sends: refused when it would set one of the broker's cookies. */
export function deviceMaySetCookie(setCookie: string): boolean {
  return !BROKER_COOKIES.has(parseSetCookie(setCookie).name);
}

/** Where to go after entering: a path on the same origin (never `//host` or a backslash trick), `/` otherwise. */
export function samePath(path: string | undefined): string {
  if (!path || !path.startsWith('/') || path.startsWith('//') || /[\\\s\0]/.test(path) || path.length > 2048) return '/';
  return path;
}

/** Headers between two hops only (RFC 9110 §7.6.1), never forwarded as they are. */
export const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);
