import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import WebSocket, { WebSocketServer, type RawData } from 'ws';
import { AGENT_NONCE_PATTERN, BROKER_SIGNED_TYPES } from '../../shared/broker-signature.js';
import { parseStoredDeviceKey } from '../../shared/device-key.js';
import { verifyAgentSignature } from '../auth/credentials.js';
import { Mux, type Channel, type MuxProtocolError } from '../../shared/mux.js';
import { FROM_AGENT, parseEnvelope, readAuth, type AgentMessage } from '../../shared/wire.js';
import { AgentClose, PROTOCOL_VERSION, type ChannelKind, type ChannelParams, type ControlMessage, type ReloadMode } from '../../shared/protocol.js';
import type { Config } from '../environment.js';
import type { Db } from '../db/database.js';
import { DEVICE_ID_PATTERN } from '../devices/scope.js';
import type { AgentStanding } from '../enrol/service.js';
import type { BrokerKey } from './broker-key.js';
import type { AgentLocator } from './locator.js';

/** An agent must answer the challenge within this time. */
const AUTH_TIMEOUT_MS = 10_000;
const RELOAD_TIMEOUT_MS = 15_000;
/** last_seen is written on connect, on disconnect, and on pongs at most this often. */
const LAST_SEEN_EVERY_MS = 60_000;
/** Channel frames are at most 64 KiB; control messages are small; an inventory report stays well below. */
const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
const SHUTDOWN_GRACE_MS = 1000;
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
/** What a refused handshake is told: try again later. */
const BUSY_RESPONSE =
  'HTTP/1.1 503 Service Unavailable\r\nRetry-After: 10\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n' +
  '{"code":503,"error":"busy","message":"Too many agent handshakes in progress; retry later."}';
/** How long a cut-off is remembered to refuse a handshake that was already past its database check. */
const CUT_OFF_MEMORY_MS = 60_000;

interface AgentConnection {
  deviceId: string;
  ws: WebSocket;
  mux: Mux<AgentMessage>;
  ip: string;
  version: string;
  protocol: number;
  /** The agent's nonce of this connection ('' from an agent that sends none): in every signed message. */
  agentNonce: string;
  /** The sequence number of the last signed message sent on this connection. */
  seq: number;
  /** Kept small: one of these per connected agent (ms since the epoch, no Date; no timer of its own: see sweep). */
  connectedAt: number;
  lastHeard: number;
  lastPinged: number;
  lastSeenWritten: number;
  /** Reloads waiting for their acknowledgement; made on the first one. */
  reloads?: Map<string, { resolve: () => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>;
}

export interface DeviceStatus {
  uuid: string;
  remote_access: boolean;
  connected: boolean;
  last_seen: string | null;
}

export interface AgentHubEvents {
  connected: [deviceId: string];
  disconnected: [deviceId: string];
}

/** Throws this when a device has no agent connection here; `code` lets callers answer 409/503. */
export class AgentNotConnectedError extends Error {
  readonly code = 'agent_not_connected';
  constructor(readonly deviceId: string) {
    super(`The agent of device ${deviceId} is not connected.`);
  }
}

/** What the hub uses. Enrolment and inventory also reach agents through the hub: the composition root binds them late. */
export interface AgentHubDeps {
  config: Pick<Config, 'trustProxy' | 'agentHeartbeatMs' | 'agentHandshakesMax' | 'agentHandshakesPerAddress'>;
  logger: Logger;
  /** last contact of devices */
  db: Db;
  /** Who a device is (unknown, revoked, pending, approved): asked at every handshake. */
  standings: { standing(deviceId: string): Promise<AgentStanding> };
  /** Where the agents' inventory reports go. */
  inventory: { record(deviceId: string, data: Record<string, unknown>): Promise<void> };
  /** The broker's signing key: proves this broker in the welcome and signs configurations and update announcements. */
  brokerKey: Pick<BrokerKey, 'publicKeyPem' | 'sign' | 'signWelcome'>;
}

/**
 * The agents connected to this broker, one connection per device. It accepts the agent
 * WebSocket (challenge, signature check against the enrolled key, a welcome proving the broker's
 * signing key over the agent's nonce), signs what changes a device (shared/broker-signature.ts), keeps it alive with
 * pings, records last contact, hands inventory reports on, and is the AgentLocator that remote
 * access opens channels through. Emits `connected` and `disconnected` with the device id.
 */
export class AgentHub extends EventEmitter<AgentHubEvents> implements AgentLocator {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES, perMessageDeflate: false });
  private readonly agents = new Map<string, AgentConnection>();
  /** Connections still in their handshake, with the address they come from. */
  private readonly handshakes = new Map<WebSocket, string>();
  private readonly handshakesByAddress = new Map<string, number>();
  private readonly cutOff = new Map<string, number>();
  /** Device id → until when it is refused after a protocol error (one entry per enrolled device at most). */
  private readonly penalized = new Map<string, number>();
  private readonly log: Logger;
  private closing = false;
  /** Whether a device's agent is connected to another broker sharing the database (broker/cluster). */
  private elsewhere: (deviceId: string) => boolean = () => false;
  /** One timer for every connection's heartbeat and last contact (see sweep). */
  private sweeper?: NodeJS.Timeout;
  /** Device-level messages from agents that other domains take (configuration results, reports, …). */
  private readonly handlers = new Map<string, (deviceId: string, msg: AgentMessage) => void | Promise<void>>();

  constructor(private readonly deps: AgentHubDeps) {
    super();
    this.log = deps.logger.child({ module: 'agents' });
  }

  async init(): Promise<void> {}

  async close(): Promise<void> {
    this.closing = true;
    clearInterval(this.sweeper);
    for (const ws of [...this.handshakes.keys()]) ws.terminate();
    this.handshakes.clear();
    this.handshakesByAddress.clear();
    const connected = [...this.agents.values()];
    const sockets = connected.map((c) => c.ws);
    for (const conn of connected) conn.mux.close(AgentClose.shutdown, 'broker shutting down');
    if (connected.length > 0) {
      try {
        await this.deps.db
          .updateTable('devices')
          .set({ last_seen: new Date().toISOString() })
          .where(
            'device_id',
            'in',
            connected.map((c) => c.deviceId),
          )
          .execute();
      } catch (err) {
        this.log.warn({ err }, 'last contact of agents not recorded at shutdown');
      }
    }
    // A close handshake normally completes at once; an agent that does not answer is cut.
    await Promise.all(
      sockets.map(
        (ws) =>
          new Promise<void>((resolve) => {
            if (ws.readyState === WebSocket.CLOSED) return resolve();
            const timer = setTimeout(() => {
              ws.terminate();
              resolve();
            }, SHUTDOWN_GRACE_MS);
            ws.once('close', () => {
              clearTimeout(timer);
              resolve();
            });
          }),
      ),
    );
    await new Promise<void>((resolve) => this.wss.close(() => resolve()));
  }

  // ---- AgentLocator ------------------------------------------------------------------------------

  isConnected(deviceId: string): boolean {
    return this.agents.has(deviceId);
  }

  async open(deviceId: string, kind: ChannelKind, params: ChannelParams): Promise<{ channel: Channel; info: Record<string, unknown> }> {
    const conn = this.agents.get(deviceId);
    if (!conn) throw new AgentNotConnectedError(deviceId);
    return conn.mux.open(kind, params);
  }

  async reload(deviceId: string, mode: ReloadMode = 'restart'): Promise<void> {
    const conn = this.agents.get(deviceId);
    if (!conn) throw new AgentNotConnectedError(deviceId);
    const id = crypto.randomUUID();
    await new Promise<void>((resolve, reject) => {
      const reloads = (conn.reloads ??= new Map());
      const timer = setTimeout(() => {
        reloads.delete(id);
        reject(new Error(`The agent of device ${deviceId} did not acknowledge the reload in time.`));
      }, RELOAD_TIMEOUT_MS);
      reloads.set(id, { resolve, reject, timer });
      conn.mux.send({ t: 'reload', id, ...(mode === 'run' ? { mode } : {}) });
    });
  }

  disconnect(deviceId: string, reason: string): void {
    this.cutOff.set(deviceId, Date.now());
    this.forgetOldCutOffs();
    const conn = this.agents.get(deviceId);
    if (!conn) return;
    this.log.info({ deviceId, reason }, 'agent cut off');
    conn.mux.close(AgentClose.removed, reason.slice(0, 120));
  }

  /**
   * Closes the agent's connection here without refusing it later: the device connected to another
   * broker sharing the database, so this connection is stale (the agent keeps one at a time).
   */
  release(deviceId: string, reason: string): void {
    const conn = this.agents.get(deviceId);
    if (!conn) return;
    this.log.info({ deviceId, reason }, 'agent connection released');
    conn.mux.close(AgentClose.replaced, reason.slice(0, 120));
  }

  // ---- for other domains ----------------------------------------------------------------------

  /** Device ids with a live agent connection here. */
  connectedDevices(): string[] {
    return [...this.agents.keys()];
  }

  /**
   * Lets a domain take one kind of device-level message from agents (one handler per kind). The
   * handler gets messages as read on arrival (shared/wire.ts, FROM_AGENT); its failures are logged.
   */
  handle<T extends AgentMessage['t']>(t: T, handler: (deviceId: string, msg: Extract<AgentMessage, { t: T }>) => void | Promise<void>): void {
    if (this.handlers.has(t)) throw new Error(`agent messages of type ${t} already have a handler`);
    this.handlers.set(t, handler as (deviceId: string, msg: AgentMessage) => void | Promise<void>);
  }

  /**
   * Sends a device-level message to a connected agent; false when it is not connected here. What
   * changes the device (BROKER_SIGNED_TYPES: configurations, update announcements) goes signed for
   * this device and this connection, with the next sequence number.
   */
  send(deviceId: string, msg: ControlMessage): boolean {
    const conn = this.agents.get(deviceId);
    if (!conn) return false;
    if (!BROKER_SIGNED_TYPES.includes(msg.t)) {
      conn.mux.send(msg);
      return true;
    }
    conn.seq += 1;
    conn.mux.send(this.deps.brokerKey.sign(msg, { device_id: deviceId, nonce: conn.agentNonce, seq: conn.seq, ts: Date.now() }));
    return true;
  }

  /** Asks a connected agent for a fresh inventory report; false when it is not connected. */
  requestInventory(deviceId: string): boolean {
    const conn = this.agents.get(deviceId);
    if (!conn) return false;
    conn.mux.send({ t: 'inventory', data: {} });
    return true;
  }

  /**
   * When a connected agent was last heard from (any message, ping or heartbeat pong), as ISO 8601;
   * undefined when it is not connected here. Kept in memory: last_seen in the database is written
   * at most every LAST_SEEN_EVERY_MS, so this is what "seen" of an online device is.
   */
  lastHeard(deviceId: string): string | undefined {
    const conn = this.agents.get(deviceId);
    return conn && new Date(conn.lastHeard).toISOString();
  }

  /** Connection facts of a connected agent (undefined when it is not connected here). */
  connectionInfo(deviceId: string): { ip: string; version: string; protocol: number; connected_at: string } | undefined {
    const conn = this.agents.get(deviceId);
    return conn && { ip: conn.ip, version: conn.version, protocol: conn.protocol, connected_at: new Date(conn.connectedAt).toISOString() };
  }

  /** Lets status() count agents connected to other brokers of the cluster. */
  setElsewhere(check: (deviceId: string) => boolean): void {
    this.elsewhere = check;
  }

  /** `GET /device/{id}/status`. The route has checked device:read on the device. */
  async status(deviceId: string): Promise<DeviceStatus> {
    const row = await this.deps.db.selectFrom('devices').select(['last_seen']).where('device_id', '=', deviceId).executeTakeFirst();
    const conn = this.agents.get(deviceId);
    const elsewhere = conn === undefined && this.elsewhere(deviceId);
    return {
      uuid: deviceId,
      // Remote sessions can be opened now: the agent is connected and speaks the channel protocol.
      remote_access: (conn !== undefined && conn.protocol >= 1) || elsewhere,
      connected: conn !== undefined || elsewhere,
      last_seen: row?.last_seen ?? null,
    };
  }

  // ---- the connection -----------------------------------------------------------------------------

  private clientIp(req: IncomingMessage): string {
    const forwarded = req.headers['x-forwarded-for'];
    if (this.deps.config.trustProxy && typeof forwarded === 'string' && forwarded.trim()) return forwarded.split(',')[0].trim();
    return (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
  }

  /**
   * Handshakes are bounded in total and per source address, so one address cannot hold every slot
   * and lock enrolled agents out; a refused one is answered 503 with Retry-After.
   */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.closing) return void socket.destroy();
    const ip = this.clientIp(req);
    const { agentHandshakesMax, agentHandshakesPerAddress } = this.deps.config;
    if (this.handshakes.size >= agentHandshakesMax || (this.handshakesByAddress.get(ip) ?? 0) >= agentHandshakesPerAddress) {
      socket.on('error', () => {});
      socket.end(BUSY_RESPONSE);
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
    this.wss.handleUpgrade(req, socket, head, (upgraded) => {
      ws = upgraded;
      this.accept(upgraded, ip, () => socket.off('data', countPreAuth));
      if (received > PRE_AUTH_MAX_BYTES) this.tooMuchBeforeAuth(upgraded, socket, ip);
    });
  }

  /** Stops reading what an unauthenticated peer still sends (discarded unparsed) and closes with 1009. */
  private tooMuchBeforeAuth(ws: WebSocket, socket: Duplex, ip: string): void {
    if (ws.readyState !== WebSocket.OPEN) return;
    this.log.info({ ip, limit: PRE_AUTH_MAX_BYTES }, 'agent refused: too much data before authentication');
    socket.removeAllListeners('data');
    socket.on('data', () => {});
    ws.close(AgentClose.tooBig, 'too much data before authentication');
  }

  private endHandshake(ws: WebSocket): void {
    const ip = this.handshakes.get(ws);
    if (ip === undefined) return;
    this.handshakes.delete(ws);
    const left = (this.handshakesByAddress.get(ip) ?? 1) - 1;
    if (left > 0) this.handshakesByAddress.set(ip, left);
    else this.handshakesByAddress.delete(ip);
  }

  private accept(ws: WebSocket, ip: string, authenticated: () => void): void {
    this.handshakes.set(ws, ip);
    this.handshakesByAddress.set(ip, (this.handshakesByAddress.get(ip) ?? 0) + 1);
    const nonce = crypto.randomBytes(32).toString('base64url');
    // Let go once cleared: the close listener below lives as long as the connection.
    let timer: NodeJS.Timeout | undefined = setTimeout(() => ws.close(AgentClose.unauthorized, 'no authentication in time'), AUTH_TIMEOUT_MS);
    ws.on('error', (err) => this.log.debug({ err, ip }, 'agent socket error'));
    ws.once('close', () => {
      clearTimeout(timer);
      this.endHandshake(ws);
    });
    ws.once('message', (data, isBinary) => {
      clearTimeout(timer);
      timer = undefined;
      this.authenticate(ws, data, isBinary, nonce, ip, authenticated).catch((err) => {
        this.log.error({ err, ip }, 'agent authentication failed');
        if (ws.readyState === WebSocket.OPEN) ws.close(1011, 'internal error');
      });
    });
    ws.send(JSON.stringify({ t: 'challenge', nonce } satisfies ControlMessage));
  }

  private async authenticate(ws: WebSocket, data: RawData, isBinary: boolean, nonce: string, ip: string, authenticated: () => void): Promise<void> {
    const refuse = (code: number, reason: string, detail: Record<string, unknown> = {}) => {
      this.log.info({ ip, code, reason, ...detail }, 'agent refused');
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
    if (ws.readyState !== WebSocket.OPEN || this.closing) return;
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
      this.log.debug({ deviceId, ip }, 'agent refused: recent protocol error');
      ws.close(AgentClose.retryLater, 'protocol error on the last connection: retry later');
      return;
    }
    this.penalized.delete(deviceId);
    if (standing.kind === 'pending') {
      await this.touch(deviceId, { last_seen: new Date().toISOString(), last_ip: ip });
      return refuse(AgentClose.pending, 'waiting for approval', { deviceId });
    }
    if ((this.cutOff.get(deviceId) ?? 0) >= started) return refuse(AgentClose.removed, 'device removed: this key may not come back', { deviceId });
    if (protocol !== PROTOCOL_VERSION) this.log.warn({ deviceId, protocol, expected: PROTOCOL_VERSION }, 'agent speaks another protocol version');
    authenticated();
    this.register(ws, deviceId, ip, version, protocol, agentNonce, nonce);
  }

  private register(ws: WebSocket, deviceId: string, ip: string, version: string, protocol: number, agentNonce: string, challenge: string): void {
    this.endHandshake(ws);
    const heartbeatMs = this.deps.config.agentHeartbeatMs;
    const now = Date.now();
    const mux = new Mux(ws, { receives: FROM_AGENT });
    const conn: AgentConnection = {
      deviceId,
      ws,
      mux,
      ip,
      version,
      protocol,
      agentNonce,
      seq: 0,
      connectedAt: now,
      lastHeard: now,
      lastPinged: now,
      lastSeenWritten: now,
    };
    this.startSweeper(heartbeatMs);
    const previous = this.agents.get(deviceId);
    this.agents.set(deviceId, conn);
    if (previous) {
      this.log.info({ deviceId }, 'a newer connection replaces the agent connection');
      previous.mux.close(AgentClose.replaced, 'replaced by a newer connection');
    }
    const heard = () => {
      conn.lastHeard = Date.now();
    };
    ws.on('message', heard);
    ws.on('ping', heard);
    ws.on('pong', heard);
    mux.on('control', (msg) => this.onControl(conn, msg));
    // The mux reports only the first protocol error of a connection; the count goes with the disconnect line.
    mux.on('protocol-error', (err: MuxProtocolError) => this.log.warn({ deviceId, code: err.code, err: err.message }, 'agent broke the protocol'));
    mux.on('close', () => this.onClosed(conn));
    const { brokerKey } = this.deps;
    mux.send({
      t: 'welcome',
      device_id: deviceId,
      heartbeat_ms: heartbeatMs,
      broker_key: brokerKey.publicKeyPem,
      ...(agentNonce ? { broker_signature: brokerKey.signWelcome({ device_id: deviceId, agent_nonce: agentNonce, challenge }) } : {}),
    });
    this.log.info({ deviceId, ip, version }, 'agent connected');
    void this.touch(deviceId, { last_seen: new Date(now).toISOString(), last_ip: ip, agent_version: version || null });
    this.emit('connected', deviceId);
  }

  private onControl(conn: AgentConnection, msg: AgentMessage): void {
    switch (msg.t) {
      case 'inventory':
        this.deps.inventory.record(conn.deviceId, msg.data).catch((err) => this.log.error({ err, deviceId: conn.deviceId }, 'inventory not stored'));
        return;
      case 'reload_ack': {
        const waiter = conn.reloads?.get(msg.id);
        if (!waiter) return;
        clearTimeout(waiter.timer);
        conn.reloads?.delete(msg.id);
        waiter.resolve();
        return;
      }
      default: {
        const handler = this.handlers.get(msg.t);
        if (!handler) {
          this.log.debug({ deviceId: conn.deviceId, t: msg.t }, 'agent message ignored');
          return;
        }
        const deviceId = conn.deviceId;
        Promise.resolve()
          .then(() => handler(deviceId, msg))
          .catch((err) => this.log.error({ err, deviceId, t: msg.t }, 'agent message not handled'));
      }
    }
  }

  private onClosed(conn: AgentConnection): void {
    if (conn.mux.closeCode === AgentClose.protocolError) this.penalized.set(conn.deviceId, Date.now() + PROTOCOL_ERROR_PENALTY_MS);
    for (const [, waiter] of conn.reloads ?? []) {
      clearTimeout(waiter.timer);
      waiter.reject(new Error(`The agent of device ${conn.deviceId} disconnected before acknowledging the reload.`));
    }
    conn.reloads?.clear();
    // A connection replaced by a newer one of the same device leaves the newer one in place.
    if (this.agents.get(conn.deviceId) !== conn) return;
    this.agents.delete(conn.deviceId);
    const protocolErrors = conn.mux.protocolErrors;
    this.log.info({ deviceId: conn.deviceId, ...(protocolErrors > 0 ? { protocolErrors } : {}) }, 'agent disconnected');
    if (!this.closing) void this.touch(conn.deviceId, { last_seen: new Date().toISOString() });
    this.emit('disconnected', conn.deviceId);
  }

  /**
   * One timer for all connections (a timer each costs memory per agent): every tick it pings the
   * agents not pinged for a heartbeat (spread as their connections were), cuts those silent for 3
   * heartbeats, and writes last contact of those heard since their last write LAST_SEEN_EVERY_MS
   * ago, in one statement per few hundred devices rather than one per pong.
   */
  private startSweeper(heartbeatMs: number): void {
    if (this.sweeper) return;
    const tick = Math.max(100, Math.min(1000, Math.floor(heartbeatMs / 4)));
    this.sweeper = setInterval(() => this.sweep(heartbeatMs), tick);
    this.sweeper.unref();
  }

  private sweep(heartbeatMs: number): void {
    const now = Date.now();
    const due: string[] = [];
    for (const conn of this.agents.values()) {
      if (now - conn.lastHeard > 3 * heartbeatMs) {
        this.log.warn({ deviceId: conn.deviceId }, 'agent silent for 3 heartbeats: cut off');
        conn.ws.terminate();
        continue;
      }
      if (now - conn.lastPinged >= heartbeatMs && conn.ws.readyState === WebSocket.OPEN) {
        conn.lastPinged = now;
        conn.ws.ping();
      }
      if (conn.lastHeard - conn.lastSeenWritten >= LAST_SEEN_EVERY_MS) {
        conn.lastSeenWritten = conn.lastHeard;
        due.push(conn.deviceId);
      }
    }
    if (due.length > 0) void this.touchMany(due, new Date(now).toISOString());
  }

  private async touchMany(deviceIds: string[], lastSeen: string): Promise<void> {
    for (let i = 0; i < deviceIds.length; i += 500) {
      const batch = deviceIds.slice(i, i + 500);
      try {
        await this.deps.db.updateTable('devices').set({ last_seen: lastSeen }).where('device_id', 'in', batch).execute();
      } catch (err) {
        this.log.warn({ err, devices: batch.length }, 'last contact of agents not recorded');
      }
    }
  }

  private async touch(deviceId: string, patch: { last_seen?: string; last_ip?: string; agent_version?: string | null }): Promise<void> {
    try {
      await this.deps.db.updateTable('devices').set(patch).where('device_id', '=', deviceId).execute();
    } catch (err) {
      this.log.warn({ err, deviceId }, 'device contact not recorded');
    }
  }

  private forgetOldCutOffs(): void {
    const old = Date.now() - CUT_OFF_MEMORY_MS;
    for (const [id, at] of this.cutOff) if (at < old) this.cutOff.delete(id);
  }
}
