/**
 * Live events for the web console: `device.online` and `device.offline` as agents connect
 * to and leave this broker (and, with several brokers, the others: their presence NOTIFYs), sent to every listener who may read the device (device:read, decided
 * by the access service per event); and `pending.added`, `pending.approved`, `pending.removed` as
 * hosts enrol with a manual key and are approved or rejected through this broker, sent to
 * listeners who may list pending hosts (device:approve, as GET /pendinghost). A listener is a sink that tells how much it still holds
 * unsent: one that does not read (its buffer past MAX_BUFFERED_BYTES) is dropped, so a stalled
 * browser costs at most that much memory.
 */
import type { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { PendingHostEvent } from '../enrol/service.js';
import type { DeviceEvent } from '../../shared/api-types.js';

/** Bytes a listener may leave unread before it is dropped (hundreds of events). */
export const MAX_BUFFERED_BYTES = 64 * 1024;
/** A comment line this often keeps proxies from closing an idle stream and re-checks the session. */
export const KEEPALIVE_MS = 25_000;
/** Listeners per user: a tab leaking EventSources cannot hold the broker's sockets. */
export const MAX_LISTENERS_PER_USER = 16;

/** An agent connected or left: declared once for the broker and the console. */
export type { DeviceEvent } from '../../shared/api-types.js';
export type DeviceEventName = DeviceEvent['event'];

/** Where a listener's events go: an HTTP response in production, a fake in tests. */
export interface EventSink {
  write(chunk: string): void;
  /** Bytes written but not yet taken by the reader. */
  buffered(): number;
  close(): void;
}

export interface Listener {
  principal: Principal;
  sink: EventSink;
  /** Answers the principal as of now (revoked sessions and disabled users end the stream). */
  recheck: () => Promise<Principal>;
}

type Hub = Pick<EventEmitter<{ connected: [string]; disconnected: [string] }>, 'on' | 'off'>;
type PendingHub = Pick<EventEmitter<{ change: [PendingHostEvent] }>, 'on' | 'off'>;

/** The permission that lists pending hosts (GET /pendinghost): the one their events need. */
export const PENDING_PERMISSION = 'device:approve';

/** Whether a principal may open the stream: it must be able to receive one kind of event or the other. */
export function mayListen(principal: Pick<Principal, 'has'>): boolean {
  return principal.has('device:read') || principal.has(PENDING_PERMISSION);
}

/** One event in the text/event-stream format. */
export function formatEvent(e: DeviceEvent | PendingHostEvent): string {
  return `event: ${e.event}\ndata: ${JSON.stringify(e)}\n\n`;
}

export class DeviceEventStream {
  private readonly listeners = new Set<Listener>();
  private readonly onConnected = (id: string) => void this.publish({ event: 'device.online', device_id: id, at: new Date().toISOString() });
  private readonly onDisconnected = (id: string) => void this.publish({ event: 'device.offline', device_id: id, at: new Date().toISOString() });
  private readonly onPending = (e: PendingHostEvent) => void this.publishPending(e);
  private keepalive: ReturnType<typeof setInterval> | undefined;
  /** Events go out one after the other, so a device's online and offline never arrive swapped. */
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly deps: {
      hub: Hub;
      /** Pending hosts appearing, approved, rejected (EnrolService.pendingChanges). */
      pending?: PendingHub;
      access: Pick<AccessService, 'decide'>;
      logger: Logger;
      /** Several brokers: the agents of the other brokers connecting and leaving (ClusterService.presence). */
      elsewhere?: Hub;
      /**
       * Whether the device is connected anywhere now: an offline that is no longer true when it is
       * sent (the device moved to another broker meanwhile) is left out.
       */
      isConnected?: (deviceId: string) => boolean;
    },
    private readonly maxBuffered = MAX_BUFFERED_BYTES,
  ) {}

  init(): void {
    this.deps.hub.on('connected', this.onConnected);
    this.deps.hub.on('disconnected', this.onDisconnected);
    this.deps.elsewhere?.on('connected', this.onConnected);
    this.deps.elsewhere?.on('disconnected', this.onDisconnected);
    this.deps.pending?.on('change', this.onPending);
    this.keepalive = setInterval(() => void this.ping(), KEEPALIVE_MS);
    this.keepalive.unref();
  }

  close(): void {
    this.deps.hub.off('connected', this.onConnected);
    this.deps.hub.off('disconnected', this.onDisconnected);
    this.deps.elsewhere?.off('connected', this.onConnected);
    this.deps.elsewhere?.off('disconnected', this.onDisconnected);
    this.deps.pending?.off('change', this.onPending);
    clearInterval(this.keepalive);
    for (const l of this.listeners) l.sink.close();
    this.listeners.clear();
  }

  /** Adds a listener; false when its user already holds MAX_LISTENERS_PER_USER streams. */
  add(listener: Listener): boolean {
    const userId = listener.principal.user.id;
    let mine = 0;
    for (const l of this.listeners) if (l.principal.user.id === userId) mine += 1;
    if (mine >= MAX_LISTENERS_PER_USER) return false;
    this.listeners.add(listener);
    return true;
  }

  remove(listener: Listener): void {
    this.listeners.delete(listener);
  }

  get size(): number {
    return this.listeners.size;
  }

  /** Sends an event to every listener who may read the device, after the events before it. */
  publish(e: DeviceEvent): Promise<void> {
    this.queue = this.queue.then(() => this.deliver(e));
    return this.queue;
  }

  /** Sends a pending-host event to every listener who may list pending hosts, in order with the device events. */
  publishPending(e: PendingHostEvent): Promise<void> {
    this.queue = this.queue.then(() => {
      const chunk = formatEvent(e);
      for (const l of [...this.listeners]) if (this.listeners.has(l) && l.principal.has(PENDING_PERMISSION)) this.send(l, chunk);
    });
    return this.queue;
  }

  private async deliver(e: DeviceEvent): Promise<void> {
    if (e.event === 'device.offline' && this.deps.isConnected?.(e.device_id)) return;
    const chunk = formatEvent(e);
    await Promise.all(
      [...this.listeners].map(async (l) => {
        const decision = await this.deps.access.decide(l.principal, 'device:read', e.device_id).catch(() => ({ allowed: false }));
        if (decision.allowed && this.listeners.has(l)) this.send(l, chunk);
      }),
    );
  }

  private send(l: Listener, chunk: string): void {
    l.sink.write(chunk);
    if (l.sink.buffered() > this.maxBuffered) {
      this.deps.logger.info({ userId: l.principal.user.id }, 'events listener dropped: it does not read');
      this.drop(l);
    }
  }

  private drop(l: Listener): void {
    this.listeners.delete(l);
    l.sink.close();
  }

  /** Keeps idle streams open and ends those whose session has ended. */
  async ping(): Promise<void> {
    await Promise.all(
      [...this.listeners].map(async (l) => {
        try {
          l.principal = await l.recheck();
        } catch {
          this.drop(l);
          return;
        }
        if (this.listeners.has(l)) this.send(l, ': keepalive\n\n');
      }),
    );
  }
}
