import crypto from 'node:crypto';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import type { FramePayload } from '../../shared/mux-channel.js';
import { BULK_FRAME } from '../../shared/mux-scheduler.js';
import { BULK_READ_SIZE } from '../../shared/read-buffers.js';
import { recordingChannel } from '../../test/support/recording-channel.js';
import { CHANNEL_BACKLOG, Relay } from './relay.js';

/** A user's WebSocket to a relay of a tunnel; the server's socket reads are recorded as they come. */
async function tunnelRelay(maxPayload = 4 * 1024 * 1024, holdFlushes = false) {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', maxPayload, perMessageDeflate: false });
  await new Promise((r) => wss.once('listening', r));
  const recording = recordingChannel({ holdFlushes });
  const { channel } = recording;
  const reads: Buffer[] = [];
  const started = new Promise<{ relay: Relay; server: WebSocket }>((resolve) =>
    wss.once('connection', (server) => {
      (server as unknown as { _socket: Socket })._socket.on('data', (d: Buffer) => reads.push(d));
      const relay = new Relay(server, channel, { kind: 'tunnel', info: {} });
      relay.start();
      resolve({ relay, server });
    }),
  );
  const client = new WebSocket(`ws://127.0.0.1:${(wss.address() as AddressInfo).port}`, { perMessageDeflate: false });
  await new Promise((r) => client.once('open', r));
  const { relay, server } = await started;
  cleanup = () => {
    client.terminate();
    wss.close();
  };
  return { client, server, relay, reads, ...recording };
}

let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((r) => setTimeout(r, 5));
}

const total = (buffers: Buffer[]) => buffers.reduce((n, b) => n + b.length, 0);

/**
 * The device's side of a recording relay, a turn at a time: each turn sends what the channel has,
 * grants credit for what it got, and (unless `flushing` is false) reports its socket flushed.
 */
function deviceSide({ pump, sent, channel, flush }: Pick<Awaited<ReturnType<typeof tunnelRelay>>, 'pump' | 'sent' | 'channel' | 'flush'>) {
  let credited = 0;
  return async (done: () => boolean, flushing = true) => {
    while (!done()) {
      pump();
      const n = total(sent);
      if (n > credited) channel.onCredit(n - credited);
      credited = n;
      if (flushing) flush();
      await new Promise((r) => setImmediate(r));
    }
  };
}
const partsOf = (frames: FramePayload[]) => frames.flatMap((f) => (Buffer.isBuffer(f) ? [f] : [...f]));

describe('a tunnel relay reading the user', () => {
  it('hands the bytes of a frame that spans several reads on as views of those reads, not a re-assembled copy', async () => {
    const { client, channel, frames, sent, pump, reads } = await tunnelRelay();
    const socket = (client as unknown as { _socket: Socket })._socket;
    // One 200 KiB frame in three writes, each read by the server before the next is sent.
    const payload = crypto.randomBytes(200 * 1024);
    const whole = Buffer.alloc(10 + payload.length + 4);
    const mask = crypto.randomBytes(4);
    whole[0] = 0x82;
    whole[1] = 0x80 | 127;
    whole.writeBigUInt64BE(BigInt(payload.length), 2);
    mask.copy(whole, 10);
    for (let i = 0; i < payload.length; i++) whole[14 + i] = payload[i] ^ mask[i & 3];
    let written = 0;
    for (const end of [70_000, 140_000, whole.length]) {
      socket.write(whole.subarray(written, end));
      written = end;
      await until(() => total(reads) >= written);
    }
    await until(() => channel.writableLength + total(sent) >= payload.length);
    pump();
    expect(Buffer.concat(sent).equals(payload)).toBe(true);
    // Every byte sent on is a view of one of the socket's reads (ws copied a spanning frame into a buffer of its own).
    for (const part of partsOf(frames)) expect(reads.some((r) => r.buffer === part.buffer)).toBe(true);
    // And as few frames to the device as if the frame had come whole.
    expect(frames.length).toBe(Math.ceil(payload.length / BULK_FRAME));
  });

  it('stops reading a user who floods a channel with no credit, holding at most the backlog and one frame', async () => {
    const { client, relay, channel, sent: sentOn, pump } = await tunnelRelay();
    const sent: Buffer[] = [];
    // 16 MiB in 64 KiB frames, as `fleet connect` sends them; the device takes nothing meanwhile.
    for (let i = 0; i < 256; i++) {
      const chunk = crypto.randomBytes(64 * 1024);
      sent.push(chunk);
      client.send(chunk);
    }
    const inputPaused = () => (relay as unknown as { inputPaused: boolean }).inputPaused;
    await until(inputPaused);
    // Further reads already under way still land; nothing beyond them: the backlog, one frame and the
    // rest of one read (up to BULK_READ_SIZE, the socket's reads being into reused buffers).
    await new Promise((r) => setTimeout(r, 50));
    expect(channel.writableLength).toBeLessThanOrEqual(CHANNEL_BACKLOG + 64 * 1024 + BULK_READ_SIZE + 1024);
    // Credit again: everything arrives, in order.
    const whole = Buffer.concat(sent);
    let credited = 0;
    while (credited < whole.length) {
      pump();
      const n = total(sentOn);
      if (n > credited) channel.onCredit(n - credited);
      credited = n;
      await new Promise((r) => setImmediate(r));
    }
    expect(Buffer.concat(sentOn).equals(whole)).toBe(true);
  });

  it('still refuses a frame above the largest the broker takes (1009), with nothing of it sent on', async () => {
    const { client, frames, pump } = await tunnelRelay(64 * 1024);
    const closed = new Promise<number>((resolve) => client.once('close', resolve));
    client.send(crypto.randomBytes(64 * 1024 + 1));
    expect(await closed).toBe(1009);
    pump();
    expect(frames.length).toBe(0);
  });

  it("reads the user's socket into a few reused buffers, each read into again only once its frames to the device are flushed", async () => {
    const relay = await tunnelRelay(4 * 1024 * 1024, true);
    const { client, sent, overwritten, reads } = relay;
    const chunks = Array.from({ length: 128 }, () => crypto.randomBytes(64 * 1024));
    for (const chunk of chunks) client.send(chunk);
    const whole = Buffer.concat(chunks);
    // The device grants credit and its socket flushes each turn.
    await deviceSide(relay)(() => total(sent) >= whole.length);
    expect(Buffer.concat(sent).equals(whole)).toBe(true);
    expect(overwritten()).toBe(0);
    // 8 MiB in a few buffers: the small first ones, and as many bulk ones as are out at once behind
    // the device's flushes (Node's own reads: a fresh buffer each, at least 128 of them).
    expect(new Set(reads.map((r) => r.buffer)).size).toBeLessThanOrEqual(16);
  });

  it('keeps reading bounded and loses nothing while the socket to the device flushes nothing (every read buffer held)', async () => {
    const fixture = await tunnelRelay(4 * 1024 * 1024, true);
    const { client, relay, channel, sent, pump, overwritten, unflushed, reads } = fixture;
    const device = deviceSide(fixture);
    const chunks = Array.from({ length: 256 }, () => crypto.randomBytes(64 * 1024));
    for (const chunk of chunks) client.send(chunk);
    const whole = Buffer.concat(chunks);
    // Credit comes, frames go out, but none is reported flushed: no read buffer comes back.
    const inputPaused = () => (relay as unknown as { inputPaused: boolean }).inputPaused;
    await device(inputPaused, false);
    await new Promise((r) => setTimeout(r, 50));
    pump();
    expect(unflushed()).toBeGreaterThan(0);
    // What the broker holds: the channel's unfinished writes (the held frames among them), bounded as before.
    expect(channel.writableLength).toBeLessThanOrEqual(CHANNEL_BACKLOG + 64 * 1024 + BULK_READ_SIZE + 1024);
    expect(total(reads)).toBeLessThan(whole.length / 4);
    // The socket drains again: everything arrives, in order, and no buffer was read into while its frames were out.
    await device(() => total(sent) >= whole.length);
    expect(Buffer.concat(sent).equals(whole)).toBe(true);
    expect(overwritten()).toBe(0);
  });
});

describe('a tunnel relay writing to the user', () => {
  it('sends the pieces the device brings in one turn in one write to the socket, not one write each', async () => {
    const { client, server, channel } = await tunnelRelay();
    const socket = (server as unknown as { _socket: Socket & { _write: unknown; _writev: unknown } })._socket;
    const received: Buffer[] = [];
    client.on('message', (data, isBinary) => {
      if (isBinary) received.push(data as Buffer);
    });
    await until(() => socket.writableLength === 0);
    let writes = 0;
    for (const method of ['_write', '_writev'] as const) {
      const original = socket[method] as (...args: unknown[]) => void;
      socket[method] = (...args: unknown[]) => {
        writes++;
        return original.apply(socket, args);
      };
    }
    // The three pieces of a 128 KiB frame from the agent, handed on together by the mux.
    const pieces = [60_000, 65_536, 5_536].map((n) => crypto.randomBytes(n));
    for (const piece of pieces) channel.onData(piece);
    await until(() => total(received) >= 131_072);
    expect(Buffer.concat(received).equals(Buffer.concat(pieces))).toBe(true);
    expect(writes).toBe(1);
  });
});
