/**
 * Whether connected agents are still there, and their last contact: one timer pings every agent
 * not pinged for a heartbeat, cuts those silent for three, and writes last contact to the devices
 * (through the devices domain) in batches rather than one statement per pong.
 */
import type { Logger } from 'pino';
import WebSocket from 'ws';
import { immediateWrites, type WriteQueue } from '../db/batch.js';
import type { Db } from '../db/database.js';
import { lastSeenOf, recordContact, recordLastSeen } from '../devices/directory.js';

/** last_seen is written on connect, on disconnect, and on pongs at most this often. */
const LAST_SEEN_EVERY_MS = 60_000;
/** Devices whose last contact one statement writes at most. */
const LAST_SEEN_BATCH = 500;

/** What the sweep reads and keeps of a connection (ms since the epoch). */
export interface Liveness {
  deviceId: string;
  ws: WebSocket;
  lastHeard: number;
  lastPinged: number;
  lastSeenWritten: number;
}

export class AgentPresence {
  /** One timer for every connection's heartbeat and last contact (see sweep). */
  private sweeper?: NodeJS.Timeout;

  constructor(
    private readonly db: Db,
    private readonly log: Logger,
    /** The connections of this broker, read at each tick. */
    private readonly connections: () => Iterable<Liveness>,
    /** Where a device's contact is written: with the other writes of the same turn (a storm's connects in one commit). */
    private readonly writes: WriteQueue = immediateWrites,
  ) {}

  /**
   * One timer for all connections (a timer each costs memory per agent): every tick it pings the
   * agents not pinged for a heartbeat (spread as their connections were), cuts those silent for 3
   * heartbeats, and writes last contact of those heard since their last write LAST_SEEN_EVERY_MS
   * ago, in one statement per few hundred devices rather than one per pong. Started once.
   */
  start(heartbeatMs: number): void {
    if (this.sweeper) return;
    const tick = Math.max(100, Math.min(1000, Math.floor(heartbeatMs / 4)));
    this.sweeper = setInterval(() => this.sweep(heartbeatMs), tick);
    this.sweeper.unref();
  }

  stop(): void {
    clearInterval(this.sweeper);
  }

  private sweep(heartbeatMs: number): void {
    const now = Date.now();
    const due: string[] = [];
    for (const conn of this.connections()) {
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
    for (let i = 0; i < deviceIds.length; i += LAST_SEEN_BATCH) {
      const batch = deviceIds.slice(i, i + LAST_SEEN_BATCH);
      try {
        await recordLastSeen(this.db, batch, lastSeen);
      } catch (err) {
        this.log.warn({ err, devices: batch.length }, 'last contact of agents not recorded');
      }
    }
  }

  /**
   * Records a device's contact (connect, disconnect, a pending agent's handshake) with the other
   * writes of this turn (see the write queue); a failure is logged.
   */
  async touch(deviceId: string, patch: { last_seen?: string; last_ip?: string; agent_version?: string | null }): Promise<void> {
    try {
      await this.writes.run(() => recordContact(this.db, deviceId, patch));
    } catch (err) {
      this.log.warn({ err, deviceId }, 'device contact not recorded');
    }
  }

  /**
   * Records the last contact of the agents connected at shutdown, a statement per LAST_SEEN_BATCH
   * (one statement for all could pass the database's limit of bound values); a failure is logged.
   */
  async recordShutdown(deviceIds: string[]): Promise<void> {
    await this.touchMany(deviceIds, new Date().toISOString());
  }

  /** A device's last contact as stored (null when never, or no such device). */
  async lastSeen(deviceId: string): Promise<string | null> {
    return (await lastSeenOf(this.db, deviceId)) ?? null;
  }
}
