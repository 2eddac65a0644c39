import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import { Writable } from 'node:stream';
import { transformSync } from 'esbuild';
import { afterEach, describe, expect, it, vi } from 'vitest';
import type WebSocket from 'ws';
import { muxPair } from '../test/support/mux-pair.js';
import {
  BULK_FRAME,
  COPIED_FRAME_MAX,
  handOver,
  HELD_BULK_WINDOW,
  INTERACTIVE_HOLD_MS,
  MAX_FRAME,
  MAX_PROTOCOL_ERRORS,
  Mux,
  SEND_IN_FLIGHT_MAX,
  SMALL_GRANT_DELAY_MS,
  type Channel,
  type MuxProtocolError,
} from './mux.js';
import { AgentClose, decodeData, encodeData, MAX_CHANNEL_CREDIT, MuxErrorCode, type ControlMessage } from './protocol.js';
import { FROM_AGENT, type AgentMessage } from './wire.js';

const pair = muxPair;

let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

describe('mux channels', () => {
  it('carries bytes both ways with the checksum intact and passes the open info', async () => {
    const p = await pair(async (ch) => {
      ch.pipe(ch); // echo
      return { hello: 'agent' };
    });
    cleanup = p.close;
    const { channel, info } = await p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' });
    expect(info).toEqual({ hello: 'agent' });
    const payload = crypto.randomBytes(3 * 1024 * 1024 + 17);
    const received: Buffer[] = [];
    channel.on('data', (d: Buffer) => received.push(d));
    const ended = new Promise((r) => channel.once('end', r));
    channel.end(payload);
    await ended;
    const back = Buffer.concat(received);
    expect(back.length).toBe(payload.length);
    expect(crypto.createHash('sha256').update(back).digest('hex')).toBe(crypto.createHash('sha256').update(payload).digest('hex'));
  });

  it('keeps a slow reader from being flooded: the sender waits for credit', async () => {
    let agentChannel: Channel | undefined;
    const p = await pair(async (ch) => {
      agentChannel = ch;
      ch.pause(); // a reader that reads nothing
    }, 64 * 1024);
    cleanup = p.close;
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    let written = 0;
    const chunk = Buffer.alloc(16 * 1024, 1);
    // Write until the stream pushes back, then give it time: nothing more than the window may arrive.
    for (let i = 0; i < 200; i++) {
      written += chunk.length;
      if (!channel.write(chunk)) break;
    }
    await new Promise((r) => setTimeout(r, 200));
    expect(written).toBeGreaterThan(64 * 1024);
    expect(agentChannel!.stats.bytesIn).toBeLessThanOrEqual(64 * 1024);
    expect(agentChannel!.readableLength).toBeLessThanOrEqual(64 * 1024);
    // Once the reader consumes, everything arrives.
    const sink = new Writable({ write: (_c, _e, cb) => cb() });
    agentChannel!.pipe(sink);
    channel.end();
    await new Promise((r) => agentChannel!.once('end', r));
    expect(agentChannel!.stats.bytesIn).toBe(written);
  });

  it('half-closes: eof from one side still lets the other side answer', async () => {
    const p = await pair(async (ch) => {
      const parts: Buffer[] = [];
      ch.on('data', (d: Buffer) => parts.push(d));
      ch.on('end', () => ch.end(Buffer.concat(parts).toString().toUpperCase()));
    });
    cleanup = p.close;
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' });
    const answer: Buffer[] = [];
    channel.on('data', (d: Buffer) => answer.push(d));
    channel.end('question');
    await new Promise((r) => channel.once('end', r));
    expect(Buffer.concat(answer).toString()).toBe('QUESTION');
  });

  it('reports a refused open as an error and a dropped connection as closed channels', async () => {
    const p = await pair(async (ch) => {
      if ((ch.params as { port: number }).port === 80) throw new Error('port 80 refused on the device');
    });
    cleanup = p.close;
    await expect(p.broker.open('tunnel', { proto: 'tcp', port: 80, dst: 'x' })).rejects.toThrow(/port 80 refused/);
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: 22, dst: 'x' });
    const closed = new Promise((r) => channel.once('close', r));
    p.agent.ws.terminate();
    await closed;
    expect(p.broker.openChannels).toBe(0);
  });

  it('carries channel control messages', async () => {
    const p = await pair(async (ch) => {
      ch.on('control', (msg) => {
        if (msg.type === 'resize') ch.control({ type: 'exit', code: msg.cols, signal: null });
      });
    });
    cleanup = p.close;
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    const exit = new Promise<any>((r) => channel.once('control', r));
    channel.control({ type: 'resize', cols: 120, rows: 40 });
    expect(await exit).toEqual({ type: 'exit', code: 120, signal: null });
  });
});

describe('mux data from the client end (masked frames)', () => {
  it('masks a written chunk into frames of its own, never where it lies, unless the writer handed it over', async () => {
    let agentChannel: Channel | undefined;
    const p = await pair(async (ch) => {
      agentChannel = ch;
    });
    cleanup = p.close;
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' });
    const received: Buffer[] = [];
    channel.on('data', (d: Buffer) => received.push(Buffer.from(d)));
    const ch = agentChannel as Channel;
    // Sizes: a copied small write, one bulk frame, and a write of several frames.
    const kept = [100, COPIED_FRAME_MAX + 1, BULK_FRAME + 5000].map((n) => crypto.randomBytes(n));
    const given = [100, COPIED_FRAME_MAX + 1, BULK_FRAME + 5000].map((n) => crypto.randomBytes(n));
    const expected = Buffer.concat([...kept, ...given]);
    const givenCopies = given.map((b) => Buffer.from(b));
    const keptCopies = kept.map((b) => Buffer.from(b));
    const written = (chunk: Buffer) => new Promise<void>((resolve, reject) => ch.write(chunk, (err) => (err ? reject(err) : resolve())));
    for (const chunk of kept) await written(chunk);
    // The writer still holds these: after the write is done they are as they were.
    for (const [i, chunk] of kept.entries()) expect(chunk.equals(keptCopies[i])).toBe(true);
    for (const chunk of given) await written(handOver(chunk));
    await eventuallyTrue(() => received.reduce((a, b) => a + b.length, 0) === expected.length);
    expect(Buffer.concat(received).equals(expected)).toBe(true);
    // Handed over, the larger ones were masked in place (no copy): their bytes are no longer the writer's.
    expect(given[1].equals(givenCopies[1])).toBe(false);
    expect(given[2].equals(givenCopies[2])).toBe(false);
  });
});

describe('mux control before a listener', () => {
  it('holds a channel control message that arrives before anyone listens', async () => {
    const p = await pair(async (ch) => {
      // Sent at once with the open answer: the broker side has no listener yet.
      setImmediate(() => ch.control({ type: 'meta', size: 7, mode: 0o644 }));
    });
    cleanup = p.close;
    const { channel } = await p.broker.open('copy', { direction: 'download', path: '/x' });
    await new Promise((r) => setTimeout(r, 50));
    const meta = await new Promise<any>((r) => channel.once('control', r));
    expect(meta).toEqual({ type: 'meta', size: 7, mode: 0o644 });
  });
});

describe('mux enforcement of what the peer sends', () => {
  /** The agent end's raw socket, to send what a hostile agent would; resolves with the close code it sees. */
  async function hostilePair() {
    const p = await pair(async () => {}, 64 * 1024);
    cleanup = p.close;
    const errors: MuxProtocolError[] = [];
    p.broker.on('protocol-error', (err: MuxProtocolError) => errors.push(err));
    const closed = new Promise<number>((resolve) => p.agent.ws.once('close', (code) => resolve(code)));
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    return { p, errors, closed, channel };
  }

  it('closes the connection with a protocol error when data arrives beyond the granted window', async () => {
    const { p, errors, closed, channel } = await hostilePair();
    // Nobody reads on the broker side, so no credit comes back: the window is all the agent may send.
    p.agent.ws.send(encodeData(channel.id, Buffer.alloc(64 * 1024)), { binary: true });
    p.agent.ws.send(encodeData(channel.id, Buffer.alloc(1)), { binary: true });
    expect(await closed).toBe(AgentClose.protocolError);
    expect(errors.map((e) => e.code)).toEqual([MuxErrorCode.creditExceeded]);
    expect(channel.readableLength).toBeLessThanOrEqual(64 * 1024);
    expect(channel.destroyed).toBe(true);
  });

  it('refuses a grant that would push credit above the bound', async () => {
    const { p, errors, closed, channel } = await hostilePair();
    p.agent.ws.send(JSON.stringify({ t: 'credit', ch: channel.id, n: MAX_CHANNEL_CREDIT }));
    expect(await closed).toBe(AgentClose.protocolError);
    expect(errors.map((e) => e.code)).toEqual([MuxErrorCode.creditOverflow]);
  });

  it('refuses a grant that is not a positive whole number', async () => {
    const { p, errors, closed, channel } = await hostilePair();
    p.agent.ws.send(JSON.stringify({ t: 'credit', ch: channel.id, n: '1e9' }));
    expect(await closed).toBe(AgentClose.protocolError);
    expect(errors.map((e) => e.code)).toEqual([MuxErrorCode.creditOverflow]);
  });

  it('closes after repeated unreadable frames, reporting only the first', async () => {
    const { p, errors, closed } = await hostilePair();
    for (let i = 0; i <= MAX_PROTOCOL_ERRORS + 5; i++) p.agent.ws.send(i % 2 ? 'not json' : '"a string"');
    expect(await closed).toBe(AgentClose.protocolError);
    expect(errors).toHaveLength(1);
    expect(errors[0].code).toBe(MuxErrorCode.unreadable);
    expect(p.broker.protocolErrors).toBe(MAX_PROTOCOL_ERRORS + 1);
  });

  it('closes a peer that keeps opening channels on the side that does not serve them', async () => {
    const { p, errors, closed } = await hostilePair();
    for (let i = 0; i <= MAX_PROTOCOL_ERRORS; i++) p.agent.ws.send(JSON.stringify({ t: 'open', ch: 1000 + i, kind: 'console', params: { cols: 1, rows: 1 } }));
    expect(await closed).toBe(AgentClose.protocolError);
    expect(errors.map((e) => e.code)).toEqual([MuxErrorCode.unexpected]);
  });

  it('tolerates a few unreadable frames without closing', async () => {
    const { p, errors, channel } = await hostilePair();
    for (let i = 0; i < MAX_PROTOCOL_ERRORS; i++) p.agent.ws.send('not json');
    // Still open: a control message after them arrives.
    const control = new Promise((r) => channel.once('control', r));
    p.agent.ws.send(JSON.stringify({ t: 'ctl', ch: channel.id, msg: { type: 'exit', code: 0, signal: null } }));
    expect(await control).toEqual({ type: 'exit', code: 0, signal: null });
    expect(errors).toHaveLength(1);
  });

  it('cuts a peer that leaves more than the bound unread instead of queueing to it', async () => {
    const p = await pair(async () => {}, 64 * 1024);
    cleanup = p.close;
    const broker = new Mux(p.broker.ws, { maxUnreadBytes: 256 * 1024, receives: FROM_AGENT });
    const closed = new Promise<string>((r) => broker.once('close', r));
    p.agent.ws.pause(); // the agent stops reading
    for (let i = 0; i < 10_000 && broker.closeCode === undefined; i++) broker.send({ t: 'inventory', data: { filler: 'x'.repeat(4096) } });
    expect(await closed).toMatch(/not reading/);
    expect(broker.closeCode).toBe(AgentClose.peerNotReading);
    expect(p.broker.ws.bufferedAmount).toBeLessThanOrEqual(256 * 1024 + 8192);
  });
});

/**
 * A WebSocket stand-in that records what the mux hands it and flushes only when told, like a
 * socket whose peer reads slowly: the order of frames on the wire is then plain to assert.
 */
class RecordingSocket extends EventEmitter {
  readonly OPEN = 1;
  readyState = 1;
  /** What the mux checks before every send (a peer that does not read is cut): small here. */
  readonly bufferedAmount = 0;
  readonly wire: { ch: number; bytes: number; text?: ControlMessage }[] = [];
  private readonly unflushed: (() => void)[] = [];

  send(data: string | Buffer, options?: unknown, callback?: () => void): void {
    const cb = typeof options === 'function' ? (options as () => void) : callback;
    if (typeof data === 'string') {
      const text = JSON.parse(data) as ControlMessage;
      this.wire.push({ ch: 'ch' in text ? text.ch : 0, bytes: 0, text });
    } else {
      const frame = decodeData(data)!;
      this.wire.push({ ch: frame.ch, bytes: frame.payload.length });
    }
    if (cb) this.unflushed.push(cb);
  }

  /** Bytes of data frames handed over and not flushed yet. */
  get pendingCallbacks(): number {
    return this.unflushed.length;
  }

  /** The socket flushes its oldest frame. */
  flushOne(): boolean {
    const cb = this.unflushed.shift();
    cb?.();
    return cb !== undefined;
  }

  close(): void {}

  terminate(): void {}

  pause(): void {}
}

async function brokerMuxOn(
  socket: RecordingSocket,
  window: number,
): Promise<{ mux: Mux<AgentMessage>; open: (kind: 'console' | 'tunnel') => Promise<Channel> }> {
  const mux = new Mux(socket as unknown as WebSocket, { window, receives: FROM_AGENT });
  const open = async (kind: 'console' | 'tunnel') => {
    const opening = mux.open(kind, kind === 'console' ? { cols: 80, rows: 24 } : { proto: 'tcp', port: 1, dst: 'x' });
    const sent = socket.wire.at(-1)!.text as { ch: number };
    socket.emit('message', Buffer.from(JSON.stringify({ t: 'opened', ch: sent.ch })), false);
    return (await opening).channel;
  };
  return { mux, open };
}

describe('mux send scheduling', () => {
  it('sends a keystroke on one channel before the bulk backlog of another drains', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const bulk = await open('tunnel');
    const console_ = await open('console');
    const before = socket.wire.length;
    bulk.write(Buffer.alloc(4 * 1024 * 1024, 1)); // credit for all of it: only the scheduler holds it back
    console_.write(Buffer.from('x'));
    // The socket drains slowly, one frame at a time.
    while (socket.flushOne());
    const frames = socket.wire.slice(before).filter((f) => !f.text);
    const keystroke = frames.findIndex((f) => f.ch === console_.id);
    expect(keystroke).toBeGreaterThanOrEqual(0);
    // At most what was already in flight when the keystroke was written goes first.
    expect(keystroke).toBeLessThanOrEqual(Math.ceil(SEND_IN_FLIGHT_MAX / MAX_FRAME));
    const bulkSent = frames.filter((f) => f.ch === bulk.id).reduce((a, f) => a + f.bytes, 0);
    expect(bulkSent).toBeLessThan(4 * 1024 * 1024);
  });

  it('sends a keystroke written behind a bulk backlog ahead of every bulk frame not yet handed to the socket', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const bulk = await open('tunnel');
    const console_ = await open('console');
    const dataFrames = () => socket.wire.filter((f) => !f.text);
    bulk.write(Buffer.alloc(4 * 1024 * 1024, 1));
    for (let i = 0; i < 3; i++) socket.flushOne(); // the transfer is under way, the socket full
    const handedBefore = dataFrames().length;
    console_.write(Buffer.from('x'));
    socket.flushOne(); // room for one frame: the keystroke's, not the next bulk frame
    while (socket.flushOne());
    const frames = dataFrames();
    expect(frames[handedBefore]).toEqual({ ch: console_.id, bytes: 1 });
    expect(frames.slice(handedBefore + 1).every((f) => f.ch === bulk.id)).toBe(true);
  });

  it('hands a keystroke to an idle socket in the call that writes it', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 1024 * 1024);
    const console_ = await open('console');
    const before = socket.wire.length;
    console_.write(Buffer.from('x'));
    // No tick, no timer: the frame is on the socket before write() returns.
    expect(socket.wire.slice(before)).toEqual([{ ch: console_.id, bytes: 1 }]);
  });

  it('does not starve a tunnel behind a console that floods small frames, nor the console behind the tunnel', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const bulk = await open('tunnel');
    const console_ = await open('console');
    const chunk = Buffer.alloc(512, 0x79); // `yes` output, in reads of 512 bytes
    let flooding = true;
    const flood = () => {
      while (flooding && console_.write(chunk));
      if (flooding) console_.once('drain', flood);
    };
    flood();
    bulk.write(Buffer.alloc(2 * 1024 * 1024, 1));
    const sent = (ch: number) => socket.wire.filter((f) => !f.text && f.ch === ch).reduce((a, f) => a + f.bytes, 0);
    // The peer reads as fast as the socket flushes: what each channel sent is credited back.
    const credited = new Map<number, number>();
    for (let i = 0; i < 4000 && socket.flushOne(); i++) {
      for (const ch of [bulk.id, console_.id]) {
        const due = sent(ch) - (credited.get(ch) ?? 0);
        if (due > 0) socket.emit('message', Buffer.from(JSON.stringify({ t: 'credit', ch, n: due })), false);
        credited.set(ch, sent(ch));
      }
      await new Promise((r) => setImmediate(r));
    }
    flooding = false;
    // Both moved: the console's frames did not keep the tunnel's out, nor the other way round.
    expect(sent(bulk.id)).toBeGreaterThan(256 * 1024);
    expect(sent(console_.id)).toBeGreaterThan(256 * 1024);
  });

  it('holds a busy channel to a small window while someone types, and lets it go on as credit returns', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const bulk = await open('tunnel');
    const console_ = await open('console');
    const bulkBytes = () => socket.wire.filter((f) => !f.text && f.ch === bulk.id).reduce((a, f) => a + f.bytes, 0);
    bulk.write(Buffer.alloc(4 * 1024 * 1024, 1));
    for (let i = 0; i < 4; i++) socket.flushOne(); // the transfer is under way: more than the held window sent
    const beforeKeystroke = bulkBytes();
    expect(beforeKeystroke).toBeGreaterThan(HELD_BULK_WINDOW);
    console_.write(Buffer.from('x'));
    while (socket.flushOne());
    // Nothing was credited back: the busy channel sends nothing more while someone types.
    expect(bulkBytes()).toBe(beforeKeystroke);
    // The peer consumed all but 32 KiB: the channel may go on up to the held window, not its whole window.
    socket.emit('message', Buffer.from(JSON.stringify({ t: 'credit', ch: bulk.id, n: beforeKeystroke - 32 * 1024 })), false);
    while (socket.flushOne());
    expect(bulkBytes() - beforeKeystroke).toBeGreaterThan(0);
    expect(bulkBytes() - (beforeKeystroke - 32 * 1024)).toBeLessThanOrEqual(HELD_BULK_WINDOW + MAX_FRAME);
  });

  it('lets a busy channel use its whole window when nobody types', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const bulk = await open('tunnel');
    const before = socket.wire.length;
    bulk.write(Buffer.alloc(4 * 1024 * 1024, 1));
    while (socket.flushOne());
    expect(
      socket.wire
        .slice(before)
        .filter((f) => !f.text)
        .reduce((a, f) => a + f.bytes, 0),
    ).toBe(4 * 1024 * 1024);
  });

  it('keeps at most SEND_IN_FLIGHT_MAX data bytes (and the frame that crossed it) un-flushed in the socket, however much is written', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const bulk = await open('tunnel');
    const before = socket.wire.length;
    bulk.write(Buffer.alloc(4 * 1024 * 1024, 1));
    const handed = socket.wire.slice(before).reduce((a, f) => a + f.bytes, 0);
    expect(handed).toBeGreaterThan(0);
    // Nobody types: the busy channel's frames grow to BULK_FRAME.
    expect(handed).toBeLessThanOrEqual(SEND_IN_FLIGHT_MAX + BULK_FRAME);
    expect(socket.pendingCallbacks).toBeLessThanOrEqual(Math.ceil(SEND_IN_FLIGHT_MAX / MAX_FRAME) + 1);
  });

  it('reports a write done only once the socket has flushed its last frame: the frames are the written buffer, not copies', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const channel = await open('tunnel');
    let done = false;
    channel.write(Buffer.alloc(COPIED_FRAME_MAX + 1, 1), () => (done = true));
    await new Promise((r) => setImmediate(r));
    expect(socket.pendingCallbacks).toBe(1);
    expect(done).toBe(false);
    socket.flushOne();
    await new Promise((r) => setImmediate(r));
    expect(done).toBe(true);
  });

  it('reports a write of several frames done only once all are flushed, though its last frame is small', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const channel = await open('tunnel');
    let done = false;
    // The frames before the last are the written buffer itself: the writer may not have it back before they are flushed.
    channel.write(Buffer.alloc(MAX_FRAME + 10, 1), () => (done = true));
    await new Promise((r) => setImmediate(r));
    expect(socket.pendingCallbacks).toBeGreaterThan(0);
    expect(done).toBe(false);
    while (socket.flushOne()) await new Promise((r) => setImmediate(r));
    expect(done).toBe(true);
  });

  it('sends keystrokes one after another while the socket has not flushed the first: small frames are copied', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const console_ = await open('console');
    const typed = Buffer.from('ab');
    console_.write(typed.subarray(0, 1));
    console_.write(typed.subarray(1, 2));
    await new Promise((r) => setImmediate(r));
    // Neither frame flushed: both are on their way all the same.
    expect(socket.wire.filter((f) => !f.text && f.ch === console_.id).map((f) => f.bytes)).toEqual([1, 1]);
  });

  it('sends a busy channel in BULK_FRAME frames while nobody types, and in MAX_FRAME frames while someone does', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const bulk = await open('tunnel');
    const console_ = await open('console');
    const bulkFrames = () => socket.wire.filter((f) => !f.text && f.ch === bulk.id).map((f) => f.bytes);
    bulk.write(Buffer.alloc(8 * 1024 * 1024, 1));
    for (let i = 0; i < 8; i++) socket.flushOne();
    const idle = bulkFrames();
    expect(Math.max(...idle)).toBe(BULK_FRAME);
    console_.write(Buffer.from('x'));
    socket.emit('message', Buffer.from(JSON.stringify({ t: 'credit', ch: bulk.id, n: idle.reduce((a, b) => a + b, 0) })), false);
    while (socket.flushOne());
    const typing = bulkFrames().slice(idle.length);
    expect(typing.length).toBeGreaterThan(0);
    expect(Math.max(...typing)).toBeLessThanOrEqual(MAX_FRAME);
  });

  it("takes a busy channel's small frame at the start of a new second for the end of a read, not for someone typing: it goes on in BULK_FRAME frames over its whole window", async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    try {
      const socket = new RecordingSocket();
      const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
      const bulk = await open('tunnel');
      const flushAll = async () => {
        do await new Promise((r) => setImmediate(r));
        while (socket.flushOne());
      };
      const bulkFrames = () => socket.wire.filter((f) => !f.text && f.ch === bulk.id).map((f) => f.bytes);
      bulk.write(Buffer.alloc(2 * 1024 * 1024, 1));
      await flushAll();
      const before = bulkFrames().length;
      // A second later the transfer goes on, and its first frame of the new second is small (a read's tail).
      vi.setSystemTime(Date.now() + INTERACTIVE_HOLD_MS + 1);
      bulk.write(Buffer.alloc(100, 1));
      await flushAll();
      bulk.write(Buffer.alloc(2 * 1024 * 1024, 1));
      await flushAll();
      const after = bulkFrames().slice(before);
      expect(after[0]).toBe(100);
      // Not held: all of it sent (nothing was credited back, 4 MiB is within the window), in bulk frames.
      expect(after.reduce((a, b) => a + b, 0)).toBe(2 * 1024 * 1024 + 100);
      expect(Math.max(...after.slice(1))).toBe(BULK_FRAME);
      // Two seconds with nothing sent: the channel is quiet again, and a small frame of its own is someone typing.
      vi.setSystemTime(Date.now() + 2 * INTERACTIVE_HOLD_MS + 1);
      bulk.write(Buffer.alloc(1, 1));
      await flushAll();
      bulk.write(Buffer.alloc(64 * 1024, 1));
      await flushAll();
      // More than HELD_BULK_WINDOW uncredited: the channel is held while someone types.
      expect(bulkFrames().slice(before + after.length)).toEqual([1]);
    } finally {
      vi.useRealTimers();
    }
  });

  it('shares the socket between two bulk channels in turns', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const a = await open('tunnel');
    const b = await open('tunnel');
    const before = socket.wire.length;
    a.write(Buffer.alloc(4 * 1024 * 1024, 1));
    b.write(Buffer.alloc(4 * 1024 * 1024, 2));
    while (socket.flushOne());
    const order = socket.wire
      .slice(before)
      .filter((f) => !f.text)
      .map((f) => f.ch);
    // From b's first frame until one of them runs dry, they take turns frame by frame.
    const start = order.indexOf(b.id);
    const end = Math.min(order.lastIndexOf(a.id), order.lastIndexOf(b.id));
    const both = order.slice(start, end + 1);
    expect(both.length).toBeGreaterThan(20);
    expect(both.filter((ch, i) => i > 0 && ch === both[i - 1])).toEqual([]);
  });

  it('sends eof only after the channel backlog has gone out', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const bulk = await open('tunnel');
    const before = socket.wire.length;
    bulk.end(Buffer.alloc(1024 * 1024, 1));
    while (socket.flushOne()) await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    const after = socket.wire.slice(before);
    expect(after.at(-1)?.text).toEqual({ t: 'eof', ch: bulk.id });
    expect(after.filter((f) => !f.text).reduce((a, f) => a + f.bytes, 0)).toBe(1024 * 1024);
  });
});

describe('mux credit grants', () => {
  it('returns credit for small reads in one frame of its own once nothing was sent for twice SMALL_GRANT_DELAY_MS, not within the turn after their delivery', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 1024 * 1024);
    const channel = await open('console');
    const delivered: number[] = [];
    channel.on('data', (d: Buffer) => delivered.push(d.length));
    await new Promise((r) => setImmediate(r)); // flowing from here on, as the relay's channels are
    const before = socket.wire.length;
    for (let i = 0; i < 10; i++) socket.emit('message', encodeData(channel.id, Buffer.from('k')), true);
    expect(delivered).toHaveLength(10);
    expect(socket.wire.slice(before)).toEqual([]); // nothing on the wire ahead of the delivery
    await new Promise((r) => setImmediate(r));
    expect(socket.wire.slice(before)).toEqual([]); // not a write of its own right behind a keystroke
    socket.emit('message', encodeData(channel.id, Buffer.from('k')), true);
    await new Promise((r) => setTimeout(r, SMALL_GRANT_DELAY_MS + 20));
    expect(socket.wire.slice(before)).toEqual([]); // held, for a data frame of ours to take
    await new Promise((r) => setTimeout(r, SMALL_GRANT_DELAY_MS + 20));
    expect(socket.wire.slice(before).map((f) => f.text)).toEqual([{ t: 'credit', ch: channel.id, n: 11 }]);
  });
});

describe('mux credit rides with data', () => {
  it('sends no credit with the round trips of typing; once SMALL_GRANT_DELAY_MS passed, the next data frame carries all of it, in the same write', async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 1024 * 1024);
    const channel = await open('console');
    channel.on('data', () => undefined);
    await new Promise((r) => setImmediate(r)); // flowing from here on
    const roundTrip = async () => {
      const before = socket.wire.length;
      socket.emit('message', encodeData(channel.id, Buffer.from('k')), true); // a keystroke (or an echo) arrives
      await new Promise((r) => setImmediate(r));
      expect(socket.wire.slice(before)).toEqual([]);
      channel.write(Buffer.from('e')); // the answer to it
      const sent = socket.wire.slice(before);
      while (socket.flushOne());
      return sent;
    };
    for (let i = 0; i < 20; i++) {
      // The code before sent a credit frame with each echo ({ t: 'credit', n: 1 } behind the data frame): 20 here.
      expect(await roundTrip()).toEqual([{ ch: channel.id, bytes: 1 }]);
    }
    await new Promise((r) => setTimeout(r, SMALL_GRANT_DELAY_MS + 20));
    expect(await roundTrip()).toEqual([
      { ch: channel.id, bytes: 1 },
      { ch: channel.id, bytes: 0, text: { t: 'credit', ch: channel.id, n: 21 } },
    ]);
    // Taken by that frame: nothing is owed, and no frame of its own follows.
    const after = socket.wire.length;
    await new Promise((r) => setTimeout(r, 2 * SMALL_GRANT_DELAY_MS + 40));
    expect(socket.wire.slice(after)).toEqual([]);
  });

  it('credits a flood of small frames in batches as it is read: the sender never waits for the fallback, nor exceeds the window', async () => {
    const socket = new RecordingSocket();
    const window = 1024 * 1024;
    const { open } = await brokerMuxOn(socket, window);
    const channel = await open('console');
    let received = 0;
    channel.on('data', (d: Buffer) => (received += d.length));
    await new Promise((r) => setImmediate(r));
    // The peer sends 512-byte frames while it holds credit, for three windows' worth, and never waits on a timer.
    let credit = window;
    let sent = 0;
    let seen = socket.wire.length;
    while (sent < 3 * window) {
      while (credit >= 512 && sent < 3 * window) {
        socket.emit('message', encodeData(channel.id, Buffer.alloc(512, 1)), true);
        credit -= 512;
        sent += 512;
      }
      await new Promise((r) => setImmediate(r));
      const grants = socket.wire.slice(seen).filter((f) => f.text?.t === 'credit');
      seen = socket.wire.length;
      expect(grants.length).toBeGreaterThan(0); // a batch's worth was read: credited at once
      for (const g of grants) credit += (g.text as { n: number }).n;
      expect(credit).toBeLessThanOrEqual(window);
    }
    expect(received).toBe(3 * window);
  });
});

describe('mux data path under tsx', () => {
  it('names no closure per data frame when compiled as tsx compiles it (esbuild keepNames)', () => {
    // tsx (the development broker and agent, and the bench) compiles with keepNames: a closure held in
    // a named const is wrapped in __name(), which defines its `name` property, at every call. The code
    // before did that once per data frame (sendData's `done`), so once per keystroke on each hop.
    const code = transformSync(fs.readFileSync(new URL('./mux.ts', import.meta.url), 'utf8'), { loader: 'ts', keepNames: true }).code;
    const start = code.indexOf('  sendData(');
    const end = code.indexOf('\n  }\n', start);
    expect(start).toBeGreaterThan(0);
    expect(code.slice(start, end)).not.toContain('__name(');
  });
});

describe('mux writes', () => {
  it('frames sent in one turn leave in one write to the socket, and all arrive in order', async () => {
    const p = await pair(async () => {});
    cleanup = p.close;
    const socket = (p.broker.ws as unknown as { _socket: { _writev: (...a: unknown[]) => unknown; _write: (...a: unknown[]) => unknown } })._socket;
    let writes = 0;
    for (const method of ['_writev', '_write'] as const) {
      const original = socket[method].bind(socket);
      socket[method] = (...a: unknown[]) => {
        writes += 1;
        return original(...a);
      };
    }
    const received: unknown[] = [];
    p.agent.on('control', (msg) => received.push(msg));
    for (let i = 0; i < 50; i++) p.broker.send({ t: 'file_refused', id: String(i), error: 'test' });
    await expect.poll(() => received.length, { timeout: 10_000 }).toBe(50);
    // The code before wrote each frame on its own (50 writes).
    expect(writes).toBe(1);
    expect(received.map((m) => (m as { id: string }).id)).toEqual(Array.from({ length: 50 }, (_, i) => String(i)));
  });
});

describe('mux writes of channel opens and closes', () => {
  it('sends the closes of channels destroyed in separate turns of one iteration in one write, and each arrives', async () => {
    const agentChannels: Channel[] = [];
    const p = await pair(async (ch) => {
      agentChannels.push(ch);
    });
    cleanup = p.close;
    const channels = await Promise.all(Array.from({ length: 8 }, () => p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' })));
    const closed = Promise.all(agentChannels.map((ch) => new Promise((r) => ch.once('close', r))));
    const counter = countSocketWrites(p.broker.ws);
    // Each destroyed in an immediate of its own: eight turns of one check phase, as eight sessions'
    // sockets closing in one poll are eight turns. The code before wrote each close at the end of its turn (8 writes).
    await new Promise<void>((resolve) => {
      for (const { channel } of channels) setImmediate(() => channel.destroy());
      setImmediate(resolve);
    });
    await closed;
    expect(counter.writes).toBe(1);
    expect(p.broker.openChannels).toBe(0);
    expect(p.agent.openChannels).toBe(0);
  });

  it("sends the 'opened' of channels set up in separate turns of one iteration in one write", async () => {
    const p = await pair(() => new Promise<void>((resolve) => setImmediate(resolve)));
    cleanup = p.close;
    await p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' });
    const counter = countSocketWrites(p.agent.ws);
    // The eight opens arrive in one read; each set-up ends in an immediate of its own (a connect
    // completing is an I/O callback of its own). The code before answered each in a write (8).
    const opened = await Promise.all(Array.from({ length: 8 }, () => p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' })));
    expect(opened).toHaveLength(8);
    expect(counter.writes).toBe(1);
  });

  it('a keystroke sent after a held close leaves in its own turn, the close with it', async () => {
    const p = await pair(async () => {});
    cleanup = p.close;
    const [{ channel: closing }, { channel: typing }] = await Promise.all([
      p.broker.open('console', { cols: 80, rows: 24 }),
      p.broker.open('console', { cols: 80, rows: 24 }),
    ]);
    const counter = countSocketWrites(p.broker.ws);
    let checkPhase = false;
    setImmediate(() => (checkPhase = true));
    closing.destroy();
    await new Promise((r) => process.nextTick(r));
    // The close is held for the iteration: not written yet.
    expect(counter.writes).toBe(0);
    typing.write(Buffer.from('k'));
    await new Promise((r) => process.nextTick(r));
    // Written at the end of the keystroke's turn, before the loop's check phase, in one write.
    expect(counter.writes).toBe(1);
    expect(checkPhase).toBe(false);
  });

  it('hostile: a peer flooding opens in turns of their own has each refused (held closes included) and is cut after MAX_PROTOCOL_ERRORS', async () => {
    const p = await pair(async () => {});
    cleanup = p.close;
    const refusals: number[] = [];
    const agentWs = p.agent.ws;
    agentWs.on('message', (data, isBinary) => {
      if (isBinary) return;
      const msg = JSON.parse(String(data)) as { t: string; ch: number };
      if (msg.t === 'close') refusals.push(msg.ch);
    });
    const errors: MuxProtocolError[] = [];
    p.broker.on('protocol-error', (e) => errors.push(e));
    // The agent opens channels on the broker, which serves none: each open is refused with a close.
    const open = (i: number) => agentWs.send(JSON.stringify({ t: 'open', ch: 2 * i + 1, kind: 'tunnel', params: { proto: 'tcp', port: 1, dst: 'x' } }));
    for (let i = 0; i < MAX_PROTOCOL_ERRORS; i++) setImmediate(() => open(i));
    await expect.poll(() => refusals.length, { timeout: 10_000 }).toBe(MAX_PROTOCOL_ERRORS);
    expect(p.broker.closeCode).toBeUndefined();
    open(MAX_PROTOCOL_ERRORS);
    await expect.poll(() => p.broker.closeCode, { timeout: 10_000 }).toBe(AgentClose.protocolError);
    expect(errors).toHaveLength(1);
    expect(p.broker.protocolErrors).toBe(MAX_PROTOCOL_ERRORS + 1);
  });
});

/** Counts the writes (write(2)/writev(2) calls through Node) made on a WebSocket's socket from now on. */
function countSocketWrites(ws: WebSocket): { readonly writes: number } {
  const socket = (ws as unknown as { _socket: { _writev: (...a: unknown[]) => unknown; _write: (...a: unknown[]) => unknown } })._socket;
  const counter = { writes: 0 };
  for (const method of ['_writev', '_write'] as const) {
    const original = socket[method].bind(socket);
    socket[method] = (...a: unknown[]) => {
      counter.writes += 1;
      return original(...a);
    };
  }
  return counter;
}

/** Resolves once `channel` has received `n` bytes in all. */
function received(channel: Channel, n: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let got = 0;
  return new Promise((resolve) => {
    const onData = (d: Buffer) => {
      parts.push(Buffer.from(d));
      got += d.length;
      if (got < n) return;
      channel.off('data', onData);
      resolve(Buffer.concat(parts));
    };
    channel.on('data', onData);
  });
}

describe('mux writes of a busy channel', () => {
  it("frames a busy channel's writes of one turn together: one write to the socket, not one per write", async () => {
    let agentChannel: Channel | undefined;
    const p = await pair(
      async (ch) => {
        agentChannel = ch;
      },
      4 * 1024 * 1024,
    );
    cleanup = p.close;
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' });
    await eventuallyTrue(() => agentChannel !== undefined);
    // The channel is busy (more than 64 KiB sent lately): a bulk transfer under way.
    const warm = received(agentChannel!, 256 * 1024);
    channel.write(Buffer.alloc(256 * 1024, 1));
    await warm;
    await new Promise((r) => setImmediate(r));
    const counter = countSocketWrites(p.broker.ws);
    // Four 32 KiB packets in one turn, as ssh2 hands over the packets of one read.
    const packets = [1, 2, 3, 4].map(() => crypto.randomBytes(MAX_FRAME));
    const arrived = received(agentChannel!, 4 * MAX_FRAME);
    for (const packet of packets) channel.write(packet);
    expect((await arrived).equals(Buffer.concat(packets))).toBe(true);
    // The code before took one write at a time, each once the previous one's frame was flushed: 4 writes.
    expect(counter.writes).toBe(1);
  });

  it("sends a keystroke written in the same turn as a busy channel's writes ahead of them, in the call that writes it", async () => {
    const socket = new RecordingSocket();
    const { open } = await brokerMuxOn(socket, 8 * 1024 * 1024);
    const bulk = await open('tunnel');
    const console_ = await open('console');
    bulk.write(Buffer.alloc(256 * 1024, 1));
    while (socket.flushOne()) await new Promise((r) => setImmediate(r));
    socket.emit('message', Buffer.from(JSON.stringify({ t: 'credit', ch: bulk.id, n: 256 * 1024 })), false);
    const before = socket.wire.length;
    bulk.write(Buffer.alloc(MAX_FRAME, 2));
    bulk.write(Buffer.alloc(MAX_FRAME, 3));
    console_.write(Buffer.from('x'));
    // No tick, no timer: the keystroke is on the socket before write() returns, the busy channel's
    // writes held until the turn's end (the code before handed the first of them over first).
    expect(socket.wire.slice(before)).toEqual([{ ch: console_.id, bytes: 1 }]);
    // Within the same turn (before the loop's next phase), the held writes follow (in frames of
    // MAX_FRAME while someone types).
    await new Promise((r) => setImmediate(r));
    const after = socket.wire.slice(before);
    expect(after[0]).toEqual({ ch: console_.id, bytes: 1 });
    expect(after.slice(1).every((f) => f.ch === bulk.id)).toBe(true);
    expect(after.slice(1).reduce((a, f) => a + f.bytes, 0)).toBe(2 * MAX_FRAME);
  });

  it('keeps a busy channel bounded towards a peer that never reads: its window sent, its high-water mark queued, one bulk write in flight', async () => {
    const window = 16 * 1024 * 1024;
    let agentChannel: Channel | undefined;
    const p = await pair(async (ch) => {
      agentChannel = ch;
    }, window);
    cleanup = p.close;
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' });
    await eventuallyTrue(() => agentChannel !== undefined);
    // The agent's end stops reading its socket altogether.
    (p.agent.ws as unknown as { _socket: { pause(): void } })._socket.pause();
    const packet = Buffer.alloc(MAX_FRAME, 7);
    let written = 0;
    let blocked = false;
    const flood = () => {
      while (written < 64 * 1024 * 1024) {
        written += packet.length;
        if (!channel.write(packet)) {
          blocked = true;
          channel.once('drain', () => {
            blocked = false;
            setImmediate(flood);
          });
          return;
        }
      }
    };
    flood();
    // Wait until the writer has been held for a while (counted in turns of the loop, not in time).
    let still = 0;
    let last = -1;
    for (let i = 0; i < 20_000 && still < 200; i++) {
      await new Promise((r) => setImmediate(r));
      const sent = channel.stats.bytesOut;
      still = blocked && sent === last ? still + 1 : 0;
      last = sent;
    }
    expect(blocked).toBe(true);
    expect(channel.stats.bytesOut).toBeLessThanOrEqual(window);
    // Queued in the channel: its high-water mark and one write; unflushed on the socket: one bulk write.
    expect(channel.writableLength).toBeLessThanOrEqual(256 * 1024 + packet.length);
    expect(p.broker.ws.bufferedAmount).toBeLessThanOrEqual(SEND_IN_FLIGHT_MAX + BULK_FRAME + 1024);
    expect(written).toBeLessThan(window + 2 * 1024 * 1024);
  });
});

async function eventuallyTrue(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((r) => setTimeout(r, 5));
}

describe('mux reads into reused buffers (leaseReads)', () => {
  /** Channel data written to a slow Writable, each chunk given back at its write's callback, as a tunnel does. */
  function slowWriter(channel: Channel, got: Buffer[]): void {
    const out = new Writable({
      highWaterMark: 64 * 1024,
      write(chunk: Buffer, _encoding, callback) {
        // The bytes are read a turn later, as a socket's flush would be: a buffer read into early shows.
        setImmediate(() => {
          got.push(Buffer.from(chunk));
          callback();
        });
      },
    });
    channel.takeLeases();
    channel.on('data', (d: Buffer) => {
      if (!out.write(d, channel.leaseOf(d))) channel.pause();
    });
    out.on('drain', () => channel.resume());
  }

  /** A pair whose agent end answers any open by sending `payload` and ending; the broker end reads into reused buffers. */
  async function sendingPair(payload: Buffer): ReturnType<typeof pair> {
    const p = await pair(
      async (ch) => {
        ch.end(payload);
      },
      1024 * 1024,
      true,
    );
    cleanup = p.close;
    return p;
  }

  it("reads the agent's frames at the broker into a few reused buffers, each read into again only once its chunks are written", async () => {
    const payload = crypto.randomBytes(8 * 1024 * 1024);
    const p = await sendingPair(payload);
    const reads = new Set<ArrayBufferLike>();
    (p.broker.ws as unknown as { _socket: NodeJS.EventEmitter })._socket.on('data', (d: Buffer) => reads.add(d.buffer));
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: 'x' });
    const got: Buffer[] = [];
    slowWriter(channel, got);
    await vi.waitFor(() => expect(got.reduce((n, d) => n + d.length, 0)).toBe(payload.length), { timeout: 20_000 });
    expect(Buffer.concat(got).equals(payload)).toBe(true);
    // Node's own reads: a fresh 64 KiB buffer each, at least 128 for 8 MiB.
    expect(reads.size).toBeLessThanOrEqual(16);
  });

  it('hands a channel that does not take leases copies, which later reads leave unchanged', async () => {
    const payload = crypto.randomBytes(4 * 1024 * 1024);
    const p = await sendingPair(payload);
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    const kept: Buffer[] = [];
    channel.on('data', (d: Buffer) => kept.push(d));
    await new Promise((r) => channel.once('end', r));
    expect(Buffer.concat(kept).equals(payload)).toBe(true);
  });
});
