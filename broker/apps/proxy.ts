/**
 * Moving a request of a device web UI (service.ts) to the device and its answer back, over one
 * tunnel channel: the request's headers rewritten for the device's own loopback origin (the
 * broker's cookies and hop-by-hop headers left out), the answer's for the browser (the device may
 * not set the broker's cookies; its redirects to itself made relative); a WebSocket's upgrade
 * written as it came, then bytes both ways. Also the plain pages the apps origin answers itself,
 * and the check that a request comes from the app's own pages.
 */
import http, { type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Channel } from '../../shared/mux.js';
import { deviceCookies, deviceMaySetCookie, HOP_BY_HOP } from './origin.js';

/** Where on the device, always: its own loopback. A grant naming `dst` must name this address. */
export const APP_DESTINATION = '127.0.0.1';
/** A device that has not answered a request's headers in this long gets a 504. */
const RESPONSE_HEADERS_TIMEOUT_MS = 60_000;

/** The device's port a session is for, and the scheme the browser sees the app on. */
export interface Upstream {
  port: number;
  scheme: 'http' | 'https';
}

export const OTHER_SITE = 'Requests from other sites are not passed to a device web UI (only following a link to it is).';

/**
 * Is this request the app's own, or a plain navigation to it? Every device web UI shares its site
 * (APPS_HOST's domain) with every other, so SameSite cookies alone would let one device's page
 * send requests with another's cookie: what the browser marks as coming from another origin
 * (`Sec-Fetch-Site`, or an `Origin` that is not the app's own) passes only as a top-level GET
 * navigation, and never as a WebSocket. Clients that send neither header (not a browser) pass.
 */
export function fromItself(req: IncomingMessage, upgrade: boolean): boolean {
  const site = req.headers['sec-fetch-site'];
  const origin = req.headers.origin;
  const own = origin === undefined || (URL.canParse(origin) && new URL(origin).host.toLowerCase() === (req.headers.host ?? '').toLowerCase());
  const foreign = site === 'cross-site' || site === 'same-site' || !own;
  if (!foreign) return true;
  if (upgrade) return false;
  return req.headers['sec-fetch-mode'] === 'navigate' && (req.method === 'GET' || req.method === 'HEAD');
}

/** A plain page of the apps origin (never the device's): text, not cached, not sniffed. */
export function page(res: ServerResponse, status: number, text: string): void {
  if (res.headersSent) return void res.destroy();
  res.writeHead(status, {
    'Content-Type': 'text/plain; charset=utf-8',
    'Cache-Control': 'no-store',
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
  });
  res.end(`${text}\n`);
}

export function rawPage(socket: Duplex, status: number, reason: string, text: string): void {
  socket.end(`HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/plain; charset=utf-8\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n${text}\n`);
}

/** The request headers the device gets: its own host and origin, the broker's cookies out, no hop-by-hop headers. */
function forwardHeaders(headers: IncomingHttpHeaders, { port, scheme }: Upstream, upgrade: boolean): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  const own = `${scheme}://${headers.host ?? ''}`;
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || HOP_BY_HOP.has(name) || name === 'host' || name === 'cookie') continue;
    out[name] = value;
  }
  out.host = `${APP_DESTINATION}:${port}`;
  // The app's own pages (same origin) speak to it as from itself; another site's Origin is kept for it to judge.
  if (headers.origin === own) out.origin = `http://${APP_DESTINATION}:${port}`;
  const cookies = deviceCookies(headers.cookie);
  if (cookies) out.cookie = cookies;
  out['x-forwarded-proto'] = scheme;
  out['x-forwarded-host'] = headers.host ?? '';
  if (upgrade) {
    out.connection = 'Upgrade';
    out.upgrade = String(headers.upgrade ?? 'websocket');
  } else out.connection = 'close';
  return out;
}

/** Response headers for the browser: the device's, without hop-by-hop ones or cookies of the broker, redirects to itself made relative. */
function backHeaders(up: IncomingMessage, port: number): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(up.headers)) {
    if (value === undefined || HOP_BY_HOP.has(name)) continue;
    if (name === 'set-cookie') {
      const kept = (value as string[]).filter(deviceMaySetCookie);
      if (kept.length) out[name] = kept;
      continue;
    }
    if (name === 'location' && typeof value === 'string') {
      const m = /^https?:\/\/(?:127\.0\.0\.1|localhost)(?::(\d+))?(\/.*)?$/i.exec(value);
      if (m && Number(m[1] ?? 80) === port) {
        out[name] = m[2] ?? '/';
        continue;
      }
    }
    out[name] = value;
  }
  return out;
}

/** One request, one tunnel channel: HTTP/1.1 to the device with `Connection: close`, the answer streamed back. */
export function proxyRequest(req: IncomingMessage, res: ServerResponse, channel: Channel, upstream: Upstream): void {
  const request = http.request({
    method: req.method,
    path: req.url,
    headers: forwardHeaders(req.headers, upstream, false),
    createConnection: () => channel as unknown as Socket,
  });
  const timer = setTimeout(() => request.destroy(new Error('the device sent no answer in time')), RESPONSE_HEADERS_TIMEOUT_MS);
  timer.unref();
  request.on('response', (up) => {
    clearTimeout(timer);
    res.writeHead(up.statusCode ?? 502, backHeaders(up, upstream.port));
    up.pipe(res);
    up.on('error', () => res.destroy());
  });
  request.on('error', (err) => {
    clearTimeout(timer);
    if (!res.headersSent) page(res, 502, `The device's web UI on port ${upstream.port} did not answer: ${err.message}`);
    else res.destroy();
    channel.destroy();
  });
  res.on('close', () => {
    clearTimeout(timer);
    channel.destroy();
  });
  req.pipe(request);
}

/** A WebSocket (or other upgrade): the request goes to the device as it came (rewritten), then bytes both ways. */
export function relayUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, channel: Channel, upstream: Upstream): void {
  const headers = forwardHeaders(req.headers, upstream, true);
  const lines = [`${req.method ?? 'GET'} ${req.url ?? '/'} HTTP/1.1`];
  for (const [name, value] of Object.entries(headers))
    for (const v of Array.isArray(value) ? value : [value]) lines.push(`${name}: ${v.replace(/[\r\n]/g, ' ')}`);
  channel.write(`${lines.join('\r\n')}\r\n\r\n`);
  if (head.length) channel.write(head);
  socket.pipe(channel);
  channel.pipe(socket);
  socket.on('close', () => channel.destroy());
  channel.on('close', () => socket.destroy());
}
