import type { Channel } from '../../shared/mux.js';
import type { ChannelKind, ChannelParams } from '../../shared/protocol.js';
import type { Services } from '../services.js';
import type { AgentLocator } from './locator.js';

/** Connected agents of this broker (placeholder until the agent channel lands). */
export class AgentHub implements AgentLocator {
  constructor(private readonly s: Services) {}

  async init(): Promise<void> {}

  async close(): Promise<void> {}

  isConnected(_deviceId: string): boolean {
    return false;
  }

  async open(deviceId: string, _kind: ChannelKind, _params: ChannelParams): Promise<{ channel: Channel; info: Record<string, unknown> }> {
    throw new Error(`device ${deviceId} is not connected`);
  }

  async reload(deviceId: string): Promise<void> {
    throw new Error(`device ${deviceId} is not connected`);
  }

  disconnect(_deviceId: string, _reason: string): void {}
}
