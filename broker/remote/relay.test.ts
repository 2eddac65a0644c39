import crypto from 'node:crypto';
import type { AddressInfo, Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import type { FramePayload } from '../../shared/mux-channel.js';
import { BULK_FRAME } from '../../shared/mux-scheduler.js';
import { recordingChannel } from '../../test/support/recording-channel.js';
import { CHANNEL_BACKLOG, Relay } from './relay.js';

/** A user's WebSocket to a relay of a tunnel; the server's socket reads are recorded as they come. */
async function tunnelRelay(maxPayload = 4 * 1024 * 1024) {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', maxPayload, perMessageDeflate: false });
  await new Promise((r) => wss.once('listening', r));
  const { channel, frames, pump } = recordingChannel();
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
  return { client, server, relay, channel, frames, pump, reads };
}

let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((r) => setTimeout(r, 5));
}

const framed = (frames: FramePayload[]) => Buffer.concat(frames.map((f) => (Buffer.isBuffer(f) ? f : Buffer.concat(f))));
const partsOf = (frames: FramePayload[]) => frames.flatMap((f) => (Buffer.isBuffer(f) ? [f] : [...f]));

describe('a tunnel relay reading the user', () => {
  it('hands the bytes of a frame that spans several reads on as views of those reads, not a re-assembled copy', async () => {
    const { client, channel, frames, pump, reads } = await tunnelRelay();
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
    let sent = 0;
    for (const end of [70_000, 140_000, whole.length]) {
      socket.write(whole.subarray(sent, end));
      sent = end;
      await until(() => reads.reduce((n, r) => n + r.length, 0) >= sent);
    }
    await until(() => channel.writableLength + framed(frames).length >= payload.length);
    pump();
    expect(framed(frames).equals(payload)).toBe(true);
    // Every byte sent on is a view of one of the socket's reads (ws copied a spanning frame into a buffer of its own).
    for (const part of partsOf(frames)) expect(reads.some((r) => r.buffer === part.buffer)).toBe(true);
    // And as few frames to the device as if the frame had come whole.
    expect(frames.length).toBe(Math.ceil(payload.length / BULK_FRAME));
  });

  it('stops reading a user who floods a channel with no credit, holding at most the backlog and one frame', async () => {
    const { client, relay, channel, frames, pump } = await tunnelRelay();
    const sent: Buffer[] = [];
    // 16 MiB in 64 KiB frames, as `fleet connect` sends them; the device takes nothing meanwhile.
    for (let i = 0; i < 256; i++) {
      const chunk = crypto.randomBytes(64 * 1024);
      sent.push(chunk);
      client.send(chunk);
    }
    const inputPaused = () => (relay as unknown as { inputPaused: boolean }).inputPaused;
    await until(inputPaused);
    // Further reads already under way still land; nothing beyond them.
    await new Promise((r) => setTimeout(r, 50));
    expect(channel.writableLength).toBeLessThanOrEqual(CHANNEL_BACKLOG + 2 * 64 * 1024 + 1024);
    // Credit again: everything arrives, in order.
    const whole = Buffer.concat(sent);
    let credited = 0;
    while (credited < whole.length) {
      pump();
      const sentOn = frames.reduce((n, f) => n + (Buffer.isBuffer(f) ? f.length : f.reduce((m, b) => m + b.length, 0)), 0);
      if (sentOn > credited) channel.onCredit(sentOn - credited);
      credited = sentOn;
      await new Promise((r) => setImmediate(r));
    }
    expect(framed(frames).equals(whole)).toBe(true);
  });

  it('still refuses a frame above the largest the broker takes (1009), with nothing of it sent on', async () => {
    const { client, frames, pump } = await tunnelRelay(64 * 1024);
    const closed = new Promise<number>((resolve) => client.once('close', resolve));
    client.send(crypto.randomBytes(64 * 1024 + 1));
    expect(await closed).toBe(1009);
    pump();
    expect(frames.length).toBe(0);
  });
});
