import crypto from 'node:crypto';
import type { Channel } from '../../shared/mux.js';
import type { ChannelKind, ChannelParams, ReloadMode } from '../../shared/protocol.js';
import type { PeerMessage } from '../../shared/wire.js';
import { AgentNotConnectedError } from '../agents/hub.js';
import type { AgentLocator } from '../agents/locator.js';
import { DEVICE_ID_PATTERN } from '../devices/scope.js';
import { bridge, sendPeer, type PeerLink } from './peer.js';

/** How a peer says "that agent is not connected here": the start of its refusal, mapped back to AgentNotConnectedError. */
export const NOT_CONNECTED_HERE = 'agent_not_connected:';
const RELOAD_TIMEOUT_MS = 20_000;
/** Reloads one link may have waiting on this end, at most. */
const MAX_RELOADS_PER_LINK = 1000;
/** The kinds a peer may open through this broker: remote-access sessions, never the file channel. */
const RELAYED_KINDS: ReadonlySet<string> = new Set(['console', 'tunnel', 'copy']);

/** The params of a channel opened through a peer link: the agent's own, and the device it goes to. */
export type RelayedParams = ChannelParams & { peer_device: string };

/** The device a relayed channel goes to, and the params its agent gets (without the device). */
export function readRelayedParams(params: ChannelParams): { deviceId: string; params: ChannelParams } | undefined {
  if (!('peer_device' in params)) return undefined;
  const { peer_device: deviceId, ...rest } = params;
  if (typeof deviceId !== 'string' || !DEVICE_ID_PATTERN.test(deviceId)) return undefined;
  return { deviceId, params: rest };
}

/** What the locator asks of the cluster: who holds a device elsewhere, the link to it, and the bus. */
export interface ClusterView {
  /** The live broker (not this one) holding the device's agent, if any. */
  ownerOf(deviceId: string): { id: string; url: string } | undefined;
  link(peer: string, url: string): Promise<PeerLink>;
  /** Tells every broker to cut the device's agent off. */
  announceRemoved(deviceId: string, reason: string): void;
}

/**
 * The AgentLocator of a broker in a cluster: an agent connected here is reached directly; one
 * connected to another live broker through the peer link to that broker, whose end relays the
 * channel to its agent (bytes, credit, eof, close and channel control both ways). A device
 * connected nowhere, an owner that cannot be reached, or one whose agent has just left all answer
 * like a local miss (AgentNotConnectedError). Authorization and audit stay with the caller of the
 * locator (the broker holding the user's connection); the peer only relays.
 */
export class ClusterLocator implements AgentLocator {
  private readonly reloads = new Map<string, { link: PeerLink; resolve: () => void; reject: (err: Error) => void; timer: NodeJS.Timeout }>();
  private readonly reloadsServed = new Map<PeerLink, number>();

  constructor(
    private readonly local: AgentLocator,
    private readonly cluster: ClusterView,
  ) {}

  isConnected(deviceId: string): boolean {
    return this.local.isConnected(deviceId) || this.cluster.ownerOf(deviceId) !== undefined;
  }

  async open(deviceId: string, kind: ChannelKind, params: ChannelParams): Promise<{ channel: Channel; info: Record<string, unknown> }> {
    if (this.local.isConnected(deviceId)) return this.local.open(deviceId, kind, params);
    const link = await this.linkFor(deviceId);
    try {
      const relayed: RelayedParams = { ...params, peer_device: deviceId };
      return await link.mux.open(kind, relayed);
    } catch (err) {
      if (err instanceof Error && err.message.startsWith(NOT_CONNECTED_HERE)) throw new AgentNotConnectedError(deviceId);
      throw err;
    }
  }

  async reload(deviceId: string, mode: ReloadMode = 'restart'): Promise<void> {
    if (this.local.isConnected(deviceId)) return this.local.reload(deviceId, mode);
    const link = await this.linkFor(deviceId);
    const id = crypto.randomUUID();
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.reloads.delete(id);
        reject(new Error(`The agent of device ${deviceId} did not acknowledge the reload in time.`));
      }, RELOAD_TIMEOUT_MS);
      this.reloads.set(id, { link, resolve, reject, timer });
      sendPeer(link, { t: 'peer_reload', id, device: deviceId, ...(mode === 'run' ? { mode } : {}) });
    });
  }

  disconnect(deviceId: string, reason: string): void {
    this.local.disconnect(deviceId, reason);
    this.cluster.announceRemoved(deviceId, reason);
  }

  /** Another broker announced the device removed: cut its agent off if it is connected here. */
  disconnectHere(deviceId: string, reason: string): void {
    this.local.disconnect(deviceId, reason);
  }

  private async linkFor(deviceId: string): Promise<PeerLink> {
    const owner = this.cluster.ownerOf(deviceId);
    if (!owner) throw new AgentNotConnectedError(deviceId);
    try {
      return await this.cluster.link(owner.id, owner.url);
    } catch {
      // The broker holding the agent cannot be reached: for the caller, the device is not connected.
      throw new AgentNotConnectedError(deviceId);
    }
  }

  private settleReload(id: string, error?: string): void {
    const waiter = this.reloads.get(id);
    if (!waiter) return;
    clearTimeout(waiter.timer);
    this.reloads.delete(id);
    if (error) waiter.reject(new Error(error));
    else waiter.resolve();
  }

  // ---- the relaying end: what another broker asks of agents connected here --------------------------

  /** Serves a channel a peer opens: to the named device's agent, if it is connected here. */
  async serve(channel: Channel): Promise<Record<string, unknown>> {
    const relayed = readRelayedParams(channel.params);
    if (!relayed) throw new Error('a relayed channel names its device (peer_device)');
    const { deviceId, params } = relayed;
    if (!RELAYED_KINDS.has(channel.kind)) throw new Error(`channels of kind ${String(channel.kind)} are not relayed`);
    const notHere = () => new Error(`${NOT_CONNECTED_HERE} the agent of device ${deviceId} is not connected to this broker`);
    if (!this.local.isConnected(deviceId)) throw notHere();
    let opened: { channel: Channel; info: Record<string, unknown> };
    try {
      opened = await this.local.open(deviceId, channel.kind, params);
    } catch (err) {
      if (err instanceof AgentNotConnectedError) throw notHere();
      throw err;
    }
    if (channel.destroyed) {
      // The other broker gave up while the agent was opening.
      opened.channel.destroy();
      throw new Error('closed while opening');
    }
    bridge(channel, opened.channel);
    return opened.info;
  }

  /** A link closed: the reloads waiting on it fail. */
  onLinkClosed(link: PeerLink): void {
    for (const [id, waiter] of [...this.reloads]) if (waiter.link === link) this.settleReload(id, `the link to broker ${link.peer} was lost`);
    this.reloadsServed.delete(link);
  }

  /** Link-level messages from a peer: reloads asked of agents here, and their answers. */
  onPeerControl(link: PeerLink, msg: PeerMessage): void {
    if (msg.t === 'peer_reload_done') {
      const waiter = this.reloads.get(msg.id);
      if (waiter?.link !== link) return;
      this.settleReload(msg.id, msg.error?.slice(0, 300));
      return;
    }
    const id = msg.id;
    const deviceId = msg.device;
    const answer = (error?: string) => sendPeer(link, { t: 'peer_reload_done', id, ...(error ? { error } : {}) });
    if (!DEVICE_ID_PATTERN.test(deviceId)) return answer('a reload names its device');
    const served = this.reloadsServed.get(link) ?? 0;
    if (served >= MAX_RELOADS_PER_LINK) return answer('too many reloads in progress');
    if (!this.local.isConnected(deviceId)) return answer(`The agent of device ${deviceId} is not connected.`);
    this.reloadsServed.set(link, served + 1);
    this.local
      .reload(deviceId, msg.mode === 'run' ? 'run' : 'restart')
      .then(
        () => answer(),
        (err: Error) => answer(err.message),
      )
      .finally(() => {
        const left = (this.reloadsServed.get(link) ?? 1) - 1;
        if (left > 0) this.reloadsServed.set(link, left);
        else this.reloadsServed.delete(link);
      });
  }
}
