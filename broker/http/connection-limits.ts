import type { Server } from 'node:net';

/**
 * Slow clients hold a connection (and its parser) while sending their headers a byte at a time:
 * the headers must be complete within this time, and the whole request within REQUEST_TIMEOUT_MS
 * (long enough for a large upload on a slow link). Node checks both every CHECK_INTERVAL_MS.
 */
export const HEADERS_TIMEOUT_MS = 15_000;
export const REQUEST_TIMEOUT_MS = 15 * 60_000;
export const CHECK_INTERVAL_MS = 2_000;

/** The timeouts above, as `http.createServer` / `https.createServer` options. */
export const serverTimeouts = {
  headersTimeout: HEADERS_TIMEOUT_MS,
  requestTimeout: REQUEST_TIMEOUT_MS,
  connectionsCheckingInterval: CHECK_INTERVAL_MS,
} as const;

/**
 * Refuses (closes at once) a TCP connection from an address that already holds `max` open ones,
 * so one source cannot exhaust the broker with idle or slow connections. The address is the
 * socket's: headers (X-Forwarded-For) are not read yet. `max` 0 means no cap.
 */
export function capConnectionsPerAddress(server: Server, max: number): void {
  if (max <= 0) return;
  const open = new Map<string, number>();
  server.on('connection', (socket) => {
    const address = (socket.remoteAddress ?? '').replace(/^::ffff:/, '');
    const count = (open.get(address) ?? 0) + 1;
    if (count > max) {
      socket.destroy();
      return;
    }
    open.set(address, count);
    socket.once('close', () => {
      const left = (open.get(address) ?? 1) - 1;
      if (left > 0) open.set(address, left);
      else open.delete(address);
    });
  });
}
