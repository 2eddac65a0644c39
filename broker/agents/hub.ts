import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import WebSocket, { WebSocketServer, type RawData } from 'ws';
import { deviceIdOf, parseDevicePublicKey, verifyChallenge } from '../../shared/device-key.js';
import { Mux, type Channel } from '../../shared/mux.js';
import { AGENT_WS_PATH, AgentClose, PROTOCOL_VERSION, type ChannelKind, type ChannelParams, type ControlMessage } from '../../shared/protocol.js';
import type { Config } from '../config.js';
import type { Db } from '../db/database.js';
import { DEVICE_ID_PATTERN } from '../devices/scope.js';
import type { AgentStanding } from '../enrol/service.js';
import type { UpgradeRouter } from '../http/upgrade.js';
import type { AgentLocator } from './locator.js';

/** An agent must answer the challenge within this time. */
const AUTH_TIMEOUT_MS = 10_000;
const RELOAD_TIMEOUT_MS = 15_000;
/** last_seen is written on connect, on disconnect, and on pongs at most this often. */
const LAST_SEEN_EVERY_MS = 60_000;
/** Channel frames are at most 64 KiB; control messages are small; an inventory report stays well below. */
const MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
const SHUTDOWN_GRACE_MS = 1000;
/** Connections still in their handshake beyond this number are refused (a cheap guard against floods). */
const MAX_HANDSHAKES = 1024;
/** How long a cut-off is remembered to refuse a handshake that was already past its database check. */
const CUT_OFF_MEMORY_MS = 60_000;

interface AgentConnection {
  deviceId: string;
  ws: WebSocket;
  mux: Mux;
  ip: string;
  version: string;
  protocol: number;
  connectedAt: Date;
  lastHeard: number;
  lastSeenWritten: number;
  heartbeat: NodeJS.Timeout;
  reloads: Map<string, { resolve: () => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>;
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
  config: Pick<Config, 'trustProxy' | 'agentHeartbeatMs'>;
  logger: Logger;
  /** last contact of devices */
  db: Db;
  upgrades: Pick<UpgradeRouter, 'register'>;
  /** Who a device is (unknown, revoked, pending, approved): asked at every handshake. */
  standings: { standing(deviceId: string): Promise<AgentStanding> };
  /** Where the agents' inventory reports go. */
  inventory: { record(deviceId: string, data: Record<string, unknown>): Promise<void> };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The agents connected to this broker, one connection per device. It accepts the agent
 * WebSocket (challenge, signature check against the enrolled key, welcome), keeps it alive with
 * pings, records last contact, hands inventory reports on, and is the AgentLocator that remote
 * access opens channels through. Emits `connected` and `disconnected` with the device id.
 */
export class AgentHub extends EventEmitter<AgentHubEvents> implements AgentLocator {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_MESSAGE_BYTES, perMessageDeflate: false });
  private readonly agents = new Map<string, AgentConnection>();
  private readonly handshakes = new Set<WebSocket>();
  private readonly cutOff = new Map<string, number>();
  private readonly log: Logger;
  private closing = false;

  constructor(private readonly deps: AgentHubDeps) {
    super();
    this.log = deps.logger.child({ module: 'agents' });
  }

  async init(): Promise<void> {
    this.deps.upgrades.register(AGENT_WS_PATH, (req, socket, head) => this.upgrade(req, socket, head));
  }

  async close(): Promise<void> {
    this.closing = true;
    for (const ws of this.handshakes) ws.terminate();
    this.handshakes.clear();
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

  async reload(deviceId: string): Promise<void> {
    const conn = this.agents.get(deviceId);
    if (!conn) throw new AgentNotConnectedError(deviceId);
    const id = crypto.randomUUID();
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        conn.reloads.delete(id);
        reject(new Error(`The agent of device ${deviceId} did not acknowledge the reload in time.`));
      }, RELOAD_TIMEOUT_MS);
      conn.reloads.set(id, { resolve, reject, timer });
      conn.mux.send({ t: 'reload', id });
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

  // ---- for other domains ----------------------------------------------------------------------

  /** Device ids with a live agent connection here. */
  connectedDevices(): string[] {
    return [...this.agents.keys()];
  }

  /** Asks a connected agent for a fresh inventory report; false when it is not connected. */
  requestInventory(deviceId: string): boolean {
    const conn = this.agents.get(deviceId);
    if (!conn) return false;
    conn.mux.send({ t: 'inventory', data: {} });
    return true;
  }

  /** Connection facts of a connected agent (undefined when it is not connected here). */
  connectionInfo(deviceId: string): { ip: string; version: string; protocol: number; connected_at: string } | undefined {
    const conn = this.agents.get(deviceId);
    return conn && { ip: conn.ip, version: conn.version, protocol: conn.protocol, connected_at: conn.connectedAt.toISOString() };
  }

  /** `GET /device/{id}/status`. The route has checked device:read on the device. */
  async status(deviceId: string): Promise<DeviceStatus> {
    const row = await this.deps.db.selectFrom('devices').select(['last_seen']).where('device_id', '=', deviceId).executeTakeFirst();
    const conn = this.agents.get(deviceId);
    return {
      uuid: deviceId,
      // Remote sessions can be opened now: the agent is connected and speaks the channel protocol.
      remote_access: conn !== undefined && conn.protocol >= 1,
      connected: conn !== undefined,
      last_seen: row?.last_seen ?? null,
    };
  }

  // ---- the connection -----------------------------------------------------------------------------

  private clientIp(req: IncomingMessage): string {
    const forwarded = req.headers['x-forwarded-for'];
    if (this.deps.config.trustProxy && typeof forwarded === 'string' && forwarded.trim()) return forwarded.split(',')[0].trim();
    return (req.socket.remoteAddress ?? '').replace(/^::ffff:/, '');
  }

  private upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    if (this.closing || this.handshakes.size >= MAX_HANDSHAKES) {
      socket.destroy();
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.accept(ws, this.clientIp(req)));
  }

  private accept(ws: WebSocket, ip: string): void {
    this.handshakes.add(ws);
    const nonce = crypto.randomBytes(32).toString('base64url');
    const timer = setTimeout(() => ws.close(AgentClose.unauthorized, 'no authentication in time'), AUTH_TIMEOUT_MS);
    ws.on('error', (err) => this.log.debug({ err, ip }, 'agent socket error'));
    ws.once('close', () => {
      clearTimeout(timer);
      this.handshakes.delete(ws);
    });
    ws.once('message', (data, isBinary) => {
      clearTimeout(timer);
      this.authenticate(ws, data, isBinary, nonce, ip).catch((err) => {
        this.log.error({ err, ip }, 'agent authentication failed');
        if (ws.readyState === WebSocket.OPEN) ws.close(1011, 'internal error');
      });
    });
    ws.send(JSON.stringify({ t: 'challenge', nonce } satisfies ControlMessage));
  }

  private async authenticate(ws: WebSocket, data: RawData, isBinary: boolean, nonce: string, ip: string): Promise<void> {
    const refuse = (code: number, reason: string, detail: Record<string, unknown> = {}) => {
      this.log.info({ ip, code, reason, ...detail }, 'agent refused');
      ws.close(code, reason);
    };
    let parsed: unknown;
    try {
      parsed = isBinary ? undefined : JSON.parse(String(data));
    } catch {
      parsed = undefined;
    }
    const msg = isObject(parsed) ? parsed : {};
    const deviceId = msg.device_id;
    if (msg.t !== 'auth' || typeof deviceId !== 'string' || !DEVICE_ID_PATTERN.test(deviceId) || typeof msg.signature !== 'string') {
      return refuse(AgentClose.unauthorized, 'expected {t:"auth", device_id, signature, version, protocol}');
    }
    const version = typeof msg.version === 'string' ? msg.version.slice(0, 64) : '';
    const protocol = typeof msg.protocol === 'number' && Number.isInteger(msg.protocol) ? msg.protocol : 0;
    const started = Date.now();
    const standing = await this.deps.standings.standing(deviceId);
    if (ws.readyState !== WebSocket.OPEN || this.closing) return;
    if (standing.kind === 'unknown') return refuse(AgentClose.unauthorized, 'unknown device: enrol first', { deviceId });
    if (standing.kind === 'revoked') return refuse(AgentClose.removed, `device ${standing.reason}: this key may not come back`, { deviceId });
    const publicKey = parseDevicePublicKey(standing.publicKeyPem);
    if (deviceIdOf(publicKey) !== deviceId || !verifyChallenge(publicKey, nonce, msg.signature)) {
      return refuse(AgentClose.unauthorized, 'bad signature', { deviceId });
    }
    if (standing.kind === 'pending') {
      await this.touch(deviceId, { last_seen: new Date().toISOString(), last_ip: ip });
      return refuse(AgentClose.pending, 'waiting for approval', { deviceId });
    }
    if ((this.cutOff.get(deviceId) ?? 0) >= started) return refuse(AgentClose.removed, 'device removed: this key may not come back', { deviceId });
    if (protocol !== PROTOCOL_VERSION) this.log.warn({ deviceId, protocol, expected: PROTOCOL_VERSION }, 'agent speaks another protocol version');
    this.register(ws, deviceId, ip, version, protocol);
  }

  private register(ws: WebSocket, deviceId: string, ip: string, version: string, protocol: number): void {
    this.handshakes.delete(ws);
    const heartbeatMs = this.deps.config.agentHeartbeatMs;
    const now = Date.now();
    const mux = new Mux(ws);
    const conn: AgentConnection = {
      deviceId,
      ws,
      mux,
      ip,
      version,
      protocol,
      connectedAt: new Date(now),
      lastHeard: now,
      lastSeenWritten: now,
      reloads: new Map(),
      heartbeat: setInterval(() => {
        if (Date.now() - conn.lastHeard > 3 * heartbeatMs) {
          this.log.warn({ deviceId }, 'agent silent for 3 heartbeats: cut off');
          ws.terminate();
          return;
        }
        if (ws.readyState === WebSocket.OPEN) ws.ping();
      }, heartbeatMs),
    };
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
    ws.on('pong', () => {
      heard();
      if (conn.lastHeard - conn.lastSeenWritten >= LAST_SEEN_EVERY_MS) {
        conn.lastSeenWritten = conn.lastHeard;
        void this.touch(deviceId, { last_seen: new Date(conn.lastHeard).toISOString() });
      }
    });
    mux.on('control', (msg: ControlMessage) => this.onControl(conn, msg));
    mux.on('protocol-error', (err: Error) => this.log.warn({ deviceId, err: err.message }, 'agent sent an unreadable message'));
    mux.on('close', () => this.onClosed(conn));
    mux.send({ t: 'welcome', device_id: deviceId, heartbeat_ms: heartbeatMs });
    this.log.info({ deviceId, ip, version }, 'agent connected');
    void this.touch(deviceId, { last_seen: conn.connectedAt.toISOString(), last_ip: ip, agent_version: version || null });
    this.emit('connected', deviceId);
  }

  private onControl(conn: AgentConnection, msg: ControlMessage): void {
    switch (msg.t) {
      case 'inventory':
        if (!isObject(msg.data)) return;
        this.deps.inventory.record(conn.deviceId, msg.data).catch((err) => this.log.error({ err, deviceId: conn.deviceId }, 'inventory not stored'));
        return;
      case 'reload_ack': {
        const waiter = typeof msg.id === 'string' ? conn.reloads.get(msg.id) : undefined;
        if (!waiter) return;
        clearTimeout(waiter.timer);
        conn.reloads.delete(msg.id);
        waiter.resolve();
        return;
      }
      default:
        this.log.debug({ deviceId: conn.deviceId, t: (msg as { t?: unknown }).t }, 'agent message ignored');
    }
  }

  private onClosed(conn: AgentConnection): void {
    clearInterval(conn.heartbeat);
    for (const [, waiter] of conn.reloads) {
      clearTimeout(waiter.timer);
      waiter.reject(new Error(`The agent of device ${conn.deviceId} disconnected before acknowledging the reload.`));
    }
    conn.reloads.clear();
    // A connection replaced by a newer one of the same device leaves the newer one in place.
    if (this.agents.get(conn.deviceId) !== conn) return;
    this.agents.delete(conn.deviceId);
    this.log.info({ deviceId: conn.deviceId }, 'agent disconnected');
    if (!this.closing) void this.touch(conn.deviceId, { last_seen: new Date().toISOString() });
    this.emit('disconnected', conn.deviceId);
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
