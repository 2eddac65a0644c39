/**
 * Agents inside the test process: the real session handlers (agent/sessions) behind a real Mux
 * pair over a loopback WebSocket. `FakeAgents` is an AgentLocator handed to the broker through its
 * composition root (`startTestBroker({ locator: fakes.locator })`), so API tests drive consoles,
 * tunnels and copies without enrolling an agent process; other devices go to the broker's own hub.
 */
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { handleChannel } from '../../agent/sessions/index.js';
import type { AgentLocator } from '../../broker/agents/locator.js';
import { Mux, type Channel, type OpenHandler } from '../../shared/mux.js';
import type { ChannelKind, ChannelParams, ReloadMode } from '../../shared/protocol.js';
import { FROM_AGENT, FROM_BROKER, type AgentMessage } from '../../shared/wire.js';

export interface FakeAgent {
  deviceId: string;
  /** The broker-side end of the connection. */
  mux: Mux<AgentMessage>;
  reloads: number;
  /** of those, the ones asked to run the configuration (qbee's run-agent), connection kept */
  runs: number;
  /** Cuts the connection, as an agent going offline. */
  disconnect(): void;
  close(): Promise<void>;
}

interface Attached {
  agent?: FakeAgent;
  connected: boolean;
  /** every channel is refused with this */
  refusal?: Error;
}

export class FakeAgents implements AgentLocator {
  private hub?: AgentLocator;
  private readonly attached = new Map<string, Attached>();

  /** For the composition root: wraps the broker's hub, which keeps every device without a fake agent. */
  readonly locator = (hub: AgentLocator): AgentLocator => {
    this.hub = hub;
    return this;
  };

  private get real(): AgentLocator {
    if (!this.hub) throw new Error('FakeAgents: pass fakes.locator to startTestBroker first');
    return this.hub;
  }

  isConnected(deviceId: string): boolean {
    const a = this.attached.get(deviceId);
    return a ? a.connected : this.real.isConnected(deviceId);
  }

  async open(deviceId: string, kind: ChannelKind, params: ChannelParams): Promise<{ channel: Channel; info: Record<string, unknown> }> {
    const a = this.attached.get(deviceId);
    if (!a) return this.real.open(deviceId, kind, params);
    if (!a.connected) throw new Error('agent is not connected');
    if (a.refusal || !a.agent) throw a.refusal;
    return a.agent.mux.open(kind, params);
  }

  async reload(deviceId: string, mode: ReloadMode = 'restart'): Promise<void> {
    const a = this.attached.get(deviceId);
    if (!a) return this.real.reload(deviceId, mode);
    if (!a.connected) throw new Error('agent is not connected');
    if (a.agent) a.agent.reloads += 1;
    if (a.agent && mode === 'run') a.agent.runs += 1;
  }

  /** Goes to the hub, as before: a fake agent stays up, and the broker's own re-check ends its sessions. */
  disconnect(deviceId: string, reason: string): void {
    this.real.disconnect(deviceId, reason);
  }

  /** Makes `deviceId` online with an agent that refuses every channel with `refusal`, as the agent would throw it. */
  refusing(deviceId: string, refusal: Error): void {
    this.attached.set(deviceId, { connected: true, refusal });
  }

  /**
   * An in-process agent for `deviceId`, serving channels with the agent's session handlers, or with
   * `serve` in their place (an agent of another version).
   */
  async attach(deviceId: string, stateDir: string, serve?: OpenHandler): Promise<FakeAgent> {
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise((r) => wss.once('listening', r));
    const serverSide = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
    const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`);
    await new Promise((r) => client.once('open', r));
    const mux = new Mux(await serverSide, { receives: FROM_AGENT });
    new Mux(client, { receives: FROM_BROKER, onOpen: (channel) => (serve ? serve(channel) : handleChannel(channel, { stateDir, log: () => {} })) });
    const agent: FakeAgent = {
      deviceId,
      mux,
      reloads: 0,
      runs: 0,
      disconnect: () => client.terminate(),
      close: async () => {
        if (this.attached.get(deviceId) === entry) this.attached.delete(deviceId);
        client.terminate();
        await new Promise((r) => wss.close(r));
      },
    };
    const entry: Attached = { agent, connected: true };
    mux.on('close', () => (entry.connected = false));
    this.attached.set(deviceId, entry);
    return agent;
  }
}
