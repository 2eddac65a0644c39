import crypto from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { muxPair } from '../test/support/mux-pair.js';
import { Channel, COPIED_FRAME_MAX, DEFAULT_WINDOW, type ChannelHost, type FramePayload, type WireMessage } from './mux-channel.js';
import { HELD_BULK_WINDOW, SEND_IN_FLIGHT_MAX, SendScheduler } from './mux-scheduler.js';

let cleanup: (() => void) | undefined;
afterEach(() => {
  cleanup?.();
  cleanup = undefined;
});

const bytesOf = (f: FramePayload) => (Buffer.isBuffer(f) ? f : Buffer.concat(f));
const tick = () => new Promise<void>((resolve) => process.nextTick(resolve));
const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Channels on a host that is a mux without its socket: the real scheduler, each data frame recorded
 * (a copy of its bytes, and the payload itself) and counted in flight until flushed. Flushes are
 * immediate, or held until `flush` with `holdFlushes` (a socket that does not drain). `fast: false`
 * is a host without `sendAtOnce`: every write takes its turn, as before the fast path.
 */
function schedulerHost(options: { holdFlushes?: boolean; fast?: boolean } = {}) {
  const frames: { ch: number; bytes: Buffer; payload: FramePayload }[] = [];
  const controls: WireMessage[] = [];
  const held: (() => void)[] = [];
  const channels = new Map<number, Channel>();
  const scheduler = new SendScheduler({ isClosed: () => false, channels: () => channels.values() });
  const host: ChannelHost = {
    send: (msg) => controls.push(msg),
    sendData: vi.fn((ch: number, payload: FramePayload, flushed?: () => void) => {
      const bytes = Buffer.from(bytesOf(payload));
      frames.push({ ch, bytes, payload });
      scheduler.sent(bytes.length);
      const done = () => {
        scheduler.flushed(bytes.length);
        flushed?.();
      };
      if (options.holdFlushes) held.push(done);
      else done();
    }),
    schedule: (c) => scheduler.schedule(c),
    forget: (id) => {
      const c = channels.get(id);
      if (c) scheduler.forget(c);
      channels.delete(id);
    },
  };
  if (options.fast !== false) host.sendAtOnce = (c, chunk) => scheduler.sendAtOnce(c, chunk);
  const open = (id: number, window = DEFAULT_WINDOW) => {
    const channel = new Channel(host, id, 'console', { cols: 80, rows: 24 }, window);
    channels.set(id, channel);
    return channel;
  };
  return {
    host,
    open,
    frames,
    controls,
    /** The bytes sent on channel `ch`, in order. */
    sentOn: (ch: number) => Buffer.concat(frames.filter((f) => f.ch === ch).map((f) => f.bytes)),
    flush: (count = held.length) => {
      for (const done of held.splice(0, count)) done();
    },
  };
}

describe("a quiet channel's lone small write", () => {
  it('is framed and handed to the mux inside write(), past Writable and `_write`, as a copy; its callback runs on the next tick', async () => {
    const h = schedulerHost();
    const channel = h.open(1);
    const _write = vi.spyOn(channel, '_write');
    const keystroke = Buffer.from('a');
    const done = vi.fn();
    expect(channel.write(keystroke, done)).toBe(true);
    // Sent within the call, and the stream never saw it (the code before went through `_write`).
    expect(h.frames.length).toBe(1);
    expect(_write).not.toHaveBeenCalled();
    expect(h.frames[0].bytes.toString()).toBe('a');
    expect(h.frames[0].payload).not.toBe(keystroke); // a copy: the writer may reuse its buffer at the callback
    expect(channel.writableLength).toBe(0);
    // Asynchronous, as Writable calls a write's callback: not within write().
    expect(done).not.toHaveBeenCalled();
    await tick();
    expect(done).toHaveBeenCalledWith(null);
  });

  it('takes the encoding form of write() too, and only buffers: a string goes through the stream', async () => {
    const h = schedulerHost();
    const channel = h.open(1);
    const _write = vi.spyOn(channel, '_write');
    const done = vi.fn();
    channel.write(Buffer.from('x'), 'utf8', done);
    expect(_write).not.toHaveBeenCalled();
    await tick();
    expect(done).toHaveBeenCalledTimes(1);
    channel.write('y');
    expect(_write).toHaveBeenCalledTimes(1);
    expect(h.sentOn(1).toString()).toBe('xy');
  });

  it('accounts exactly as the stream path does: credit, bytes out, how busy the channel is, the ripe grant riding along', async () => {
    const run = async (fast: boolean) => {
      const h = schedulerHost({ fast });
      const channel = h.open(1, 64 * 1024);
      const sizes = [1, 3, 1, 200, 1, 5000, 1, 1];
      for (const n of sizes) {
        channel.write(crypto.randomBytes(n));
        await turn();
      }
      return { uncredited: channel.uncredited, stats: { ...channel.stats }, quiet: channel.quiet, frames: h.frames.map((f) => f.bytes.length) };
    };
    const viaStream = await run(false);
    const atOnce = await run(true);
    expect(atOnce).toEqual(viaStream);
    expect(atOnce.uncredited).toBe(5208);
  });

  it('carries credit owed for little reads once it is ripe, in the same turn as the keystroke', async () => {
    const h = schedulerHost();
    const channel = h.open(1);
    channel.on('data', () => {});
    await turn(); // flowing
    channel.onData(Buffer.from('echo'));
    await turn();
    expect(channel.readableLength).toBe(0);
    expect(h.controls).toEqual([]);
    // Held SMALL_GRANT_DELAY_MS: its timer's end, brought forward (the channel's own step).
    const grants = channel as unknown as { stopGrantTimer(): void; ripen(): void };
    grants.stopGrantTimer();
    grants.ripen();
    const _write = vi.spyOn(channel, '_write');
    channel.write(Buffer.from('k'));
    expect(_write).not.toHaveBeenCalled();
    expect(h.controls).toEqual([{ t: 'credit', ch: 1, n: 4 }]);
    channel.destroy();
  });

  it('holds the busy channels to HELD_BULK_WINDOW, as a keystroke taking its turn does', async () => {
    const h = schedulerHost();
    const bulk = h.open(2);
    const typing = h.open(1);
    bulk.write(crypto.randomBytes(HELD_BULK_WINDOW + 1));
    await turn();
    const before = h.sentOn(2).length;
    expect(before).toBe(HELD_BULK_WINDOW + 1);
    const _write = vi.spyOn(typing, '_write');
    typing.write(Buffer.from('k'));
    expect(_write).not.toHaveBeenCalled();
    // The bulk channel has credit for more, but is held while someone types.
    bulk.write(crypto.randomBytes(64 * 1024));
    await turn();
    expect(h.sentOn(2).length).toBe(before);
  });
});

describe('every other write goes through the stream, in order', () => {
  it('a small write behind a pending bulk write waits for it, and leaves after it', async () => {
    const h = schedulerHost({ holdFlushes: true });
    const channel = h.open(1);
    const bulk = crypto.randomBytes(COPIED_FRAME_MAX + 1); // not copied: done once flushed
    channel.write(bulk);
    expect(h.frames.length).toBe(1);
    const _write = vi.spyOn(channel, '_write');
    const _writev = vi.spyOn(channel, '_writev');
    channel.write(Buffer.from('k'));
    // Queued in the stream, behind the bulk write not yet flushed.
    expect(h.frames.length).toBe(1);
    expect(channel.writableLength).toBe(bulk.length + 1);
    h.flush();
    await turn();
    expect(_write.mock.calls.length + _writev.mock.calls.length).toBe(1);
    expect(h.sentOn(1).equals(Buffer.concat([bulk, Buffer.from('k')]))).toBe(true);
  });

  it('a corked channel keeps its write until uncorked', () => {
    const h = schedulerHost();
    const channel = h.open(1);
    channel.cork();
    channel.write(Buffer.from('a'));
    expect(h.frames.length).toBe(0);
    channel.uncork();
    expect(h.sentOn(1).toString()).toBe('a');
  });

  it('a write larger than COPIED_FRAME_MAX, an empty one, or one on a busy channel takes its turn', () => {
    const h = schedulerHost();
    const channel = h.open(1);
    const _write = vi.spyOn(channel, '_write');
    channel.write(crypto.randomBytes(COPIED_FRAME_MAX + 1));
    expect(_write).toHaveBeenCalledTimes(1);
    channel.write(Buffer.alloc(0));
    expect(_write).toHaveBeenCalledTimes(2);
    // More than the quiet bytes sent lately: the channel is busy, its writes are held for the turn.
    const busy = h.open(2);
    busy.write(crypto.randomBytes(100 * 1024));
    const busyWrite = vi.spyOn(busy, '_write');
    const busyWritev = vi.spyOn(busy, '_writev');
    busy.write(Buffer.from('k'));
    expect(busy.writableLength).toBe(1);
    expect(busyWrite.mock.calls.length + busyWritev.mock.calls.length).toBe(0);
  });

  it('a write while another channel waits in the scheduler takes its turn (first among the busy, as before)', () => {
    const h = schedulerHost({ holdFlushes: true });
    const bulk = h.open(2);
    const typing = h.open(1);
    bulk.write(crypto.randomBytes(2 * SEND_IN_FLIGHT_MAX)); // fills what may be in flight; the rest waits
    const framesBefore = h.frames.length;
    const _write = vi.spyOn(typing, '_write');
    typing.write(Buffer.from('k'));
    expect(_write).toHaveBeenCalledTimes(1);
    expect(h.frames.length).toBe(framesBefore);
    h.flush();
    // The keystroke is the next frame out.
    expect(h.frames[framesBefore].ch).toBe(1);
  });

  it('a write with too little credit takes its turn: the part the credit covers goes, the rest waits for a grant', () => {
    const h = schedulerHost();
    const channel = h.open(1, 1000);
    const _write = vi.spyOn(channel, '_write');
    channel.write(crypto.randomBytes(600));
    expect(_write).not.toHaveBeenCalled();
    channel.write(crypto.randomBytes(600));
    expect(_write).toHaveBeenCalledTimes(1);
    expect(h.sentOn(1).length).toBe(1000);
    channel.onCredit(600);
    expect(h.sentOn(1).length).toBe(1200);
  });

  it('end() after a write sent at once: the data, then the end; the callback before finish', async () => {
    const h = schedulerHost();
    const channel = h.open(1);
    const order: string[] = [];
    channel.write(Buffer.from('a'), () => order.push('write'));
    channel.end(() => order.push('finish'));
    await turn();
    expect(order).toEqual(['write', 'finish']);
    expect(h.frames.length).toBe(1);
    expect(h.controls).toEqual([{ t: 'eof', ch: 1 }]);
  });
});

describe('a peer that never grants credit while the user floods keystrokes', () => {
  it('the writes at once stop at the credit; later ones queue in the stream, which says "wait" at its high-water mark', () => {
    const window = 4096;
    const h = schedulerHost();
    const channel = h.open(1, window);
    let writes = 0;
    while (channel.write(Buffer.from('k'))) {
      writes++;
      if (writes > 10_000_000) throw new Error('never said wait');
    }
    expect(h.sentOn(1).length).toBe(window);
    expect(channel.writableLength).toBe(channel.writableHighWaterMark);
    expect(channel.uncredited).toBe(window);
  });

  it('over a real connection: the device reads nothing, the broker stops at the window plus the high-water mark', async () => {
    let device: Channel | undefined;
    const window = 64 * 1024;
    const p = await muxPair(async (ch) => {
      device = ch;
      ch.pause(); // never reads, so never grants
    }, window);
    cleanup = p.close;
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    let written = 0;
    for (;;) {
      written += 1;
      if (!channel.write(Buffer.from([written & 0x7f]))) break;
      if (written > 10_000_000) throw new Error('never said wait');
    }
    expect(written).toBeLessThanOrEqual(window + channel.writableHighWaterMark);
    await vi.waitFor(() => expect(device!.stats.bytesIn).toBe(window));
    expect(channel.uncredited).toBe(window);
    expect(channel.writableLength).toBe(written - window);
  });
});

describe('over a real connection', () => {
  it('keystrokes at once and queued writes of every size arrive whole and in order', async () => {
    const received: Buffer[] = [];
    let ended!: () => void;
    const done = new Promise<void>((r) => (ended = r));
    const p = await muxPair(async (ch) => {
      ch.on('data', (d: Buffer) => received.push(Buffer.from(d)));
      ch.on('end', () => ended());
    });
    cleanup = p.close;
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    const sendData = vi.spyOn(p.broker, 'sendData');
    const _write = vi.spyOn(channel, '_write');
    const sizes = [1, 1, 3, 40_000, 1, 2, 17_000, 1, 1, 1, 500, 300_000, 1, 1];
    const written: Buffer[] = [];
    for (const [i, n] of sizes.entries()) {
      const b = crypto.randomBytes(n);
      written.push(b);
      channel.write(b);
      if (i % 3 === 0) await turn();
    }
    channel.end();
    await done;
    expect(Buffer.concat(received).equals(Buffer.concat(written))).toBe(true);
    // Some went at once, some through the stream.
    expect(_write.mock.calls.length).toBeGreaterThan(0);
    expect(_write.mock.calls.length).toBeLessThan(sizes.length - 4);
    expect(sendData.mock.calls.length).toBeGreaterThan(_write.mock.calls.length);
  });

  it('a keystroke to a device that echoes goes at once both ways', async () => {
    let deviceWrite: ReturnType<typeof vi.spyOn> | undefined;
    const p = await muxPair(async (ch) => {
      deviceWrite = vi.spyOn(ch, '_write');
      ch.on('data', (d: Buffer) => ch.write(d));
    });
    cleanup = p.close;
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    const _write = vi.spyOn(channel, '_write');
    for (const key of 'hello') {
      const echo = new Promise<Buffer>((r) => channel.once('data', r));
      channel.write(Buffer.from(key));
      expect((await echo).toString()).toBe(key);
    }
    expect(_write).not.toHaveBeenCalled();
    expect(deviceWrite).not.toHaveBeenCalled();
  });
});

describe("a data frame for the channel's reader (Readable's semantics, which a read taken past push would have to keep)", () => {
  const flowing = async () => {
    const h = schedulerHost();
    const channel = h.open(1);
    const got: Buffer[] = [];
    channel.on('data', (d: Buffer) => got.push(d));
    await turn();
    return { h, channel, got };
  };

  it('a paused reader has it buffered, and read() or resume() hands it over, in order', async () => {
    const { channel, got } = await flowing();
    channel.pause();
    channel.onData(Buffer.from('a'));
    channel.onData(Buffer.from('b'));
    expect(got).toEqual([]);
    expect(channel.readableLength).toBe(2);
    channel.resume();
    channel.onData(Buffer.from('c')); // behind the two buffered: pushed, not emitted ahead of them
    expect(got.map(String).join('')).toBe('');
    await turn();
    expect(got.map(String).join('')).toBe('abc');
    channel.onData(Buffer.from('d'));
    expect(got.map(String).join('')).toBe('abcd');
  });

  it("a reader in paused mode ('readable', read()) reads every byte", async () => {
    const h = schedulerHost();
    const channel = h.open(1);
    const got: string[] = [];
    channel.on('readable', () => {
      let chunk: Buffer | null;
      while ((chunk = channel.read() as Buffer | null) !== null) got.push(String(chunk));
    });
    const push = vi.spyOn(channel, 'push');
    channel.onData(Buffer.from('x'));
    channel.onData(Buffer.from('y'));
    await turn();
    expect(push).toHaveBeenCalledTimes(2);
    expect(got.join('')).toBe('xy');
  });

  it("'end' comes after all the data", async () => {
    const { channel } = await flowing();
    const events: string[] = [];
    channel.on('data', (d: Buffer) => events.push(String(d)));
    channel.on('end', () => events.push('end'));
    channel.onData(Buffer.from('1'));
    channel.onData(Buffer.from('2'));
    channel.onEof();
    await turn();
    expect(events).toEqual(['1', '2', 'end']);
  });

  it("data after the peer's end is not emitted: the channel fails, as a push after EOF fails it", async () => {
    const { channel, got } = await flowing();
    channel.onData(Buffer.from('1'));
    channel.onEof();
    channel.onData(Buffer.from('2'));
    await turn();
    expect(got.map(String)).toEqual(['1']);
    expect(channel.destroyed).toBe(true);
    expect(channel.errored).toBeTruthy();
  });

  it('a decoder (setEncoding) still gets strings, through push', async () => {
    const h = schedulerHost();
    const channel = h.open(1);
    channel.setEncoding('utf8');
    const got: unknown[] = [];
    channel.on('data', (d) => got.push(d));
    await turn();
    const euro = Buffer.from('€');
    channel.onData(euro.subarray(0, 1));
    channel.onData(euro.subarray(1));
    expect(got).toEqual(['€']);
  });

  it('pipe to a slow writer: back-pressure pauses the channel, every byte arrives in order, then the end', async () => {
    const h = schedulerHost();
    const channel = h.open(1);
    const written: Buffer[] = [];
    const pending: (() => void)[] = [];
    const { Writable } = await import('node:stream');
    const sink = new Writable({
      highWaterMark: 2,
      write: (chunk: Buffer, _e, cb) => {
        written.push(chunk);
        pending.push(() => cb());
      },
    });
    const finished = new Promise((r) => sink.once('finish', r));
    channel.pipe(sink);
    await turn();
    const sent = [...'abcdefghij'].map((c) => Buffer.from(c));
    for (const b of sent) channel.onData(b);
    channel.onEof();
    // The writer has taken one and holds the rest: the channel was paused and buffers them.
    expect(channel.isPaused() || channel.readableLength > 0).toBe(true);
    while (!sink.writableFinished) {
      for (const done of pending.splice(0)) done();
      await turn();
    }
    await finished;
    expect(Buffer.concat(written).toString()).toBe('abcdefghij');
  });

  it('returns credit exactly as before: a batch at once, little reads held', async () => {
    const { h, channel } = await flowing();
    channel.onData(Buffer.alloc(DEFAULT_WINDOW / 8));
    expect(h.controls).toEqual([{ t: 'credit', ch: 1, n: DEFAULT_WINDOW / 8 }]);
    channel.onData(Buffer.from('k'));
    expect(h.controls.length).toBe(1);
    channel.destroy();
  });
});
