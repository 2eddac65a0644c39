import type { Channel } from '../../shared/mux.js';
import type { ChannelKind, ChannelParams, ReloadMode } from '../../shared/protocol.js';

/**
 * The seam between "where is this device's agent" and "move bytes". Remote access asks the
 * locator for a channel: the agent is connected to this broker (AgentHub), or, with several
 * brokers on one database, to another one, and the ClusterLocator (broker/cluster) forwards.
 */
export interface AgentLocator {
  isConnected(deviceId: string): boolean;
  /** Opens a channel to the device's agent; rejects when it is not connected or refuses. */
  open(deviceId: string, kind: ChannelKind, params: ChannelParams): Promise<{ channel: Channel; info: Record<string, unknown> }>;
  /**
   * Asks the agent to restart its work loop, or with `run` to run its configuration now (connection
   * and sessions kept); resolves when the agent acknowledged.
   */
  reload(deviceId: string, mode?: ReloadMode): Promise<void>;
  /** Cuts the agent off (device removed). */
  disconnect(deviceId: string, reason: string): void;
}
