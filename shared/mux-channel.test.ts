import crypto from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { recordingChannel } from '../test/support/recording-channel.js';
import { Channel, COPIED_FRAME_MAX, DEFAULT_WINDOW, type ChannelHost, type FramePayload } from './mux-channel.js';
import { BULK_FRAME } from './mux-scheduler.js';

const testChannel = (messageMode = false) => recordingChannel({ messageMode });
const bytesOf = (f: FramePayload) => (Buffer.isBuffer(f) ? f : Buffer.concat(f));

describe('a channel sending writes queued together', () => {
  it('frames the pieces of writes queued behind each other across their boundaries, not one frame (or more) each', () => {
    const { channel, frames, pump, bytes } = testChannel();
    // The pieces of two 64 KiB WebSocket frames read off a socket in 64 KiB reads (a tunnel's upload).
    const pieces = [65_522, 14, 65_508, 28].map((n) => crypto.randomBytes(n));
    channel.cork();
    for (const piece of pieces) channel.write(piece);
    channel.uncork();
    pump();
    const whole = Buffer.concat(pieces);
    expect(frames.length).toBe(Math.ceil(whole.length / BULK_FRAME));
    expect(Buffer.concat(frames.map(bytes)).equals(whole)).toBe(true);
    // The frames are views of the pieces, not copies.
    const first = frames[0] as readonly Buffer[];
    expect(Array.isArray(first)).toBe(true);
    expect(first[0].buffer).toBe(pieces[0].buffer);
  });

  it('reports every write done once its last frame is flushed, and cuts frames at the credit', () => {
    const { channel, frames, pump, bytes } = testChannel();
    const done: number[] = [];
    const pieces = [1, 2, 3, 40_000, 5].map((n) => crypto.randomBytes(n));
    channel.cork();
    for (const [i, piece] of pieces.entries()) channel.write(piece, () => done.push(i));
    channel.uncork();
    pump(10_000);
    expect(frames.every((f) => bytes(f).length <= 10_000)).toBe(true);
    expect(Buffer.concat(frames.map(bytes)).equals(Buffer.concat(pieces))).toBe(true);
    return new Promise<void>((resolve) =>
      setImmediate(() => {
        expect(done).toEqual([0, 1, 2, 3, 4]);
        resolve();
      }),
    );
  });

  it('copies a small gathered write into one frame of its own, done at once', () => {
    const { channel, frames, pump } = testChannel();
    const pieces = [100, 200].map((n) => crypto.randomBytes(n));
    channel.cork();
    for (const piece of pieces) channel.write(piece);
    channel.uncork();
    pump();
    expect(frames.length).toBe(1);
    expect(Buffer.isBuffer(frames[0])).toBe(true);
    expect((frames[0] as Buffer).equals(Buffer.concat(pieces))).toBe(true);
    expect((frames[0] as Buffer).length).toBeLessThanOrEqual(COPIED_FRAME_MAX);
  });

  it('keeps a datagram channel to one frame per write', () => {
    const { channel, frames, pump, bytes } = testChannel(true);
    const datagrams = [10, 20, 30].map((n) => crypto.randomBytes(n));
    channel.cork();
    for (const d of datagrams) channel.write(d);
    channel.uncork();
    pump();
    expect(frames.map(bytes)).toEqual(datagrams);
  });

  it('gathers the writes queued behind one being sent into frames that span them, unasked; all are done once the last is flushed', async () => {
    const frames: FramePayload[] = [];
    const flushes: (() => void)[] = [];
    let waiting: Channel | undefined;
    const host: ChannelHost = {
      send: () => {},
      sendData: (_ch, payload, flushed) => {
        frames.push(payload);
        if (flushed) flushes.push(flushed);
      },
      schedule: (c) => (waiting = c),
      forget: () => {},
    };
    const channel = new Channel(host, 1, 'tunnel', { proto: 'tcp', port: 1, dst: '127.0.0.1' }, DEFAULT_WINDOW);
    const done: number[] = [];
    const writes = [0, 1, 2].map(() => crypto.randomBytes(40_000));
    for (const [i, chunk] of writes.entries()) channel.write(chunk, () => done.push(i));
    while (waiting && waiting.sendFrame(BULK_FRAME) > 0);
    // The first write is on its way; the two queued behind it wait for its flush.
    expect(frames.length).toBe(1);
    flushes.shift()!();
    await new Promise((r) => setImmediate(r));
    expect(done).toEqual([0]);
    while (waiting && waiting.sendFrame(BULK_FRAME) > 0);
    // The code before took them one by one: a frame (and a write to the socket) each.
    expect(frames.length).toBe(2);
    expect(Array.isArray(frames[1])).toBe(true);
    expect(bytesOf(frames[1]).equals(Buffer.concat(writes.slice(1)))).toBe(true);
    flushes.shift()!();
    await new Promise((r) => setImmediate(r));
    expect(done).toEqual([0, 1, 2]);
  });
});
