import { EventEmitter } from 'node:events';
import type { Logger } from 'pino';
import type { AgentHub } from '../agents/hub.js';
import type { AgentLocator } from '../agents/locator.js';
import type { ChangeEpoch } from '../cache.js';
import type { Config } from '../environment.js';
import type { Db } from '../db/database.js';
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import type { ControlMessage } from '../../shared/protocol.js';
import { CONFIG_EVENT_DEVICES, ClusterBus, readDelivered, type ClusterEvent } from './bus.js';
import { ClusterLocator } from './locator.js';
import { Membership } from './membership.js';
import { PeerLinks, type PeerLink } from './peer.js';
import { ClusterSessions } from './sessions.js';

/** A broker (or an agent's presence) is gone once silent for this many heartbeats. */
export const EXPIRY_HEARTBEATS = 3;
/** A local agent connection at least this old gives way when its device shows up on another broker. */
const TAKEOVER_GRACE_MS = 2000;

export interface ClusterDeps {
  config: Pick<Config, 'brokerId' | 'brokerPeerUrl' | 'clusterSecret' | 'clusterHeartbeatMs' | 'databaseUrl' | 'databaseSchema'>;
  logger: Logger;
  db: Db;
  /** Local changes are announced to the other brokers; theirs empty the caches here. */
  epoch: ChangeEpoch;
  /** Ends the audit of open remote sessions, except those of the brokers in `keep` (bound late: audit is built after). */
  sessions: { closeOpenSessions(reason: string, keep: string[]): Promise<number> };
}

/**
 * Several brokers on one PostgreSQL database (on when CLUSTER_SECRET is set). Each broker
 * registers itself (`cluster_brokers`, heartbeat every CLUSTER_HEARTBEAT_MS), writes which agents
 * it holds (`agent_presence`, on connect and disconnect, refreshed for all of them in one UPDATE
 * per heartbeat), hears the others through LISTEN/NOTIFY (presence, removed devices, cache
 * invalidation), and reaches their agents through peer links (peer.ts) via the ClusterLocator.
 * A broker silent for EXPIRY_HEARTBEATS heartbeats is gone: its agents count as disconnected, its
 * presence rows and registration are removed and its open remote sessions get their audit end.
 * Here: joining, the heartbeat, the events of the others and delivery; who is alive and who holds
 * which agent is membership.ts's.
 */
export class ClusterService {
  readonly bus: ClusterBus;
  readonly links: PeerLinks;
  /** The live remote sessions of every broker (`live_sessions`): RemoteSessions' directory. */
  readonly sessions: ClusterSessions;
  /**
   * Agents of the other brokers connecting and leaving (from their presence NOTIFYs, and when a
   * broker is taken for gone): the device event stream reports them as it reports this broker's.
   */
  readonly presence = new EventEmitter<{ connected: [string]; disconnected: [string] }>();
  /** Which brokers are alive and which agents each holds (membership.ts). */
  private readonly members: Membership;
  private readonly log: Logger;
  private readonly me: string;
  private readonly expiryMs: number;
  private readonly bornAt = Date.now();
  private locatorInstance?: ClusterLocator;
  private hub?: AgentHub;
  private timer?: NodeJS.Timeout;
  private ticking = false;
  private closing = false;
  private started = false;
  private invalidatePending = false;
  /** Sends devices connected here their current configuration (the configuration service, bound late). */
  private configWanted?: (deviceIds: string[]) => void;
  /** Looks at this broker's published agent again when another broker found a new build (bound late). */
  private releaseHeard?: (from: string, version: string, sha256: string) => void;

  constructor(private readonly deps: ClusterDeps) {
    this.me = deps.config.brokerId;
    this.expiryMs = EXPIRY_HEARTBEATS * deps.config.clusterHeartbeatMs;
    this.log = deps.logger.child({ module: 'cluster', broker: this.me });
    this.members = new Membership({
      db: deps.db,
      log: this.log,
      me: this.me,
      expiryMs: this.expiryMs,
      isClosing: () => this.closing,
      presence: this.presence,
      publish: (event) => this.publish(event),
      dropLink: (peer, why) => this.links.drop(peer, why),
    });
    this.bus = new ClusterBus({ databaseUrl: deps.config.databaseUrl, schema: deps.config.databaseSchema, db: deps.db, logger: deps.logger });
    this.links = new PeerLinks({
      brokerId: this.me,
      secret: deps.config.clusterSecret as string,
      logger: deps.logger,
      heartbeatMs: deps.config.clusterHeartbeatMs,
      serve: (channel) => this.locatorOrThrow().serve(channel),
      onControl: (link, msg) => this.locatorInstance?.onPeerControl(link, msg),
      onClosed: (link: PeerLink) => this.locatorInstance?.onLinkClosed(link),
    });
    this.sessions = new ClusterSessions({
      db: deps.db,
      logger: deps.logger,
      brokerId: this.me,
      liveBrokers: () => this.liveBrokers(),
      requestEnd: (to, session, end) =>
        this.bus.publish({ e: 'end_session', broker: this.me, to, session, by: end.by, ...(end.reason ? { reason: end.reason } : {}) }),
    });
  }

  get brokerId(): string {
    return this.me;
  }

  /** Joined, not leaving, and hearing the others (the health check's cluster part). */
  get ready(): boolean {
    return this.started && !this.closing && this.bus.listening;
  }

  /** Wraps this broker's hub (or what stands for it in tests) into the locator the services use. */
  locator(hub: AgentHub, local: AgentLocator = hub): ClusterLocator {
    this.hub = hub;
    this.locatorInstance = new ClusterLocator(local, {
      ownerOf: (deviceId) => this.ownerOf(deviceId),
      link: (peer, url) => this.links.get(peer, url),
      announceRemoved: (deviceId, reason) => void this.publish({ e: 'device_removed', broker: this.me, device: deviceId, reason: reason.slice(0, 120) }),
    });
    hub.setElsewhere((deviceId) => this.ownerOf(deviceId) !== undefined);
    hub.on('connected', (deviceId) => this.members.queueWrite(deviceId, true));
    hub.on('disconnected', (deviceId) => this.members.queueWrite(deviceId, false));
    return this.locatorInstance;
  }

  private locatorOrThrow(): ClusterLocator {
    if (!this.locatorInstance) throw new Error('cluster locator not set up');
    return this.locatorInstance;
  }

  /** The upgrade of PEER_WS_PATH (broker/upgrades.ts): another broker's link, proven in band. */
  acceptPeer(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    this.links.accept(req, socket, head);
  }

  /** Starts hearing the other brokers (before the broker listens). */
  async init(): Promise<void> {
    this.bus.on('event', (event) => this.onEvent(event));
    // After a lost notification connection, presence is read again rather than trusted.
    this.bus.on('listening', () => {
      if (this.started) void this.members.loadPresence().catch((err) => this.log.warn({ err }, 'presence not reloaded'));
    });
    this.deps.epoch.onBump(() => this.announceChange());
    await this.bus.start();
  }

  /** Joins the cluster once the broker listens: `listenUrl` is where peers reach it unless BROKER_PEER_URL says otherwise. */
  async start(listenUrl: string): Promise<void> {
    const peerUrl = this.deps.config.brokerPeerUrl ?? listenUrl;
    if (!this.deps.config.brokerPeerUrl && /\/\/(127\.|localhost|\[::1\])/.test(listenUrl)) {
      this.log.warn({ peerUrl: listenUrl }, 'BROKER_PEER_URL is not set: only brokers on this machine can reach this one');
    }
    // What a previous run under the same BROKER_ID left behind is not true any more: the others forget it too.
    await this.members.forgetPreviousRun();
    // Sessions of this run (started since the process began) stay; a previous run's go.
    await this.sessions.forgetBroker(this.me, this.bornAt);
    await this.publish({ e: 'broker_down', broker: this.me });
    await this.members.register(peerUrl);
    await this.members.loadBrokers();
    await this.members.loadPresence();
    this.started = true;
    this.log.info({ peerUrl, brokers: this.members.size }, 'joined the cluster');
    this.timer = setInterval(() => void this.tick(), this.deps.config.clusterHeartbeatMs);
    this.timer.unref();
  }

  async close(): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    clearInterval(this.timer);
    if (this.started) {
      try {
        await this.members.leave();
        await this.bus.publish({ e: 'broker_down', broker: this.me });
      } catch (err) {
        this.log.warn({ err }, 'cluster left without saying so: the others notice at expiry');
      }
    }
    await this.links.close();
    await this.bus.close();
  }

  /** Other brokers with a fresh heartbeat, read from the database (audit's restart uses it before start). */
  otherLiveBrokers(): Promise<string[]> {
    return this.members.otherLiveBrokers();
  }

  /** The live broker other than this one holding the device's agent. */
  ownerOf(deviceId: string): { id: string; url: string } | undefined {
    return this.members.ownerOf(deviceId);
  }

  /** Brokers known here and alive, this one included (for tests and metrics). */
  liveBrokers(): string[] {
    return this.members.liveBrokers();
  }

  // ---- heartbeat -----------------------------------------------------------------------------------

  /** Every heartbeat: this broker's heartbeat, its agents' presence (one UPDATE for all), then who else is alive. */
  private async tick(): Promise<void> {
    if (this.ticking || this.closing) return;
    this.ticking = true;
    try {
      if (!(await this.members.beat())) {
        // Taken for gone by the others (a long pause): register again and say which agents are here.
        this.log.warn('this broker was taken for gone by the others: joining again');
        await this.members.register();
        for (const deviceId of this.hub?.connectedDevices() ?? []) this.members.queueWrite(deviceId, true);
      }
      await this.members.refreshPresence(this.hub?.connectedDevices() ?? []);
      const ended = await this.sessions.reconcile();
      if (ended > 0) this.log.warn({ ended }, 'sessions ended by the other brokers while this one was cut off: ended here');
      await this.sessions.refresh();
      await this.members.loadBrokers();
      await this.sweep();
    } catch (err) {
      this.log.warn({ err }, 'cluster heartbeat failed');
    } finally {
      this.ticking = false;
    }
  }

  /** Brokers silent for the expiry: their agents are forgotten, their sessions' audit closed, their rows removed. */
  private async sweep(): Promise<void> {
    for (const { id, heartbeat } of this.members.silent()) {
      this.log.warn({ peer: id }, 'broker silent for the expiry: taken for gone');
      this.members.forgetBroker(id, 'stopped answering');
      const keep = [this.me, ...(await this.members.otherLiveBrokers())];
      const closed = await this.deps.sessions.closeOpenSessions(`broker ${id} stopped (no heartbeat)`, keep);
      if (closed > 0) this.log.info({ peer: id, closed }, 'open sessions of a gone broker closed in the audit');
      await this.members.removePresenceOf(id);
      await this.sessions.forgetBroker(id);
      await this.members.removeRegistration(id, heartbeat);
    }
  }

  // ---- delivery to agents wherever they are connected ---------------------------------------------

  /**
   * Sends a device-level message to the device's agent, wherever it is connected: through the hub
   * when here, else as a NOTIFY (`deliver`) on which the broker holding it signs and sends it (a
   * message is at most a few KiB: configurations go as `config`, see configElsewhere). False when
   * the agent is connected nowhere as far as this broker knows, or the message is too large.
   */
  deliver(deviceId: string, msg: ControlMessage): boolean {
    if (this.hub?.isConnected(deviceId)) return this.hub.send(deviceId, msg);
    if (this.ownerOf(deviceId) === undefined) return false;
    const delivered = readDelivered(msg);
    if (!delivered) {
      this.log.warn({ deviceId, t: msg.t }, 'not a message another broker delivers to its agent: not delivered');
      return false;
    }
    const event: ClusterEvent = { e: 'deliver', broker: this.me, device: deviceId, msg: delivered };
    if (JSON.stringify(event).length > 7000) {
      this.log.warn({ deviceId, t: msg.t }, 'message too large for another broker: not delivered');
      return false;
    }
    void this.publish(event);
    return true;
  }

  /** The configuration of these devices changed here while their agents are on other brokers: those send it. */
  configElsewhere(deviceIds: string[]): void {
    for (let i = 0; i < deviceIds.length; i += CONFIG_EVENT_DEVICES) {
      void this.publish({ e: 'config', broker: this.me, devices: deviceIds.slice(i, i + CONFIG_EVENT_DEVICES) });
    }
  }

  /** What sends devices connected here their current configuration when another broker asks (`config`). */
  onConfigWanted(send: (deviceIds: string[]) => void): void {
    this.configWanted = send;
  }

  /** A new agent build was found here and announced to the agents here: the other brokers look at theirs now. */
  announceRelease(version: string, sha256: string): void {
    void this.publish({ e: 'agent_release', broker: this.me, version, sha256 });
  }

  /** What looks at this broker's published agent again when another broker announces a new build. */
  onReleaseHeard(check: (from: string, version: string, sha256: string) => void): void {
    this.releaseHeard = check;
  }

  // ---- events of the other brokers -----------------------------------------------------------------

  private publish(event: ClusterEvent): Promise<void> {
    return this.bus.publish(event).catch((err) => this.log.warn({ err, e: event.e }, 'cluster event not sent'));
  }

  /** A change through this broker's API: the others empty their caches (at most one announcement per turn). */
  private announceChange(): void {
    if (this.invalidatePending || this.closing) return;
    this.invalidatePending = true;
    setImmediate(() => {
      this.invalidatePending = false;
      void this.publish({ e: 'invalidate', broker: this.me });
    });
  }

  private onEvent(event: ClusterEvent): void {
    if (event.broker === this.me) return;
    switch (event.e) {
      case 'presence': {
        this.members.heard(event);
        if (!event.on) return;
        // The agent keeps one connection: one here that is not brand new is stale (half-open).
        const since = this.hub?.connectionInfo(event.device)?.connected_at;
        if (since && Date.now() - Date.parse(since) > TAKEOVER_GRACE_MS) this.hub?.release(event.device, `the device connected to broker ${event.broker}`);
        return;
      }
      case 'device_removed':
        this.locatorInstance?.disconnectHere(event.device, event.reason);
        return;
      case 'invalidate':
        this.deps.epoch.invalidate();
        return;
      case 'broker_down':
        this.members.forgetBroker(event.broker, 'shut down');
        return;
      case 'end_session':
        if (event.to === this.me)
          void this.sessions
            .endHere(event.session, { by: event.by, ...(event.reason ? { reason: event.reason } : {}) })
            .catch((err) => this.log.warn({ err }, 'session not ended'));
        return;
      case 'config': {
        const here = event.devices.filter((deviceId) => this.hub?.isConnected(deviceId));
        if (here.length > 0) this.configWanted?.(here);
        return;
      }
      case 'deliver':
        // Only what an agent takes from its broker was read (bus.ts): never a handshake message.
        if (this.hub?.isConnected(event.device)) this.hub.send(event.device, event.msg);
        return;
      case 'agent_release':
        this.releaseHeard?.(event.broker, event.version, event.sha256);
        return;
    }
  }
}
