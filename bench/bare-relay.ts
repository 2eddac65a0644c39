/**
 * The keystroke row's floor (bench/remote.ts, part latency): a bare `ws` relay, with nothing of ours
 * on its path (no authentication, channel multiplexer, recording or flow control). Connections to
 * `/agent` wait; each one to `/client` is paired with the oldest waiting agent, and every message is
 * sent on to the other socket as it arrives. ws turns Nagle off on both (`setNoDelay`), as on the
 * broker's. `node --import tsx bench/bare-relay.ts` prints `{"port"}` once listening.
 */
import type { AddressInfo } from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';

const server = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false, maxPayload: 64 * 1024 });
const waiting: WebSocket[] = [];

function relay(from: WebSocket, to: WebSocket): void {
  from.on('message', (data, isBinary) => to.send(data, { binary: isBinary }));
  from.on('close', () => to.close());
  from.on('error', () => to.terminate());
}

server.on('connection', (socket, request) => {
  if (request.url === '/agent') {
    waiting.push(socket);
    socket.once('close', () => waiting.includes(socket) && waiting.splice(waiting.indexOf(socket), 1));
    return;
  }
  const agent = waiting.shift();
  if (!agent) return socket.close(1013, 'no agent waiting');
  relay(socket, agent);
  relay(agent, socket);
});
server.on('listening', () => console.log(JSON.stringify({ port: (server.address() as AddressInfo).port })));
