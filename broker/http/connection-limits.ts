import type { Server, Socket } from 'node:net';
import { BoundedMap } from '../../shared/bounded-map.js';

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
    const address = addressOf(socket);
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

/** Addresses an AcceptRate remembers at most; past that the least recently seen is forgotten. */
export const ACCEPT_RATE_ADDRESSES = 10_000;
/** An address may open this many seconds' worth of connections at once (the bucket's size). */
export const ACCEPT_BURST_SECONDS = 4;

/**
 * New connections per second per address, as a token bucket: each address may open `burst` at
 * once, then `perSecond` a second. Churn (connections opened and closed as fast as the peer can)
 * costs the broker memory even when the open ones are capped; this bounds it. The table holds at
 * most `maxAddresses`: a new address beyond that forgets the one seen least recently (which then
 * starts again with a full bucket).
 */
export class AcceptRate {
  /** Kept in order of last use (a touched entry is moved to the end). */
  private readonly buckets: BoundedMap<string, { tokens: number; at: number }>;

  constructor(
    readonly perSecond: number,
    readonly burst = perSecond * ACCEPT_BURST_SECONDS,
    readonly maxAddresses = ACCEPT_RATE_ADDRESSES,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.buckets = new BoundedMap(maxAddresses);
  }

  /** Takes a token for a new connection from `address`; false: refuse it. */
  admit(address: string): boolean {
    const at = this.now();
    let bucket = this.buckets.touch(address);
    if (bucket) {
      bucket.tokens = Math.min(this.burst, bucket.tokens + ((at - bucket.at) * this.perSecond) / 1000);
      bucket.at = at;
    } else {
      bucket = { tokens: this.burst, at };
      this.buckets.set(address, bucket);
    }
    if (bucket.tokens < 1) return false;
    bucket.tokens -= 1;
    return true;
  }

  /** Addresses remembered. */
  get size(): number {
    return this.buckets.size;
  }
}

/** Node's listening handle (internal): the connection callback it calls with each accepted handle. */
interface ListenHandle {
  onconnection: (this: ListenHandle, err: number, client?: { getpeername(out: { address?: string }): number; close(): void }) => void;
}

/**
 * Closes at once a TCP connection from an address over its accept rate (see AcceptRate), as it is
 * accepted: no socket object is made for it, and no listener sees it (no HTTP parser, TLS sniffing
 * or timer). It takes the place of the listening handle's connection callback, Node's own internal
 * hook (a refused connection costs only the closed handle). `perSecond` 0 means no limit.
 */
export function limitAcceptRate(server: Server, perSecond: number): AcceptRate | undefined {
  if (perSecond <= 0) return undefined;
  const rate = new AcceptRate(perSecond);
  const hook = () => {
    const handle = (server as unknown as { _handle?: ListenHandle })._handle;
    if (!handle) return;
    const accept = handle.onconnection;
    handle.onconnection = function (err, client) {
      if (!err && client) {
        const peer: { address?: string } = {};
        client.getpeername(peer);
        if (!rate.admit((peer.address ?? '').replace(/^::ffff:/, ''))) {
          client.close();
          return;
        }
      }
      accept.call(this, err, client);
    };
  };
  if (server.listening) hook();
  else server.on('listening', hook);
  return rate;
}

function addressOf(socket: Socket): string {
  return (socket.remoteAddress ?? '').replace(/^::ffff:/, '');
}
