import crypto from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import WebSocket, { WebSocketServer, type RawData } from 'ws';
import { Mux, type Channel, type OpenHandler } from '../../shared/mux.js';
import { FROM_PEER, parseEnvelope, readPeerAuth, readPeerChallenge, readPeerWelcome, type Fields, type PeerMessage } from '../../shared/wire.js';

import { macMatches, peerMac as clusterMac } from '../auth/credentials.js';
import { PEER_WS_PATH } from '../http/api-paths.js';

export { PEER_WS_PATH };
const PEER_PROTOCOL = 'fleet-peer-v1';
/** Both ends must have proven the shared secret within this time. */
const HANDSHAKE_TIMEOUT_MS = 5000;
/** What a peer may send before it has authenticated (its auth message is well under 1 KiB). */
export const PEER_PRE_AUTH_MAX_BYTES = 16 * 1024;
/** Peer links still in their handshake, at most: more are answered 503. */
const PEER_HANDSHAKES_MAX = 64;
/** Data frames are 32 KiB; control messages are small. */
const PEER_MAX_MESSAGE_BYTES = 1024 * 1024;
const BROKER_ID = /^[A-Za-z0-9._:-]{1,100}$/;
/** Close codes of a peer link. */
export const PeerClose = { unauthorized: 4401, shutdown: 1001, lost: 4002 } as const;
const BUSY_RESPONSE =
  'HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n' +
  '{"code":503,"error":"busy","message":"Too many peer handshakes in progress; retry later."}';

/** The proof of the shared secret for this protocol (broker/auth/credentials.ts: `peer-hmac`). */
export function peerMac(secret: string, role: 'client' | 'server', nonce: string, from: string, to: string): string {
  return clusterMac(PEER_PROTOCOL, secret, role, nonce, from, to);
}

/** A handshake message: an object with a string `t`, or `{t: ''}` for anything else (which no reader takes). */
function parse(data: RawData, isBinary: boolean): { t: string } & Fields {
  return (isBinary ? undefined : parseEnvelope(String(data))) ?? { t: '' };
}

function nextMessage(ws: WebSocket, timeoutMs: number): Promise<{ t: string } & Fields> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => done(new Error('peer handshake timed out')), timeoutMs);
    const onMessage = (data: RawData, isBinary: boolean) => done(undefined, parse(data, isBinary));
    const onClose = () => done(new Error('peer closed the link during the handshake'));
    const done = (err?: Error, msg?: { t: string } & Fields) => {
      clearTimeout(timer);
      ws.off('message', onMessage);
      ws.off('close', onClose);
      if (err) reject(err);
      else if (msg) resolve(msg);
    };
    ws.on('message', onMessage);
    ws.on('close', onClose);
  });
}

/** One authenticated link to another broker: a Mux whose two ends both open channels. */
export interface PeerLink {
  peer: string;
  mux: Mux<PeerMessage>;
  /** this end dialled the other */
  outbound: boolean;
}

export interface PeerLinksDeps {
  brokerId: string;
  secret: string;
  logger: Logger;
  /** Keep-alive: a link silent for 3 of these is cut. */
  heartbeatMs: number;
  /** Serves a channel the other broker opens (to an agent connected here). */
  serve: OpenHandler;
  /** Link-level messages (reload) from the other broker. */
  onControl: (link: PeerLink, msg: PeerMessage) => void;
  onClosed: (link: PeerLink) => void;
}

/**
 * Whether a link last heard from at `lastHeard` has been silent for 3 heartbeats at `now`. Silence
 * counts only while this process ran: a heartbeat tick that comes late (`lastTick` more than two
 * heartbeats ago) means this process itself was stalled (a long GC, a loaded machine), and what the
 * peer sent meanwhile may still wait unread in the socket; the next tick, on time, decides.
 */
export function linkSilent(now: number, lastHeard: number, lastTick: number, heartbeatMs: number): boolean {
  if (now - lastTick > 2 * heartbeatMs) return false;
  return now - lastHeard > 3 * heartbeatMs;
}

/**
 * Links between the brokers of a cluster: one per pair of brokers, dialled by whichever needs it
 * first and then used both ways (channel ids odd on the dialling end, even on the other). Each end
 * proves CLUSTER_SECRET with an HMAC over the other's nonce; a peer that does not is refused (4401)
 * and what it sent before is bounded. Channels carry the agent channel protocol unchanged, so the
 * end-to-end credit flow control is the same as on an agent's own connection.
 */
export class PeerLinks {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: PEER_MAX_MESSAGE_BYTES, perMessageDeflate: false });
  private readonly links = new Map<string, Set<PeerLink>>();
  private readonly dialling = new Map<string, Promise<PeerLink>>();
  private readonly handshakes = new Set<WebSocket>();
  private readonly log: Logger;
  private closing = false;

  constructor(private readonly deps: PeerLinksDeps) {
    this.log = deps.logger.child({ module: 'cluster-peer' });
  }

  /** Open links (for tests and metrics). */
  get size(): number {
    let n = 0;
    for (const set of this.links.values()) n += set.size;
    return n;
  }

  /** The link to `peer`, dialled at `url` when there is none yet (concurrent callers share one dial). */
  async get(peer: string, url: string): Promise<PeerLink> {
    const existing = this.links.get(peer)?.values().next().value;
    if (existing) return existing;
    let dial = this.dialling.get(peer);
    if (!dial) {
      dial = this.dial(peer, url).finally(() => this.dialling.delete(peer));
      this.dialling.set(peer, dial);
    }
    return dial;
  }

  /** Closes every link to `peer` (it is gone, or shut down). */
  drop(peer: string, reason: string): void {
    for (const link of this.links.get(peer) ?? []) link.mux.close(PeerClose.lost, reason.slice(0, 120));
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const ws of this.handshakes) ws.terminate();
    for (const set of [...this.links.values()]) for (const link of set) link.mux.close(PeerClose.shutdown, 'broker shutting down');
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
  }

  // ---- the dialling end --------------------------------------------------------------------------

  private async dial(peer: string, url: string): Promise<PeerLink> {
    if (this.closing) throw new Error('broker shutting down');
    const target = `${url.replace(/^http/, 'ws')}${PEER_WS_PATH}`;
    const ws = new WebSocket(target, { maxPayload: PEER_MAX_MESSAGE_BYTES, perMessageDeflate: false, handshakeTimeout: HANDSHAKE_TIMEOUT_MS });
    ws.on('error', (err) => this.log.debug({ err, peer }, 'peer link socket error'));
    try {
      const challenge = nextMessage(ws, HANDSHAKE_TIMEOUT_MS);
      await new Promise<void>((resolve, reject) => {
        ws.once('open', resolve);
        ws.once('error', reject);
        ws.once('unexpected-response', (_req, res) => reject(new Error(`peer answered ${res.statusCode}`)));
      });
      const first = readPeerChallenge(await challenge);
      if (!first || first.broker_id !== peer) {
        throw new Error(`the broker at ${url} is not ${peer}`);
      }
      const nonce = crypto.randomBytes(32).toString('base64url');
      const welcome = nextMessage(ws, HANDSHAKE_TIMEOUT_MS);
      ws.send(
        JSON.stringify({
          t: 'peer_auth',
          broker_id: this.deps.brokerId,
          nonce,
          mac: peerMac(this.deps.secret, 'client', first.nonce, this.deps.brokerId, peer),
        }),
      );
      const answer = readPeerWelcome(await welcome);
      if (!answer || !macMatches(answer.mac, peerMac(this.deps.secret, 'server', nonce, peer, this.deps.brokerId))) {
        throw new Error(`the broker at ${url} did not prove the cluster secret`);
      }
    } catch (err) {
      ws.terminate();
      throw err;
    }
    return this.established(ws, peer, true);
  }

  // ---- the answering end -------------------------------------------------------------------------

  /** The upgrade handler of PEER_WS_PATH. */
  accept(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const ip = (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
    if (this.closing) return void socket.destroy();
    if (this.handshakes.size >= PEER_HANDSHAKES_MAX) {
      socket.on('error', () => {});
      socket.end(BUSY_RESPONSE);
      return;
    }
    let received = head.length;
    let ws: WebSocket | undefined;
    const tooMuch = () => {
      if (!ws || ws.readyState !== WebSocket.OPEN) return;
      this.log.warn({ ip }, 'peer refused: too much data before authentication');
      socket.removeAllListeners('data');
      socket.on('data', () => {});
      ws.close(1009, 'too much data before authentication');
    };
    const count = (chunk: Buffer) => {
      received += chunk.length;
      if (received > PEER_PRE_AUTH_MAX_BYTES) tooMuch();
    };
    socket.on('data', count);
    this.wss.handleUpgrade(req, socket, head, (upgraded) => {
      ws = upgraded;
      if (received > PEER_PRE_AUTH_MAX_BYTES) return tooMuch();
      this.handshakes.add(upgraded);
      upgraded.on('error', (err) => this.log.debug({ err, ip }, 'peer link socket error'));
      this.answer(upgraded, ip)
        .then((peer) => {
          socket.off('data', count);
          this.established(upgraded, peer, false);
        })
        .catch((err: Error) => {
          this.log.warn({ ip, reason: err.message }, 'peer refused');
          if (upgraded.readyState === WebSocket.OPEN) upgraded.close(PeerClose.unauthorized, 'cluster authentication failed');
        })
        .finally(() => this.handshakes.delete(upgraded));
    });
  }

  private async answer(ws: WebSocket, ip: string): Promise<string> {
    const nonce = crypto.randomBytes(32).toString('base64url');
    const auth = nextMessage(ws, HANDSHAKE_TIMEOUT_MS);
    ws.send(JSON.stringify({ t: 'peer_challenge', broker_id: this.deps.brokerId, nonce }));
    const msg = readPeerAuth(await auth);
    const peer = msg?.broker_id;
    if (!msg || peer === undefined || !BROKER_ID.test(peer)) {
      throw new Error('expected {t:"peer_auth", broker_id, nonce, mac}');
    }
    if (!macMatches(msg.mac, peerMac(this.deps.secret, 'client', nonce, peer, this.deps.brokerId))) throw new Error(`bad cluster proof from "${peer}"`);
    if (peer === this.deps.brokerId) throw new Error('a peer may not use this broker’s own id');
    ws.send(JSON.stringify({ t: 'peer_welcome', mac: peerMac(this.deps.secret, 'server', msg.nonce, this.deps.brokerId, peer) }));
    this.log.info({ peer, ip }, 'peer link accepted');
    return peer;
  }

  // ---- both ends ---------------------------------------------------------------------------------

  private established(ws: WebSocket, peer: string, outbound: boolean): PeerLink {
    // Registered before the mux's own listener: channels of a lost link end saying so.
    ws.once('close', () => mux.close(PeerClose.lost, `the link to broker ${peer} was lost`));
    const mux = new Mux(ws, { channelIds: outbound ? 'odd' : 'even', onOpen: this.deps.serve, receives: FROM_PEER });
    const link: PeerLink = { peer, mux, outbound };
    let set = this.links.get(peer);
    if (!set) this.links.set(peer, (set = new Set()));
    set.add(link);
    let lastHeard = Date.now();
    const heard = () => {
      lastHeard = Date.now();
    };
    ws.on('message', heard);
    ws.on('pong', heard);
    ws.on('ping', heard);
    let lastTick = Date.now();
    const heartbeat = setInterval(() => {
      const now = Date.now();
      const silent = linkSilent(now, lastHeard, lastTick, this.deps.heartbeatMs);
      lastTick = now;
      if (silent) {
        this.log.warn({ peer }, 'peer link silent for 3 heartbeats: cut');
        ws.terminate();
        return;
      }
      if (ws.readyState === WebSocket.OPEN) ws.ping();
    }, this.deps.heartbeatMs);
    heartbeat.unref();
    mux.on('control', (msg) => this.deps.onControl(link, msg));
    mux.on('protocol-error', (err: Error) => this.log.warn({ peer, err: err.message }, 'peer broke the protocol'));
    mux.on('close', (reason: string) => {
      clearInterval(heartbeat);
      set.delete(link);
      if (set.size === 0 && this.links.get(peer) === set) this.links.delete(peer);
      this.log.info({ peer, reason }, 'peer link closed');
      this.deps.onClosed(link);
    });
    this.log.info({ peer, outbound }, 'peer link open');
    return link;
  }
}

/** Sends a link-level message (not one of the agent protocol's). */
export function sendPeer(link: PeerLink, msg: PeerMessage): void {
  link.mux.send(msg);
}

/** Relays a channel of a peer link to a channel of an agent and back: bytes (with backpressure), channel control, eof, close. */
export function bridge(a: Channel, b: Channel): void {
  a.pipe(b);
  b.pipe(a);
  a.on('control', (msg) => b.control(msg));
  b.on('control', (msg) => a.control(msg));
  const follow = (from: Channel, to: Channel) =>
    from.once('close', () => {
      if (to.destroyed) return;
      const err = from.errored;
      if (err) return void to.destroy(err);
      // A clean end: what is still queued for the other side goes out first, then it closes.
      if (to.writableFinished) return void to.destroy();
      to.once('finish', () => to.destroy());
      if (!to.writableEnded) to.end();
    });
  follow(a, b);
  follow(b, a);
}
