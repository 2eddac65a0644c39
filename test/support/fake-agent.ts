/**
 * An agent inside the test process: the real session handlers (agent/sessions) behind a real
 * Mux pair over a loopback WebSocket, made reachable through the broker's AgentLocator. Lets API
 * tests drive consoles, tunnels and copies without enrolling an agent process.
 */
import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { handleChannel } from '../../agent/sessions/index.js';
import type { AgentLocator } from '../../broker/agents/locator.js';
import { Mux } from '../../shared/mux.js';
import type { ChannelKind, ChannelParams } from '../../shared/protocol.js';
import type { TestBroker } from './broker.js';

export interface FakeAgent {
  deviceId: string;
  /** The broker-side end of the connection. */
  mux: Mux;
  reloads: number;
  /** Cuts the connection, as an agent going offline. */
  disconnect(): void;
  close(): Promise<void>;
}

/** Routes the broker's locator calls for `deviceId` to an in-process agent; other devices stay offline. */
export async function attachFakeAgent(t: TestBroker, deviceId: string, stateDir = t.dataDir): Promise<FakeAgent> {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((r) => wss.once('listening', r));
  const serverSide = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
  const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`);
  await new Promise((r) => client.once('open', r));
  const mux = new Mux(await serverSide);
  new Mux(client, { onOpen: (channel) => handleChannel(channel, { stateDir, log: () => {} }) });
  let connected = true;
  mux.on('close', () => (connected = false));

  const hub = t.broker.services.agents as unknown as AgentLocator & Record<string, unknown>;
  const original = { isConnected: hub.isConnected, open: hub.open, reload: hub.reload };
  const fake: FakeAgent = {
    deviceId,
    mux,
    reloads: 0,
    disconnect: () => client.terminate(),
    async close() {
      Object.assign(hub, original);
      client.terminate();
      await new Promise((r) => wss.close(r));
    },
  };
  Object.assign(hub, {
    isConnected: (id: string) => (id === deviceId ? connected : original.isConnected.call(hub, id)),
    open: (id: string, kind: ChannelKind, params: ChannelParams) =>
      id === deviceId ? (connected ? mux.open(kind, params) : Promise.reject(new Error('agent is not connected'))) : original.open.call(hub, id, kind, params),
    reload: async (id: string) => {
      if (id !== deviceId) return original.reload.call(hub, id);
      if (!connected) throw new Error('agent is not connected');
      fake.reloads += 1;
    },
  });
  return fake;
}
