import type net from 'node:net';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { CONSOLE_ACK_EVERY } from '../../shared/console-acks.js';
import { RemoteSession } from '../remote.js';
import { showOutput } from './console.js';

let cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup) c();
  cleanup = [];
});

/** A broker's console socket: says ready, then hands the test its side of the connection. */
async function consoleServer(): Promise<{ url: string; peer: Promise<WebSocket> }> {
  const server = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  cleanup.push(() => server.close());
  await new Promise((resolve) => server.once('listening', resolve));
  const peer = new Promise<WebSocket>((resolve) =>
    server.once('connection', (ws) => {
      ws.send(JSON.stringify({ type: 'ready', session: 's1', mode: 'control' }));
      cleanup.push(() => ws.terminate());
      resolve(ws);
    }),
  );
  return { url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, peer };
}

describe('fleet console output', () => {
  it('sends nothing back for echoes, and acknowledges what was shown once CONSOLE_ACK_EVERY adds up', async () => {
    const server = await consoleServer();
    const session = await RemoteSession.open({ url: server.url, token: async () => 'token' }, 'console', { device_id: 'x' });
    const broker = await server.peer;
    const texts: string[] = [];
    const firstText = new Promise<void>((resolve) =>
      broker.on('message', (data, isBinary) => {
        if (isBinary) return;
        texts.push(String(data));
        resolve();
      }),
    );
    const out = new PassThrough();
    out.resume();
    showOutput(session, out);
    session.start();
    // 300 echoes of one byte each, then a screenful that crosses the acknowledgement's size.
    for (let i = 0; i < 300; i += 1) broker.send(Buffer.from('a'));
    broker.send(Buffer.alloc(CONSOLE_ACK_EVERY, 'x'));
    await firstText;
    // The first frame back acknowledges the echoes and the screen together (the code before sent one per echo).
    expect(JSON.parse(texts[0])).toEqual({ type: 'ack', bytes: 300 + CONSOLE_ACK_EVERY });
    session.close();
  });
});
