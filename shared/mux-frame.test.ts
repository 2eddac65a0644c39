import crypto from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { FRAME_BUFFER_SIZE, framePool, writeDataFrame } from './mux-frame.js';
import { decodeData, encodeData } from './protocol.js';

/** A server and a client WebSocket on loopback, each recording the messages it receives. */
async function wsPair() {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
  await new Promise((r) => wss.once('listening', r));
  const accepted = new Promise<WebSocket>((resolve) => wss.once('connection', resolve));
  const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`, { perMessageDeflate: false });
  await new Promise((r) => client.once('open', r));
  const server = await accepted;
  const record = (ws: WebSocket) => {
    const got: { data: Buffer; binary: boolean }[] = [];
    ws.on('message', (data, binary) => got.push({ data: data as Buffer, binary }));
    return got;
  };
  return {
    server,
    client,
    toClient: record(client),
    toServer: record(server),
    close: () => {
      client.terminate();
      wss.close();
    },
  };
}

let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((r) => setTimeout(r, 5));
}

// Lengths around each of the WebSocket length encodings (7, 16 and 64 bits) and the native-masking threshold.
const SIZES = [0, 1, 3, 43, 44, 121, 122, 200, 65531, 65532, 70_000, 300_000];

describe('data frames written to the socket', () => {
  for (const end of ['server', 'client'] as const) {
    it(`from the ${end}: a stock WebSocket reads what encodeData framed, in order with what ws sends`, async () => {
      const p = await wsPair();
      cleanup = p.close;
      const from = end === 'server' ? p.server : p.client;
      const got = end === 'server' ? p.toClient : p.toServer;
      const expected: Buffer[] = [];
      let flushed = 0;
      for (const [i, size] of SIZES.entries()) {
        const payload = crypto.randomBytes(size);
        const copy = Buffer.from(payload);
        const ch = 0x01020304 + i;
        expect(writeDataFrame(from, ch, payload, (err) => (expect(err).toBeFalsy(), (flushed += 1)))).toBe(true);
        // The caller's bytes are not touched (a client masks them into a frame of its own).
        expect(payload.equals(copy)).toBe(true);
        expected.push(encodeData(ch, copy));
        // A control message between two data frames keeps its place.
        from.send(JSON.stringify({ t: 'credit', ch, n: i + 1 }));
      }
      await until(() => got.length === SIZES.length * 2);
      for (const [i, frame] of expected.entries()) {
        const data = got[i * 2];
        expect(data.binary).toBe(true);
        expect(decodeData(data.data)?.ch).toBe(decodeData(frame)?.ch);
        expect(data.data.equals(frame)).toBe(true);
        expect(got[i * 2 + 1].binary).toBe(false);
        expect(JSON.parse(String(got[i * 2 + 1].data))).toMatchObject({ n: i + 1 });
      }
      await until(() => flushed === SIZES.length);
    });
  }

  it('leaves the frame to ws while ws has frames of its own queued', async () => {
    const p = await wsPair();
    cleanup = p.close;
    const sender = (p.server as unknown as { _sender: { _state: number } })._sender;
    sender._state = 1; // as while ws compresses or reads a Blob: its next frames queue behind
    try {
      expect(writeDataFrame(p.server, 1, Buffer.from('x'), () => {})).toBe(false);
    } finally {
      sender._state = 0;
    }
    expect(writeDataFrame(p.server, 1, Buffer.from('x'), () => {})).toBe(true);
  });

  it('from the client, bulk frames are built in reused buffers, each reused only once the socket has flushed it', async () => {
    const p = await wsPair();
    cleanup = p.close;
    const size = FRAME_BUFFER_SIZE; // a bulk frame: the largest that fits a pooled buffer
    const before = { ...framePool.stats };
    // One frame at a time, each written once the previous one is flushed (as the mux's scheduler does).
    const sent: Buffer[] = [];
    for (let i = 0; i < 12; i++) {
      const payload = crypto.randomBytes(size);
      const copy = Buffer.from(payload);
      await new Promise<void>((resolve, reject) => {
        expect(writeDataFrame(p.client, i, payload, (err) => (err ? reject(err) : resolve()))).toBe(true);
      });
      // Masked into the pooled frame, never where it lies: the caller's bytes are untouched.
      expect(payload.equals(copy)).toBe(true);
      sent.push(encodeData(i, copy));
    }
    await until(() => p.toServer.length === sent.length);
    for (const [i, frame] of sent.entries()) expect(p.toServer[i].data.equals(frame)).toBe(true);
    expect(framePool.stats.allocated - before.allocated).toBeLessThanOrEqual(1);
    expect(framePool.stats.reused - before.reused).toBeGreaterThanOrEqual(11);
  });

  it('from the client, frames still queued on a socket that does not drain are not overwritten by later ones', async () => {
    const p = await wsPair();
    cleanup = p.close;
    // The server stops reading: the kernel's buffers fill, and the client's frames queue in its socket.
    p.server.pause();
    const size = FRAME_BUFFER_SIZE;
    const sent: Buffer[] = [];
    let flushed = 0;
    for (let i = 0; i < 64; i++) {
      const payload = crypto.randomBytes(i % 2 ? size : 5000 + i);
      sent.push(encodeData(i, payload));
      expect(writeDataFrame(p.client, i, payload, (err) => (expect(err).toBeFalsy(), (flushed += 1)))).toBe(true);
      // Some flushed and went back to the pool meanwhile: their buffers serve the next frames.
      if (i % 8 === 7) await new Promise((r) => setImmediate(r));
    }
    expect((p.client as unknown as { _socket: { writableLength: number } })._socket.writableLength).toBeGreaterThan(0);
    p.server.resume();
    await until(() => p.toServer.length === sent.length);
    for (const [i, frame] of sent.entries()) expect(p.toServer[i].data.equals(frame)).toBe(true);
    await until(() => flushed === sent.length);
  });

  for (const end of ['server', 'client'] as const) {
    for (const owned of [false, true]) {
      it(`from the ${end}${owned ? ', handed over' : ''}: a payload in several buffers is one frame, split anywhere`, async () => {
        const p = await wsPair();
        cleanup = p.close;
        const from = end === 'server' ? p.server : p.client;
        const got = end === 'server' ? p.toClient : p.toServer;
        // Splits off the key's phase (1, 2, 3 bytes), empty parts, and parts around the native-masking threshold.
        const splits = [[1, 2, 3, 70_000], [0, 65_531, 0, 5], [47, 1, 131_072 - 48], [3], [0]];
        const expected: Buffer[] = [];
        let flushed = 0;
        for (const [i, sizes] of splits.entries()) {
          const parts = sizes.map((n) => crypto.randomBytes(n));
          const whole = Buffer.concat(parts);
          expect(writeDataFrame(from, i, parts, (err) => (expect(err).toBeFalsy(), (flushed += 1)), owned)).toBe(true);
          // Only a payload handed over from a client is masked where it lies.
          expect(Buffer.concat(parts).equals(whole)).toBe(!(owned && end === 'client') || whole.length === 0);
          expected.push(encodeData(i, whole));
        }
        await until(() => got.length === splits.length);
        for (const [i, frame] of expected.entries()) expect(got[i].data.equals(frame)).toBe(true);
        await until(() => flushed === splits.length);
      });
    }
  }
});
