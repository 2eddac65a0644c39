import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import pg from 'pg';
import type { Logger } from 'pino';
import { PG_TIMEOUTS, sql, type Db } from '../db/database.js';
import { DEVICE_ID_PATTERN } from '../devices/scope.js';
import { MAX_END_REASON, MAX_ENDER_EMAIL, MAX_ENDER_NAME } from '../../shared/remote-frames.js';
import { FROM_BROKER, isFields, readMessage, type BrokerMessage } from '../../shared/wire.js';

/**
 * A device-level message one broker asks another to send the agent it holds: one an agent takes
 * from its broker (FROM_BROKER), a configuration excepted (it goes as a `config` event: the broker
 * holding the agent sends, and signs, its own). Never a message of the connection's handshake.
 */
export type DeliveredMessage = Exclude<BrokerMessage, { t: 'config' }>;

/** What one broker tells every broker of the cluster, through PostgreSQL NOTIFY. */
export type ClusterEvent =
  /** `broker` now holds (`on`) or no longer holds the agent of `device` */
  | { e: 'presence'; broker: string; device: string; on: boolean }
  /** the device was removed or rejected: cut its agent off wherever it is connected */
  | { e: 'device_removed'; broker: string; device: string; reason: string }
  /** a change was made through `broker`'s API: empty the read caches (broker/cache.ts) */
  | { e: 'invalidate'; broker: string }
  /** `broker` is shutting down: forget its agents now rather than at expiry */
  | { e: 'broker_down'; broker: string }
  /** an operator on `broker` ended a live remote session that broker `to` holds (DELETE /remote/sessions/{id}) */
  | { e: 'end_session'; broker: string; to: string; session: string; by: { id: string; email: string; name: string }; reason?: string }
  /** configuration changed through `broker` for these devices: whichever broker holds one of their agents sends it its configuration */
  | { e: 'config'; broker: string; devices: string[] }
  /** a device-level message for the agent of `device` (unsigned: the broker holding it signs it for its connection) */
  | { e: 'deliver'; broker: string; device: string; msg: DeliveredMessage }
  /** `broker` found a new agent build in its artifacts directory: the others look at theirs now (broker/install/updates.ts) */
  | { e: 'agent_release'; broker: string; version: string; sha256: string };

/** NOTIFY payloads are at most 8000 bytes; ours are a few hundred. */
const MAX_PAYLOAD = 7000;
const RECONNECT_MS = 1000;
/** The listening connection is checked this often: one that stopped answering (a partition) is replaced. */
const PING_MS = 5000;
const ID = /^[A-Za-z0-9._:-]{1,100}$/;
const SESSION_ID = /^[0-9a-f-]{1,64}$/;
const MESSAGE_TYPE = /^[a-z][a-z0-9_]{0,39}$/;
const AGENT_VERSION = /^[0-9][A-Za-z0-9.+~-]{0,63}$/;
const SHA256 = /^[0-9a-f]{64}$/;
/** Devices named in one `config` event, at most (ids are at most 64 characters: the payload stays small). */
export const CONFIG_EVENT_DEVICES = 80;

/** Reads a message to deliver with the agent's own readers (shared/wire.ts); undefined for any other. */
export function readDelivered(m: unknown): DeliveredMessage | undefined {
  if (!isFields(m) || typeof m.t !== 'string' || !MESSAGE_TYPE.test(m.t)) return undefined;
  const msg = readMessage(FROM_BROKER, { ...m, t: m.t });
  return msg === undefined || msg === 'unknown' || msg.t === 'config' ? undefined : msg;
}

/** Reads one notification; anything not exactly an event of ours is dropped. */
export function parseClusterEvent(payload: string | undefined): ClusterEvent | undefined {
  if (!payload || payload.length > MAX_PAYLOAD) return undefined;
  let msg: Record<string, unknown>;
  try {
    const parsed: unknown = JSON.parse(payload);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return undefined;
    msg = parsed as Record<string, unknown>;
  } catch {
    return undefined;
  }
  const broker = msg.broker;
  if (typeof broker !== 'string' || !ID.test(broker)) return undefined;
  const device = typeof msg.device === 'string' && DEVICE_ID_PATTERN.test(msg.device) ? msg.device : undefined;
  switch (msg.e) {
    case 'presence':
      return device && typeof msg.on === 'boolean' ? { e: 'presence', broker, device, on: msg.on } : undefined;
    case 'device_removed':
      return device ? { e: 'device_removed', broker, device, reason: typeof msg.reason === 'string' ? msg.reason.slice(0, 120) : 'device removed' } : undefined;
    case 'invalidate':
      return { e: 'invalidate', broker };
    case 'broker_down':
      return { e: 'broker_down', broker };
    case 'end_session': {
      const by = msg.by as Record<string, unknown> | null | undefined;
      if (typeof msg.to !== 'string' || !ID.test(msg.to) || typeof msg.session !== 'string' || !SESSION_ID.test(msg.session)) return undefined;
      if (typeof by !== 'object' || by === null || typeof by.id !== 'string' || typeof by.email !== 'string') return undefined;
      if (by.id.length < 1 || by.id.length > 100 || by.email.length > MAX_ENDER_EMAIL) return undefined;
      const name = typeof by.name === 'string' ? by.name.slice(0, MAX_ENDER_NAME) : '';
      const reason = typeof msg.reason === 'string' && msg.reason.length <= MAX_END_REASON ? msg.reason : undefined;
      return { e: 'end_session', broker, to: msg.to, session: msg.session, by: { id: by.id, email: by.email, name }, ...(reason ? { reason } : {}) };
    }
    case 'config': {
      const devices = msg.devices;
      if (!Array.isArray(devices) || devices.length === 0 || devices.length > CONFIG_EVENT_DEVICES) return undefined;
      if (!devices.every((d) => typeof d === 'string' && DEVICE_ID_PATTERN.test(d))) return undefined;
      return { e: 'config', broker, devices: devices as string[] };
    }
    case 'deliver': {
      const delivered = readDelivered(msg.msg);
      return device && delivered ? { e: 'deliver', broker, device, msg: delivered } : undefined;
    }
    case 'agent_release':
      if (typeof msg.version !== 'string' || !AGENT_VERSION.test(msg.version) || typeof msg.sha256 !== 'string' || !SHA256.test(msg.sha256)) return undefined;
      return { e: 'agent_release', broker, version: msg.version, sha256: msg.sha256 };
    default:
      return undefined;
  }
}

/** The NOTIFY channel of one database schema: brokers on other schemas of the same database never hear it. */
export function notifyChannel(schema: string): string {
  return `fleet_cluster_${crypto
    .createHash('sha256')
    .update(schema || 'public')
    .digest('hex')
    .slice(0, 24)}`;
}

export interface ClusterBusEvents {
  event: [event: ClusterEvent];
  /** The listening connection was (re)opened: notifications may have been missed meanwhile. */
  listening: [];
}

/**
 * PostgreSQL LISTEN/NOTIFY between the brokers of one database: one dedicated connection listens
 * (reopened after a loss, then `listening` says state must be re-read); events are sent with
 * `pg_notify` through the store, so one sent inside a transaction goes out at its commit.
 */
export class ClusterBus extends EventEmitter<ClusterBusEvents> {
  private client?: pg.Client;
  private closed = false;
  private retry?: NodeJS.Timeout;
  private ping?: NodeJS.Timeout;
  private readonly channel: string;
  private readonly log: Logger;

  constructor(private readonly deps: { databaseUrl: string; schema: string; db: Db; logger: Logger }) {
    super();
    this.channel = notifyChannel(deps.schema);
    this.log = deps.logger.child({ module: 'cluster-bus' });
  }

  async start(): Promise<void> {
    await this.listen();
  }

  /** Whether the listening connection is open (notifications are heard). */
  get listening(): boolean {
    return this.client !== undefined;
  }

  private async listen(): Promise<void> {
    if (this.closed) return;
    const client = new pg.Client({
      connectionString: this.deps.databaseUrl,
      connectionTimeoutMillis: PG_TIMEOUTS.connectionTimeoutMillis,
      keepAlive: true,
      keepAliveInitialDelayMillis: PG_TIMEOUTS.keepAliveInitialDelayMillis,
      query_timeout: PING_MS,
    });
    client.on('error', (err) => this.log.warn({ err }, 'cluster notification connection failed'));
    client.on('end', () => {
      if (this.client !== client) return;
      this.client = undefined;
      this.scheduleReconnect();
    });
    client.on('notification', (n) => {
      if (n.channel !== this.channel) return;
      const event = parseClusterEvent(n.payload);
      if (event) this.emit('event', event);
      else this.log.debug({ payload: n.payload?.slice(0, 200) }, 'cluster notification ignored');
    });
    try {
      await client.connect();
      await client.query(`LISTEN "${this.channel}"`);
    } catch (err) {
      this.log.warn({ err }, 'cluster notifications not received: retrying');
      void client.end().catch(() => {});
      this.scheduleReconnect();
      return;
    }
    if (this.closed) {
      await client.end().catch(() => {});
      return;
    }
    this.client = client;
    this.emit('listening');
    this.startPing(client);
  }

  /** Notifications do not come on a hung connection, and nothing says so: a query every PING_MS does. */
  private startPing(client: pg.Client): void {
    clearInterval(this.ping);
    let busy = false;
    this.ping = setInterval(() => {
      if (busy || this.client !== client) return;
      busy = true;
      client
        .query('select 1')
        .catch((err: Error) => {
          if (this.client !== client) return;
          this.log.warn({ err: { message: err.message } }, 'cluster notification connection stopped answering: reconnecting');
          this.client = undefined;
          clearInterval(this.ping);
          (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy();
          this.scheduleReconnect();
        })
        .finally(() => {
          busy = false;
        });
    }, PING_MS);
    this.ping.unref();
  }

  private scheduleReconnect(): void {
    if (this.closed || this.retry) return;
    this.retry = setTimeout(() => {
      this.retry = undefined;
      void this.listen();
    }, RECONNECT_MS);
    this.retry.unref();
  }

  /** Sends an event to every broker of the database, this one included. */
  async publish(event: ClusterEvent): Promise<void> {
    const payload = JSON.stringify(event);
    if (payload.length > MAX_PAYLOAD) throw new Error('cluster event too large');
    await sql`select pg_notify(${this.channel}, ${payload})`.execute(this.deps.db);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retry);
    clearInterval(this.ping);
    const client = this.client;
    this.client = undefined;
    if (!client) return;
    // A hung connection would never finish its goodbye: it is cut after a second.
    const cut = setTimeout(() => (client as unknown as { connection: { stream: { destroy(): void } } }).connection.stream.destroy(), 1000);
    await client.end().catch(() => {});
    clearTimeout(cut);
  }
}
