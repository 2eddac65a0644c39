/**
 * The agents connected to this broker, one connection per device: what an authenticated connection
 * becomes (the welcome, the mux), the dispatch of agents' messages to the domains that take them,
 * and the AgentLocator that remote access opens channels through. The handshake is handshake.ts's,
 * heartbeats and last contact presence.ts's.
 */
import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import WebSocket from 'ws';
import type { DeviceStatus } from '../../shared/api-types.js';
import { BROKER_SIGNED_TYPES } from '../../shared/broker-signature.js';
import { Mux, type Channel, type MuxProtocolError } from '../../shared/mux.js';
import { FROM_AGENT, type AgentMessage } from '../../shared/wire.js';
import { AgentClose, type ChannelKind, type ChannelParams, type ControlMessage, type ReloadMode } from '../../shared/protocol.js';
import type { Config } from '../environment.js';
import type { WriteQueue } from '../db/batch.js';
import type { Db } from '../db/database.js';
import type { AgentStanding } from '../enrol/service.js';
import type { BrokerKey } from './broker-key.js';
import { AgentHandshakes, type AgentHello } from './handshake.js';
import type { AgentLocator } from './locator.js';
import { AgentPresence, type Liveness } from './presence.js';

const RELOAD_TIMEOUT_MS = 15_000;
/**
 * How long a welcome may wait, unsent, for the device's configuration to leave with it in one socket
 * write (the configuration is rendered from the database after the welcome is made). A device whose
 * configuration takes longer, or that has none, gets its welcome after this time.
 */
export const WELCOME_HOLD_MS = 100;

interface AgentConnection extends Liveness {
  mux: Mux<AgentMessage>;
  ip: string;
  version: string;
  protocol: number;
  /** The agent's nonce of this connection ('' from an agent that sends none): in every signed message. */
  agentNonce: string;
  /** The sequence number of the last signed message sent on this connection. */
  seq: number;
  /** Kept small: one of these per connected agent (ms since the epoch, no Date; no timer of its own: see presence.ts). */
  connectedAt: number;
  /** Reloads waiting for their acknowledgement; made on the first one. */
  reloads?: Map<string, { resolve: () => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>;
  /** The socket under the connection while its welcome is held (corked: see WELCOME_HOLD_MS). */
  held?: Duplex;
}

/** GET /device/{device_id}/status's record: declared once for the broker and the console. */
export type { DeviceStatus } from '../../shared/api-types.js';

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
  config: Pick<Config, 'trustProxy' | 'agentHeartbeatMs' | 'agentHandshakesMax' | 'agentHandshakesPerAddress' | 'agentAuthTimeoutMs'>;
  logger: Logger;
  /** last contact of devices */
  db: Db;
  /** Where the contact written at each connect goes: committed with the other writes of the same turn. */
  writes?: WriteQueue;
  /** Who a device is (unknown, revoked, pending, approved): asked at every handshake. */
  standings: { standing(deviceId: string): Promise<AgentStanding> };
  /** Where the agents' inventory reports go. */
  inventory: { record(deviceId: string, data: Record<string, unknown>): Promise<void> };
  /** The broker's signing key: proves this broker in the welcome and signs configurations and update announcements. */
  brokerKey: Pick<BrokerKey, 'publicKeyPem' | 'sign' | 'signWelcome'>;
}

/**
 * The agents connected to this broker, one connection per device. It takes the agent WebSocket in
 * through its handshake (handshake.ts: challenge, signature check against the enrolled key), sends
 * a welcome proving the broker's signing key over the agent's nonce, signs what changes a device
 * (shared/broker-signature.ts), keeps connections alive and their last contact recorded
 * (presence.ts), hands inventory reports on, and is the AgentLocator that remote access opens
 * channels through. Emits `connected` and `disconnected` with the device id.
 */
export class AgentHub extends EventEmitter<AgentHubEvents> implements AgentLocator {
  private readonly agents = new Map<string, AgentConnection>();
  private readonly handshakes: AgentHandshakes;
  private readonly presence: AgentPresence;
  private readonly log: Logger;
  private closing = false;
  /** Connections whose welcome is held, by when it was made (performance.now(), in that order); one timer releases them. */
  private readonly holding = new Map<AgentConnection, number>();
  private holdTimer?: NodeJS.Timeout;
  /** Whether a device's agent is connected to another broker sharing the database (broker/cluster). */
  private elsewhere: (deviceId: string) => boolean = () => false;
  /** Device-level messages from agents that other domains take (configuration results, reports, …). */
  private readonly handlers = new Map<string, (deviceId: string, msg: AgentMessage) => void | Promise<void>>();

  constructor(private readonly deps: AgentHubDeps) {
    super();
    this.log = deps.logger.child({ module: 'agents' });
    this.presence = new AgentPresence(deps.db, this.log, () => this.agents.values(), deps.writes);
    this.handshakes = new AgentHandshakes({
      config: deps.config,
      log: this.log,
      standings: deps.standings,
      brokerKey: deps.brokerKey,
      touch: (deviceId, patch) => this.presence.touch(deviceId, patch),
      closing: () => this.closing,
      accepted: (ws, hello, socket) => this.register(ws, hello, socket),
    });
  }

  async init(): Promise<void> {}

  /**
   * Closes every agent connection without waiting for the agents to answer: each is sent the close
   * (1001, shutdown) and its socket is destroyed at once. With thousands connected, waiting for each
   * close handshake (or a grace period for those that never answer) made the stop take seconds to
   * tens of seconds while the fleet was already reconnecting.
   */
  async close(): Promise<void> {
    this.closing = true;
    this.presence.stop();
    this.handshakes.abort();
    clearTimeout(this.holdTimer);
    this.holdTimer = undefined;
    const connected = [...this.agents.values()];
    for (const conn of connected) {
      this.closeConnection(conn, AgentClose.shutdown, 'broker shutting down');
      // The close frame is written (or, to an agent that does not read, dropped); its answer is not awaited.
      conn.ws.terminate();
    }
    await this.presence.recordShutdown(connected.map((c) => c.deviceId));
    await this.handshakes.close();
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
    this.handshakes.cutOff(deviceId);
    const conn = this.agents.get(deviceId);
    if (!conn) return;
    this.log.info({ deviceId, reason }, 'agent cut off');
    this.closeConnection(conn, AgentClose.removed, reason.slice(0, 120));
  }

  /**
   * Closes the agent's connection here without refusing it later: the device connected to another
   * broker sharing the database, so this connection is stale (the agent keeps one at a time).
   */
  release(deviceId: string, reason: string): void {
    const conn = this.agents.get(deviceId);
    if (!conn) return;
    this.log.info({ deviceId, reason }, 'agent connection released');
    this.closeConnection(conn, AgentClose.replaced, reason.slice(0, 120));
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
    } else {
      conn.seq += 1;
      conn.mux.send(this.deps.brokerKey.sign(msg, { device_id: deviceId, nonce: conn.agentNonce, seq: conn.seq, ts: Date.now() }));
    }
    // The configuration leaves in the same write as the welcome held for it (and what was sent meanwhile).
    if (msg.t === 'config') this.releaseWelcome(conn);
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
    const lastSeen = await this.presence.lastSeen(deviceId);
    const conn = this.agents.get(deviceId);
    const elsewhere = conn === undefined && this.elsewhere(deviceId);
    return {
      uuid: deviceId,
      // Remote sessions can be opened now: the agent is connected and speaks the channel protocol.
      remote_access: (conn !== undefined && conn.protocol >= 1) || elsewhere,
      connected: conn !== undefined || elsewhere,
      last_seen: lastSeen,
    };
  }

  // ---- the connection -----------------------------------------------------------------------------

  /** An agent's WebSocket upgrade: its handshake (handshake.ts), then its connection here. */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    this.handshakes.upgrade(req, socket, head);
  }

  /** An authenticated agent: its connection (replacing an older one of the device), the welcome, and its messages. */
  private register(ws: WebSocket, { deviceId, ip, version, protocol, agentNonce, challenge }: AgentHello, socket: Duplex): void {
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
    this.presence.start(heartbeatMs);
    const previous = this.agents.get(deviceId);
    this.agents.set(deviceId, conn);
    if (previous) {
      this.log.info({ deviceId }, 'a newer connection replaces the agent connection');
      this.closeConnection(previous, AgentClose.replaced, 'replaced by a newer connection');
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
    this.holdWelcome(conn, socket);
    const { brokerKey } = this.deps;
    mux.send({
      t: 'welcome',
      device_id: deviceId,
      heartbeat_ms: heartbeatMs,
      broker_key: brokerKey.publicKeyPem,
      ...(agentNonce ? { broker_signature: brokerKey.signWelcome({ device_id: deviceId, agent_nonce: agentNonce, challenge }) } : {}),
    });
    this.log.info({ deviceId, ip, version }, 'agent connected');
    void this.presence.touch(deviceId, { last_seen: new Date(now).toISOString(), last_ip: ip, agent_version: version || null });
    this.emit('connected', deviceId);
  }

  /**
   * Corks the socket before the welcome: the welcome, and what is sent to the agent until its
   * configuration (included) or for WELCOME_HOLD_MS, leave in one write instead of one each.
   */
  private holdWelcome(conn: AgentConnection, socket: Duplex): void {
    socket.cork();
    conn.held = socket;
    this.holding.set(conn, performance.now());
    this.holdTimer ??= setTimeout(() => this.releaseDue(), WELCOME_HOLD_MS);
  }

  /** Closes a connection with its code, after what its held welcome kept back (the close frame must not wait behind the cork). */
  private closeConnection(conn: AgentConnection, code: number, reason: string): void {
    this.releaseWelcome(conn);
    conn.mux.close(code, reason);
  }

  /** Sends what a connection's held welcome kept back. */
  private releaseWelcome(conn: AgentConnection): void {
    const socket = conn.held;
    if (!socket) return;
    conn.held = undefined;
    this.holding.delete(conn);
    socket.uncork();
  }

  /** The timer of the held welcomes: releases those held WELCOME_HOLD_MS, and runs again for the next. */
  private releaseDue(): void {
    this.holdTimer = undefined;
    const due = performance.now() - WELCOME_HOLD_MS;
    for (const [conn, since] of this.holding) {
      if (since > due) {
        this.holdTimer = setTimeout(() => this.releaseDue(), since - due);
        return;
      }
      this.releaseWelcome(conn);
    }
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
    this.releaseWelcome(conn);
    if (conn.mux.closeCode === AgentClose.protocolError) this.handshakes.penalize(conn.deviceId);
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
    if (!this.closing) void this.presence.touch(conn.deviceId, { last_seen: new Date().toISOString() });
    this.emit('disconnected', conn.deviceId);
  }
}
