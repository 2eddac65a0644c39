/**
 * Who is in the cluster and who holds which agent, as this broker knows it: the brokers
 * (`cluster_brokers`, each with its heartbeat) and the agents connected to each (`agent_presence`).
 * This broker's own rows are written here (registration, heartbeat, presence of its agents in
 * order per device); the others' are read, and heard of through their presence events. Liveness
 * never compares two machines' clocks: a broker is alive while its heartbeat value keeps changing.
 * It is judged from reads only: a broker is gone once a read taken the expiry or more after its
 * heartbeat last changed finds it unchanged. A broker whose own reads are late (a slow tick on a
 * loaded machine, a database answering slowly) never takes a healthy peer for gone for that.
 */
import type { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { Db } from '../db/database.js';
import type { ClusterEvent } from './bus.js';

interface KnownBroker {
  url: string;
  /** its heartbeat_at as last read */
  heartbeat: number;
  /** when (on this broker's clock) that value was first read: liveness never compares two machines' clocks */
  changedAt: number;
  /** when (on this broker's clock) its row was last read */
  readAt: number;
}

/** What membership uses: the database, this broker's identity, and where it reports. */
export interface MembershipDeps {
  db: Db;
  log: Logger;
  me: string;
  expiryMs: number;
  /** Whether this broker is leaving: presence is not written any more. */
  isClosing(): boolean;
  /** Agents of the other brokers connecting and leaving (ClusterService.presence). */
  presence: EventEmitter<{ connected: [string]; disconnected: [string] }>;
  /** Announces this broker's agents connecting and leaving. */
  publish(event: ClusterEvent): Promise<void>;
  /** A broker is gone or left: its peer link is dropped. */
  dropLink(peer: string, why: string): void;
}

export class Membership {
  private readonly brokers = new Map<string, KnownBroker>();
  /** Devices whose agent another broker holds, by device id. */
  private readonly owners = new Map<string, string>();
  /** Presence writes of one device, in order (a disconnect never overtakes its connect). */
  private readonly writes = new Map<string, Promise<void>>();
  private brokersReload?: Promise<void>;
  private peerUrl = '';

  constructor(private readonly deps: MembershipDeps) {}

  /** Brokers known here, this one included. */
  get size(): number {
    return this.brokers.size;
  }

  /** The live broker other than this one holding the device's agent. */
  ownerOf(deviceId: string): { id: string; url: string } | undefined {
    const id = this.owners.get(deviceId);
    if (!id || id === this.deps.me) return undefined;
    const broker = this.brokers.get(id);
    if (!broker || !this.alive(broker)) return undefined;
    return { id, url: broker.url };
  }

  /** Brokers known here and alive, this one included. */
  liveBrokers(): string[] {
    const { me } = this.deps;
    return [me, ...[...this.brokers].filter(([id, b]) => id !== me && this.alive(b)).map(([id]) => id)];
  }

  /** Other brokers with a fresh heartbeat, read from the database. */
  async otherLiveBrokers(): Promise<string[]> {
    const rows = await this.deps.db
      .selectFrom('cluster_brokers')
      .select('broker_id')
      .where('heartbeat_at', '>', Date.now() - this.deps.expiryMs)
      .where('broker_id', '!=', this.deps.me)
      .execute();
    return rows.map((r) => r.broker_id);
  }

  /** Alive unless the last read, the expiry or more after the heartbeat last changed, found it unchanged. */
  private alive(broker: KnownBroker): boolean {
    return broker.readAt - broker.changedAt < this.deps.expiryMs;
  }

  // ---- this broker's rows --------------------------------------------------------------------------

  /** What a previous run under the same BROKER_ID left behind is not true any more. */
  async forgetPreviousRun(): Promise<void> {
    await this.deps.db.deleteFrom('agent_presence').where('broker_id', '=', this.deps.me).execute();
  }

  /** Registers this broker, reachable by its peers at `peerUrl`. */
  async register(peerUrl = this.peerUrl): Promise<void> {
    this.peerUrl = peerUrl;
    const now = Date.now();
    await this.deps.db
      .insertInto('cluster_brokers')
      .values({ broker_id: this.deps.me, peer_url: peerUrl, started_at: new Date(now).toISOString(), heartbeat_at: now })
      .onConflict((oc) => oc.column('broker_id').doUpdateSet({ peer_url: peerUrl, started_at: new Date(now).toISOString(), heartbeat_at: now }))
      .execute();
  }

  /** Leaving: this broker's agents and registration are removed. */
  async leave(): Promise<void> {
    await this.deps.db.deleteFrom('agent_presence').where('broker_id', '=', this.deps.me).execute();
    await this.deps.db.deleteFrom('cluster_brokers').where('broker_id', '=', this.deps.me).execute();
  }

  /** This broker's heartbeat; false when the others took it for gone (its registration was removed: a long pause). */
  async beat(): Promise<boolean> {
    const mine = await this.deps.db.updateTable('cluster_brokers').set({ heartbeat_at: Date.now() }).where('broker_id', '=', this.deps.me).executeTakeFirst();
    return Number(mine.numUpdatedRows) > 0;
  }

  /** The presence of the agents here, refreshed in one UPDATE; rows the others removed are written again. */
  async refreshPresence(here: string[]): Promise<void> {
    const seen = await this.deps.db.updateTable('agent_presence').set({ seen_at: Date.now() }).where('broker_id', '=', this.deps.me).executeTakeFirst();
    if (Number(seen.numUpdatedRows) < here.length) await this.restorePresence(here);
  }

  /** An agent connected or left here: its presence row is written, in order per device. */
  queueWrite(deviceId: string, connected: boolean): void {
    const write = connected ? () => this.agentConnected(deviceId) : () => this.agentDisconnected(deviceId);
    const previous = this.writes.get(deviceId) ?? Promise.resolve();
    const next = previous
      .then(write)
      .catch((err) => this.deps.log.warn({ err, deviceId }, 'agent presence not recorded'))
      .finally(() => {
        if (this.writes.get(deviceId) === next) this.writes.delete(deviceId);
      });
    this.writes.set(deviceId, next);
  }

  private async agentConnected(deviceId: string): Promise<void> {
    if (this.deps.isClosing()) return;
    const { me } = this.deps;
    this.owners.delete(deviceId);
    const now = Date.now();
    const at = new Date(now).toISOString();
    await this.deps.db
      .insertInto('agent_presence')
      .values({ device_id: deviceId, broker_id: me, connected_at: at, seen_at: now })
      .onConflict((oc) => oc.column('device_id').doUpdateSet({ broker_id: me, connected_at: at, seen_at: now }))
      .execute();
    await this.deps.publish({ e: 'presence', broker: me, device: deviceId, on: true });
  }

  private async agentDisconnected(deviceId: string): Promise<void> {
    if (this.deps.isClosing()) return;
    const { me } = this.deps;
    // Only if still ours: a device that reconnected elsewhere meanwhile keeps its new row.
    const deleted = await this.deps.db.deleteFrom('agent_presence').where('device_id', '=', deviceId).where('broker_id', '=', me).executeTakeFirst();
    if (Number(deleted.numDeletedRows) > 0) await this.deps.publish({ e: 'presence', broker: me, device: deviceId, on: false });
  }

  /**
   * Agents here without their presence row: the others removed it while this broker could not reach
   * the database (a partition longer than the expiry). Written again, so they find these agents.
   */
  private async restorePresence(here: string[]): Promise<void> {
    const rows = await this.deps.db.selectFrom('agent_presence').select('device_id').where('broker_id', '=', this.deps.me).execute();
    const known = new Set(rows.map((r) => r.device_id));
    const missing = here.filter((d) => !known.has(d) && !this.writes.has(d));
    if (missing.length === 0) return;
    this.deps.log.warn({ agents: missing.length }, 'presence of agents here was removed by the other brokers: written again');
    for (const deviceId of missing) this.queueWrite(deviceId, true);
  }

  // ---- the other brokers ---------------------------------------------------------------------------

  /** Another broker's agent connected or left (its presence event); a broker not known yet is read soon. */
  heard(event: Extract<ClusterEvent, { e: 'presence' }>): void {
    if (!event.on) {
      if (this.owners.get(event.device) === event.broker) {
        this.owners.delete(event.device);
        this.deps.presence.emit('disconnected', event.device);
      }
      return;
    }
    this.owners.set(event.device, event.broker);
    this.deps.presence.emit('connected', event.device);
    if (!this.brokers.has(event.broker)) this.loadBrokersSoon();
  }

  private loadBrokersSoon(): void {
    this.brokersReload ??= this.loadBrokers()
      .catch((err) => this.deps.log.warn({ err }, 'brokers not read'))
      .finally(() => {
        this.brokersReload = undefined;
      });
  }

  async loadBrokers(): Promise<void> {
    // A read's values may date from when it was sent: judged as of then (a slow answer does not age them).
    const sentAt = Date.now();
    const rows = await this.deps.db.selectFrom('cluster_brokers').selectAll().execute();
    const now = Date.now();
    const present = new Set<string>();
    for (const row of rows) {
      present.add(row.broker_id);
      const heartbeat = Number(row.heartbeat_at);
      const known = this.brokers.get(row.broker_id);
      if (!known) {
        // First sight: its own clock says how fresh it is (clocks are assumed roughly in sync, as for TLS).
        this.brokers.set(row.broker_id, { url: row.peer_url, heartbeat, changedAt: Math.min(now, heartbeat), readAt: sentAt });
      } else {
        known.readAt = sentAt;
        if (known.heartbeat !== heartbeat) {
          known.heartbeat = heartbeat;
          known.changedAt = now;
          known.url = row.peer_url;
        }
      }
    }
    for (const id of [...this.brokers.keys()]) if (!present.has(id)) this.forgetBroker(id, 'left the cluster');
  }

  async loadPresence(): Promise<void> {
    const rows = await this.deps.db
      .selectFrom('agent_presence')
      .select(['device_id', 'broker_id'])
      .where('broker_id', '!=', this.deps.me)
      .where('seen_at', '>', Date.now() - this.deps.expiryMs)
      .execute();
    this.owners.clear();
    for (const row of rows) this.owners.set(row.device_id, row.broker_id);
  }

  /** Brokers silent for the expiry, each with the heartbeat last read (their registration is removed only if it is still that one). */
  silent(): { id: string; heartbeat: number }[] {
    return [...this.brokers].filter(([id, broker]) => id !== this.deps.me && !this.alive(broker)).map(([id, broker]) => ({ id, heartbeat: broker.heartbeat }));
  }

  /**
   * A broker taken for gone: its presence rows are removed, all of them. Not only those unrefreshed
   * for the expiry: an agent that connected to it just before it stopped has a row as fresh as that
   * (written after its last heartbeat), which would otherwise be left for good. A broker taken for
   * gone wrongly (a long pause) writes its rows again at its next heartbeat (refreshPresence).
   */
  async removePresenceOf(id: string): Promise<void> {
    await this.deps.db.deleteFrom('agent_presence').where('broker_id', '=', id).execute();
  }

  /** The registration of a gone broker, removed if its heartbeat is still the one last read. */
  async removeRegistration(id: string, heartbeat: number): Promise<void> {
    await this.deps.db.deleteFrom('cluster_brokers').where('broker_id', '=', id).where('heartbeat_at', '=', heartbeat).execute();
  }

  /** A broker left or is gone: its agents count as disconnected, its link is dropped. */
  forgetBroker(id: string, why: string): void {
    if (id === this.deps.me) return;
    this.brokers.delete(id);
    for (const [deviceId, owner] of [...this.owners]) {
      if (owner !== id) continue;
      this.owners.delete(deviceId);
      this.deps.presence.emit('disconnected', deviceId);
    }
    this.deps.dropLink(id, `broker ${id} ${why}`);
  }
}
