import crypto from 'node:crypto';
import net from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Channel, DEFAULT_WINDOW, type ChannelHost } from '../../shared/mux-channel.js';
import type { TunnelParams } from '../../shared/protocol.js';
import { BULK_READ_SIZE, FIRST_READ_SIZE, SHARED_FIRST_READS, sharedFirstReads } from '../../shared/read-buffers.js';
import { muxPair } from '../../test/support/mux-pair.js';
import { openTcpTunnel } from './tunnel.js';

/**
 * A channel whose mux is this test: frames are recorded, flushed at once, and sent only when `pump` is
 * called. A frame spanning several writes (the channel gathers those queued together) is recorded as
 * its parts, one per write: what the target's reads were is what `frames` shows.
 */
function testChannel(): { channel: Channel; frames: Buffer[]; pump: () => void } {
  const frames: Buffer[] = [];
  let waiting: Channel | undefined;
  const host: ChannelHost = {
    send: () => {},
    sendData: (_ch, payload, flushed) => {
      for (const part of Buffer.isBuffer(payload) ? [payload] : payload) frames.push(Buffer.from(part));
      flushed?.();
    },
    schedule: (c) => (waiting = c),
    forget: () => {},
  };
  const params: TunnelParams = { proto: 'tcp', port: 1, dst: '127.0.0.1' };
  const channel = new Channel(host, 1, 'tunnel', params, DEFAULT_WINDOW);
  // Frames as large as the channel has: each write whole.
  const pump = () => {
    while (waiting && waiting.sendFrame(Number.MAX_SAFE_INTEGER) > 0);
  };
  return { channel, frames, pump };
}

/** A target that sends `send` to its one connection (and counts what it could hand its socket). */
async function target(send: (socket: net.Socket) => void): Promise<{ port: number; close: () => void }> {
  const server = net.createServer((socket) => {
    socket.on('error', () => {});
    send(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as net.AddressInfo).port, close: () => server.close() };
}

const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup.splice(0)) c();
});

const ctx = { stateDir: '/nonexistent', log: () => {} };

describe('TCP tunnel, from the target', () => {
  it('reads the target in reads larger than Node’s 64 KiB and delivers every byte in order, then the end', async () => {
    const payload = crypto.randomBytes(4 * 1024 * 1024);
    const t = await target((socket) => socket.end(payload));
    cleanup.push(t.close);
    const { channel, frames, pump } = testChannel();
    cleanup.push(() => channel.destroy());
    const ended = new Promise<void>((resolve) => channel.once('finish', resolve));
    await openTcpTunnel(channel, { proto: 'tcp', port: t.port, dst: '127.0.0.1' }, ctx);
    // The peer takes every frame at once: what it was sent is credited back, and the next frames go.
    let granted = 0;
    const timer = setInterval(() => {
      pump();
      const sent = frames.reduce((n, f) => n + f.length, 0);
      if (sent > granted) channel.onCredit(sent - granted);
      granted = sent;
    }, 1);
    cleanup.push(() => clearInterval(timer));
    await ended;
    await vi.waitFor(() => expect(frames.reduce((n, f) => n + f.length, 0)).toBe(payload.length));
    expect(Buffer.concat(frames).equals(payload)).toBe(true);
    expect(Math.max(...frames.map((f) => f.length))).toBeGreaterThan(64 * 1024);
    expect(Math.max(...frames.map((f) => f.length))).toBeLessThanOrEqual(BULK_READ_SIZE);
  });

  it('stops reading a target whose bytes the peer never takes: what the agent holds stays bounded', async () => {
    let blocked = false;
    const t = await target((socket) => {
      const block = Buffer.alloc(1024 * 1024);
      const pump = () => {
        for (;;) if (!socket.write(block)) return void ((blocked = true), socket.once('drain', pump));
      };
      pump();
    });
    cleanup.push(t.close);
    const { channel, frames, pump } = testChannel();
    cleanup.push(() => channel.destroy());
    await openTcpTunnel(channel, { proto: 'tcp', port: t.port, dst: '127.0.0.1' }, ctx);
    const timer = setInterval(pump, 1);
    cleanup.push(() => clearInterval(timer));
    // The peer grants no credit: once the window is spent, the channel fills and the socket pauses,
    // and the target's writes back up into the kernel and then its own buffer.
    await vi.waitFor(() => expect(frames.reduce((n, f) => n + f.length, 0)).toBe(DEFAULT_WINDOW), { timeout: 20_000 });
    // The channel fills to its high-water mark, the socket pauses, and the target's writes stop.
    await vi.waitFor(() => expect(blocked && channel.writableLength >= channel.writableHighWaterMark).toBe(true), { timeout: 20_000 });
    await new Promise((resolve) => setTimeout(resolve, 200));
    // Past the window: at most the channel's high-water mark and the read that crossed it.
    expect(channel.writableLength).toBeLessThanOrEqual(channel.writableHighWaterMark + BULK_READ_SIZE);
    expect(frames.reduce((n, f) => n + f.length, 0)).toBe(DEFAULT_WINDOW);
  });
});

describe('TCP tunnel read buffers', () => {
  it('a tunnel that carries little reads it into small buffers only', async () => {
    const t = await target((socket) => socket.end('HTTP/1.1 204 No Content\r\n\r\n'));
    cleanup.push(t.close);
    const { channel, frames, pump } = testChannel();
    cleanup.push(() => channel.destroy());
    sharedFirstReads.clear(); // this tunnel allocates its own
    const allocated: number[] = [];
    const allocUnsafeSlow = Buffer.allocUnsafeSlow;
    const spy = vi.spyOn(Buffer, 'allocUnsafeSlow').mockImplementation((n: number) => (allocated.push(n), allocUnsafeSlow(n)));
    cleanup.push(() => spy.mockRestore());
    const ended = new Promise<void>((resolve) => channel.once('finish', resolve));
    await openTcpTunnel(channel, { proto: 'tcp', port: t.port, dst: '127.0.0.1' }, ctx);
    const timer = setInterval(pump, 1);
    cleanup.push(() => clearInterval(timer));
    await ended;
    expect(Buffer.concat(frames).toString()).toBe('HTTP/1.1 204 No Content\r\n\r\n');
    expect(allocated.length).toBeGreaterThan(0);
    expect(Math.max(...allocated)).toBe(FIRST_READ_SIZE);
  });
});

describe('TCP tunnel first read buffers, tunnel after tunnel', () => {
  /** Opens `n` tunnels to `port`, `together` at a time, each closed by the broker once open; resolves when every target socket closed. */
  async function openAndClose(port: number, n: number, together: number, closedOnAgent: () => number) {
    const p = await muxPair((channel) => openTcpTunnel(channel, channel.params as TunnelParams, ctx), DEFAULT_WINDOW, true);
    cleanup.push(p.close);
    for (let done = 0; done < n; done += together) {
      const opened = await Promise.all(Array.from({ length: together }, () => p.broker.open('tunnel', { proto: 'tcp', port, dst: '127.0.0.1' })));
      for (const { channel } of opened) channel.destroy();
      await vi.waitFor(() => expect(closedOnAgent()).toBe(done + together));
    }
  }

  it('tunnels opened and closed without a byte allocate a first read buffer for the first group only', async () => {
    let closed = 0;
    const t = await target((socket) => socket.on('close', () => closed++));
    cleanup.push(t.close);
    sharedFirstReads.clear();
    const allocUnsafeSlow = Buffer.allocUnsafeSlow;
    let allocated = 0;
    const spy = vi.spyOn(Buffer, 'allocUnsafeSlow').mockImplementation((n: number) => (n === FIRST_READ_SIZE && allocated++, allocUnsafeSlow(n)));
    cleanup.push(() => spy.mockRestore());
    await openAndClose(t.port, 64, 8, () => closed);
    // One each before (64): now the first group's eight, reused by every group after.
    expect(allocated).toBeLessThanOrEqual(8 + 1);
  });

  it('a tunnel’s first read buffer, used by an earlier tunnel, carries none of its bytes', async () => {
    sharedFirstReads.clear();
    const secret = Buffer.alloc(FIRST_READ_SIZE - 1, 's');
    const first = await target((socket) => socket.end(secret));
    cleanup.push(first.close);
    const a = testChannel();
    const aEnded = new Promise<void>((resolve) => a.channel.once('finish', resolve));
    await openTcpTunnel(a.channel, { proto: 'tcp', port: first.port, dst: '127.0.0.1' }, ctx);
    const aTimer = setInterval(a.pump, 1);
    cleanup.push(() => clearInterval(aTimer));
    await aEnded;
    a.channel.destroy();
    await vi.waitFor(() => expect(sharedFirstReads.size).toBeGreaterThan(0));
    const second = await target((socket) => socket.end('ok'));
    cleanup.push(second.close);
    const b = testChannel();
    cleanup.push(() => b.channel.destroy());
    const bEnded = new Promise<void>((resolve) => b.channel.once('finish', resolve));
    await openTcpTunnel(b.channel, { proto: 'tcp', port: second.port, dst: '127.0.0.1' }, ctx);
    const bTimer = setInterval(b.pump, 1);
    cleanup.push(() => clearInterval(bTimer));
    await bEnded;
    expect(Buffer.concat(a.frames).equals(secret)).toBe(true);
    expect(Buffer.concat(b.frames).toString()).toBe('ok');
  });

  it('a flood of tunnels opened at once then closed leaves at most SHARED_FIRST_READS buffers pooled', async () => {
    let closed = 0;
    const t = await target((socket) => socket.on('close', () => closed++));
    cleanup.push(t.close);
    sharedFirstReads.clear();
    await openAndClose(t.port, 200, 200, () => closed);
    await vi.waitFor(() => expect(sharedFirstReads.size).toBe(SHARED_FIRST_READS));
  });
});

describe('TCP tunnel, to the target', () => {
  it('a target that never reads holds the peer at the window: what the agent holds stays bounded', async () => {
    const t = await target((socket) => socket.pause());
    cleanup.push(t.close);
    let credit = DEFAULT_WINDOW;
    const host: ChannelHost = {
      send: (msg) => {
        if (msg.t === 'credit') credit += msg.n;
      },
      sendData: (_ch, _payload, flushed) => flushed?.(),
      schedule: () => {},
      forget: () => {},
    };
    const channel = new Channel(host, 1, 'tunnel', { proto: 'tcp', port: t.port, dst: '127.0.0.1' }, DEFAULT_WINDOW);
    cleanup.push(() => channel.destroy());
    let agentSocket: net.Socket | undefined;
    const connect = net.connect;
    const spy = vi
      .spyOn(net, 'connect')
      .mockImplementation(((...args: Parameters<typeof net.connect>) => (agentSocket = connect(...args))) as typeof net.connect);
    cleanup.push(() => spy.mockRestore());
    await openTcpTunnel(channel, { proto: 'tcp', port: t.port, dst: '127.0.0.1' }, ctx);
    const frame = Buffer.alloc(128 * 1024);
    // The broker sends while it holds credit; the kernel's buffers fill, then the agent's, then credit stops.
    let sent = 0;
    let idleTurns = 0;
    for (let turns = 0; turns < 20_000 && idleTurns < 200; turns++) {
      if (credit >= frame.length) {
        channel.onData(frame);
        credit -= frame.length;
        sent += frame.length;
        idleTurns = 0;
      } else idleTurns++;
      await new Promise((resolve) => setImmediate(resolve));
    }
    expect(idleTurns).toBe(200);
    expect(sent).toBeLessThan(256 * 1024 * 1024);
    // Held by the agent: the channel's window unread, and the socket's high-water mark and the frame that crossed it.
    expect(channel.readableLength).toBeLessThanOrEqual(DEFAULT_WINDOW);
    expect(agentSocket?.writableLength).toBeLessThanOrEqual((agentSocket?.writableHighWaterMark ?? 0) + frame.length);
  });
});

describe('TCP tunnel over the agent link', () => {
  /** A target that keeps every byte it reads (or reads nothing, `paused`). */
  async function sink(paused = false): Promise<{ port: number; got: Buffer[]; close: () => void }> {
    const got: Buffer[] = [];
    const t = await target((socket) => (paused ? socket.pause() : socket.on('data', (d: Buffer) => got.push(d))));
    return { ...t, got };
  }

  it('reads the link into a few reused buffers, each read into again only once the target has its bytes', async () => {
    const s = await sink();
    cleanup.push(s.close);
    const p = await muxPair((channel) => openTcpTunnel(channel, channel.params as TunnelParams, ctx), DEFAULT_WINDOW, true);
    cleanup.push(p.close);
    const reads = new Set<ArrayBufferLike>();
    let readCount = 0;
    (p.agent.ws as unknown as { _socket: net.Socket })._socket.on('data', (d: Buffer) => {
      readCount += 1;
      reads.add(d.buffer);
    });
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: s.port, dst: '127.0.0.1' });
    const payload = crypto.randomBytes(8 * 1024 * 1024);
    for (let at = 0; at < payload.length; at += 256 * 1024) channel.write(payload.subarray(at, at + 256 * 1024));
    await vi.waitFor(() => expect(s.got.reduce((n, d) => n + d.length, 0)).toBe(payload.length), { timeout: 20_000 });
    // Every byte as sent: no buffer was read into while the target's write of a view of it was out.
    expect(Buffer.concat(s.got).equals(payload)).toBe(true);
    // Node's own reads: a fresh 64 KiB buffer each, at least 128 for 8 MiB.
    expect(readCount).toBeGreaterThan(0);
    expect(reads.size).toBeLessThanOrEqual(16);
  });

  it('a reader that never reads holds the link’s reads to the window: small pieces are copied, not held in whole buffers', async () => {
    const window = 256 * 1024;
    let agentChannel: Channel | undefined;
    const p = await muxPair(
      async (channel) => {
        agentChannel = channel;
        channel.takeLeases();
        channel.pause();
      },
      window,
      true,
    );
    cleanup.push(p.close);
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: 1, dst: '127.0.0.1' });
    // A bulk start (the link's reads move to 256 KiB), then 1 KiB frames, each sent once the last
    // has arrived (a read each), until the credit is spent.
    const arrived = async (n: number) => {
      while ((agentChannel?.readableLength ?? 0) < n) await new Promise((r) => setImmediate(r));
    };
    channel.write(crypto.randomBytes(window / 2));
    await arrived(window / 2);
    for (let sent = window / 2; sent < window; sent += 1024) {
      channel.write(crypto.randomBytes(1024));
      await arrived(sent + 1024);
    }
    channel.write(crypto.randomBytes(64 * 1024));
    await new Promise((r) => setTimeout(r, 50));
    // The broker is held at the window: the rest waits in its channel.
    expect(channel.uncredited).toBe(window);
    expect(agentChannel?.readableLength).toBe(window);
    // What the agent holds: the window's bytes, in buffers at most four times as large (a piece is a
    // view of its read only when it is a quarter of the read or more), not a 256 KiB read per frame.
    const held: Buffer[] = [];
    let heldLength = 0;
    agentChannel?.on('data', (d: Buffer) => {
      if (heldLength < window) held.push(d);
      heldLength += d.length;
    });
    agentChannel?.resume();
    await vi.waitFor(() => expect(heldLength).toBeGreaterThanOrEqual(window));
    const buffers = new Set(held.map((b) => b.buffer));
    expect(held.reduce((n, b) => n + b.length, 0)).toBe(window);
    expect([...buffers].reduce((n, b) => n + b.byteLength, 0)).toBeLessThanOrEqual(4 * window);
  });
});
