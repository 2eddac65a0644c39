/**
 * An agent connection until it is let in: the WebSocket upgrade (handshakes bounded in total and per
 * address, bytes bounded before authentication), the challenge, the signature check against the
 * enrolled key, the device's standing, and the refusals (unknown, revoked, pending, cut off, or
 * penalized after a protocol error). An authenticated connection is handed to the hub.
 */
import crypto from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import WebSocket, { WebSocketServer, type RawData } from 'ws';
import { AGENT_NONCE_PATTERN } from '../../shared/broker-signature.js';
import { parseStoredDeviceKey } from '../../shared/device-key.js';
import { AgentClose, PROTOCOL_VERSION, type ControlMessage } from '../../shared/protocol.js';
import { parseEnvelope, readAuth } from '../../shared/wire.js';
import { verifyAgentSignature } from '../auth/credentials.js';
import { DEVICE_ID_PATTERN } from '../devices/scope.js';
import type { AgentStanding } from '../enrol/service.js';
import type { Config } from '../environment.js';
import type { BrokerKey } from './broker-key.js';
import { ReturnSchedule } from './returns.js';

/** Channel frames are at most 64 KiB; control messages are small; an inventory report stays well below. */
const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/**
 * Bytes a connection may send before it has authenticated (the auth message is well under 1 KiB).
 * Counted on the socket, before frames are assembled, so a large frame is cut as it arrives.
 */
export const PRE_AUTH_MAX_BYTES = 64 * 1024;
/**
 * A device whose connection was closed for a protocol error is refused for this long (after its
 * signature is checked), so a reconnect loop costs a handshake, not a session and its log lines.
 */
export const PROTOCOL_ERROR_PENALTY_MS = 10_000;
/** What a refused handshake is told: try again in this many seconds (its slot: see returns.ts). */
function busyResponse(retryAfterS: number): string {
  return (
    `HTTP/1.1 503 Service Unavailable\r\nRetry-After: ${retryAfterS}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n` +
    '{"code":503,"error":"busy","message":"Too many agent handshakes in progress; retry later."}'
  );
}
/** How long a cut-off is remembered to refuse a handshake that was already past its database check. */
const CUT_OFF_MEMORY_MS = 60_000;

/** Who an authenticated agent is, as its handshake established. */
export interface AgentHello {
  deviceId: string;
  ip: string;
  version: string;
  protocol: number;
  /** The agent's nonce of this connection ('' from an agent that sends none). */
  agentNonce: string;
  /** The broker's challenge the agent signed. */
  challenge: string;
}

export interface HandshakeDeps {
  config: Pick<Config, 'trustProxy' | 'agentHandshakesMax' | 'agentHandshakesPerAddress' | 'agentAuthTimeoutMs'>;
  log: Logger;
  /** Who a device is (unknown, revoked, pending, approved): asked at every handshake. */
  standings: { standing(deviceId: string): Promise<AgentStanding> };
  brokerKey: Pick<BrokerKey, 'signWelcome'>;
  /** Records the contact of a device waiting for approval. */
  touch(deviceId: string, patch: { last_seen: string; last_ip: string }): Promise<void>;
  /** Whether the broker is shutting down: no connection is let in then. */
  closing(): boolean;
  /** Takes an authenticated connection on (out of the handshake's count), with the socket under it. */
  accepted(ws: WebSocket, hello: AgentHello, socket: Duplex): void;
}

/** The agents' WebSocket endpoint up to authentication; the hub owns what follows. */
export class AgentHandshakes {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES, perMessageDeflate: false });
  /** Connections still in their handshake, with the address they come from. */
  private readonly handshakes = new Map<WebSocket, string>();
  private readonly handshakesByAddress = new Map<string, number>();
  private readonly cutOffs = new Map<string, number>();
  /** Device id → until when it is refused after a protocol error (one entry per enrolled device at most). */
  private readonly penalized = new Map<string, number>();
  /** When refused agents are told to come back. */
  private readonly returns = new ReturnSchedule();

  constructor(private readonly deps: HandshakeDeps) {}

  /** Refuses the handshakes of this device that began before now (it was removed or revoked). */
  cutOff(deviceId: string): void {
    this.cutOffs.set(deviceId, Date.now());
    const old = Date.now() - CUT_OFF_MEMORY_MS;
    for (const [id, at] of this.cutOffs) if (at < old) this.cutOffs.delete(id);
  }

  /** Refuses this device for a while: its connection was closed for a protocol error. */
  penalize(deviceId: string): void {
    this.penalized.set(deviceId, Date.now() + PROTOCOL_ERROR_PENALTY_MS);
  }

  /** Ends the handshakes in progress (the broker is shutting down). */
  abort(): void {
    for (const ws of [...this.handshakes.keys()]) ws.terminate();
    this.handshakes.clear();
    this.handshakesByAddress.clear();
  }

  /** Closes the endpoint once every connection is gone. */
  close(): Promise<void> {
    return new Promise<void>((resolve) => this.wss.close(() => resolve()));
  }

  private clientIp(req: IncomingMessage): string {
    const forwarded = req.headers['x-forwarded-for'];
    if (this.deps.config.trustProxy && typeof forwarded === 'string' && forwarded.trim()) return forwarded.split(',')[0].trim();
    return (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
  }

  /**
   * Handshakes are bounded in total and per source address, so one address cannot hold every slot
   * and lock enrolled agents out; a refused one is answered 503 with Retry-After, its own slot.
   */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.deps.closing()) return void socket.destroy();
    const ip = this.clientIp(req);
    const { agentHandshakesMax, agentHandshakesPerAddress } = this.deps.config;
    if (this.handshakes.size >= agentHandshakesMax || (this.handshakesByAddress.get(ip) ?? 0) >= agentHandshakesPerAddress) {
      socket.on('error', () => {});
      socket.end(busyResponse(this.returns.retryAfterSeconds()));
      return;
    }
    // Counted from the first byte after the upgrade request, before ws assembles any frame.
    let received = head.length;
    let ws: WebSocket | undefined;
    const countPreAuth = (chunk: Buffer) => {
      received += chunk.length;
      if (received > PRE_AUTH_MAX_BYTES && ws) this.tooMuchBeforeAuth(ws, socket, ip);
    };
    socket.on('data', countPreAuth);
    // The 101 and the challenge (sent in the callback, which ws calls at once) leave in one write.
    socket.cork();
    try {
      this.wss.handleUpgrade(req, socket, head, (upgraded) => {
        ws = upgraded;
        this.accept(upgraded, ip, socket, () => socket.off('data', countPreAuth));
        if (received > PRE_AUTH_MAX_BYTES) this.tooMuchBeforeAuth(upgraded, socket, ip);
      });
    } finally {
      socket.uncork();
    }
  }

  /** Stops reading what an unauthenticated peer still sends (discarded unparsed) and closes with 1009. */
  private tooMuchBeforeAuth(ws: WebSocket, socket: Duplex, ip: string): void {
    if (ws.readyState !== WebSocket.OPEN) return;
    this.deps.log.info({ ip, limit: PRE_AUTH_MAX_BYTES }, 'agent refused: too much data before authentication');
    socket.removeAllListeners('data');
    socket.on('data', () => {});
    ws.close(AgentClose.tooBig, 'too much data before authentication');
  }

  private endHandshake(ws: WebSocket): void {
    const ip = this.handshakes.get(ws);
    if (ip === undefined) return;
    this.handshakes.delete(ws);
    this.returns.finished();
    const left = (this.handshakesByAddress.get(ip) ?? 1) - 1;
    if (left > 0) this.handshakesByAddress.set(ip, left);
    else this.handshakesByAddress.delete(ip);
  }

  private accept(ws: WebSocket, ip: string, socket: Duplex, authenticated: () => void): void {
    this.handshakes.set(ws, ip);
    this.handshakesByAddress.set(ip, (this.handshakesByAddress.get(ip) ?? 0) + 1);
    const nonce = crypto.randomBytes(32).toString('base64url');
    // Let go once cleared: the close listener below lives as long as the connection.
    // Closed as "retry later", not 4401: on a loaded broker (a reconnect storm) the answer may be in
    // the socket unread when this timer fires, and 4401 tells an agent its key is not accepted (one
    // without a pinned broker key enrols again).
    let timer: NodeJS.Timeout | undefined = setTimeout(
      () => ws.close(AgentClose.retryLater, 'no authentication in time: retry later'),
      this.deps.config.agentAuthTimeoutMs,
    );
    ws.on('error', (err) => this.deps.log.debug({ err, ip }, 'agent socket error'));
    ws.once('close', () => {
      clearTimeout(timer);
      this.endHandshake(ws);
    });
    ws.once('message', (data, isBinary) => {
      clearTimeout(timer);
      timer = undefined;
      this.authenticate(ws, socket, data, isBinary, nonce, ip, authenticated).catch((err) => {
        this.deps.log.error({ err, ip }, 'agent authentication failed');
        if (ws.readyState === WebSocket.OPEN) ws.close(1011, 'internal error');
      });
    });
    ws.send(JSON.stringify({ t: 'challenge', nonce } satisfies ControlMessage));
  }

  private async authenticate(
    ws: WebSocket,
    socket: Duplex,
    data: RawData,
    isBinary: boolean,
    nonce: string,
    ip: string,
    authenticated: () => void,
  ): Promise<void> {
    const { log } = this.deps;
    const refuse = (code: number, reason: string, detail: Record<string, unknown> = {}) => {
      log.info({ ip, code, reason, ...detail }, 'agent refused');
      ws.close(code, reason);
    };
    const envelope = isBinary ? undefined : parseEnvelope(String(data));
    const msg = envelope && readAuth(envelope);
    const deviceId = msg?.device_id;
    if (!msg || deviceId === undefined || !DEVICE_ID_PATTERN.test(deviceId)) {
      return refuse(AgentClose.unauthorized, 'expected {t:"auth", device_id, signature, version, protocol}');
    }
    const version = typeof msg.version === 'string' ? msg.version.slice(0, 64) : '';
    // An agent from before broker signatures sends no nonce: it gets no proof in the welcome.
    const agentNonce = typeof msg.nonce === 'string' && AGENT_NONCE_PATTERN.test(msg.nonce) ? msg.nonce : '';
    const protocol = typeof msg.protocol === 'number' && Number.isInteger(msg.protocol) ? msg.protocol : 0;
    const started = Date.now();
    const standing = await this.deps.standings.standing(deviceId);
    if (ws.readyState !== WebSocket.OPEN || this.deps.closing()) return;
    if (standing.kind === 'unknown') {
      // Proven, so that the agent enrols again (sending its bootstrap key) only with the broker it pinned.
      if (agentNonce) {
        const proof = this.deps.brokerKey.signWelcome({ device_id: deviceId, agent_nonce: agentNonce, challenge: nonce, outcome: 'unknown_device' });
        ws.send(JSON.stringify({ t: 'unknown_device', broker_signature: proof } satisfies ControlMessage));
      }
      return refuse(AgentClose.unauthorized, 'unknown device: enrol first', { deviceId });
    }
    if (standing.kind === 'revoked') return refuse(AgentClose.removed, `device ${standing.reason}: this key may not come back`, { deviceId });
    const stored = parseStoredDeviceKey(standing.publicKeyPem);
    if (stored.deviceId !== deviceId || !verifyAgentSignature(stored.key, nonce, msg.signature)) {
      return refuse(AgentClose.unauthorized, 'bad signature', { deviceId });
    }
    const penaltyUntil = this.penalized.get(deviceId);
    if (penaltyUntil !== undefined && penaltyUntil > Date.now()) {
      // Not logged at info: the reconnect loop of a broken agent would fill the log again.
      log.debug({ deviceId, ip }, 'agent refused: recent protocol error');
      ws.close(AgentClose.retryLater, 'protocol error on the last connection: retry later');
      return;
    }
    this.penalized.delete(deviceId);
    if (standing.kind === 'pending') {
      await this.deps.touch(deviceId, { last_seen: new Date().toISOString(), last_ip: ip });
      return refuse(AgentClose.pending, 'waiting for approval', { deviceId });
    }
    if ((this.cutOffs.get(deviceId) ?? 0) >= started) return refuse(AgentClose.removed, 'device removed: this key may not come back', { deviceId });
    if (protocol !== PROTOCOL_VERSION) log.warn({ deviceId, protocol, expected: PROTOCOL_VERSION }, 'agent speaks another protocol version');
    authenticated();
    this.endHandshake(ws);
    this.deps.accepted(ws, { deviceId, ip, version, protocol, agentNonce, challenge: nonce }, socket);
  }
}
