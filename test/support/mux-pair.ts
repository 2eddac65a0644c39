import type { AddressInfo } from 'node:net';
import WebSocket, { WebSocketServer } from 'ws';
import { Mux, type OpenHandler } from '../../shared/mux.js';
import { FROM_AGENT, FROM_BROKER } from '../../shared/wire.js';

/** A broker-side and an agent-side Mux over a real WebSocket on loopback; `leaseReads` at both ends when asked. */
export async function muxPair(onOpen: OpenHandler, window = 64 * 1024, leaseReads = false) {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((r) => wss.once('listening', r));
  const serverSide = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
  const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`);
  await new Promise((r) => client.once('open', r));
  const server = await serverSide;
  const broker = new Mux(server, { window, receives: FROM_AGENT, leaseReads });
  const agent = new Mux(client, { window, onOpen, receives: FROM_BROKER, leaseReads });
  return {
    broker,
    agent,
    close: () => {
      client.terminate();
      wss.close();
    },
  };
}
