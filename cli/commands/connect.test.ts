import crypto from 'node:crypto';
import { EventEmitter } from 'node:events';
import net, { type AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it, vi } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { tcpPair } from '../../test/support/tcp-pair.js';
import { BULK_READ_SIZE, FIRST_READ_SIZE, sharedFirstReads } from '../../shared/read-buffers.js';
import { RemoteSession } from '../remote.js';
import { bridge, listenTcp, type BridgedSession } from './connect.js';

/** A tunnel session as the bridge sees it: the test emits the broker's bytes. */
class FakeSession extends EventEmitter {
  sendOwned = () => true;
  control = () => {};
  pause = () => {};
  resume = () => {};
  readPieces = () => ({ start: () => this });
}

let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

describe('fleet connect bridging a tunnel to a local socket', () => {
  it('writes the pieces that arrive in one turn (one read from the broker) in one system call', async () => {
    const p = await tcpPair();
    cleanup = p.close;
    const session = new FakeSession();
    bridge(session as unknown as BridgedSession, new PassThrough(), p.client, () => {});
    // The end of one frame and two whole ones, as one 64 KiB read from the broker brings them.
    const pieces = [Buffer.alloc(1000, 1), Buffer.alloc(30_000, 2), Buffer.alloc(20_000, 3)];
    for (const piece of pieces) session.emit('data', piece);
    await p.receivedBytes(51_000);
    expect(p.calls).toEqual([3]);
    expect(Buffer.concat(p.received).equals(Buffer.concat(pieces))).toBe(true);
  });

  it('waits once for a full output, however many pieces one read from the broker brings after it filled', async () => {
    const session = new FakeSession();
    let resumed = 0;
    session.resume = () => void resumed++;
    const output = new PassThrough({ highWaterMark: 1024 });
    bridge(session as unknown as BridgedSession, new PassThrough(), output, () => {});
    // Twenty pieces past the output's mark, as one 256 KiB read from the broker may bring them.
    for (let i = 0; i < 20; i++) session.emit('data', Buffer.alloc(2048, i));
    expect(output.listenerCount('drain')).toBe(1);
    output.resume();
    await new Promise((r) => setImmediate(r));
    expect(resumed).toBe(1);
    expect(output.listenerCount('drain')).toBe(0);
  });
});

/** A broker as `fleet connect` sees one: each tunnel session is answered ready, its binary frames recorded. */
async function fakeBroker() {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
  await new Promise((r) => wss.once('listening', r));
  const frames: Buffer[] = [];
  const session = new Promise<WebSocket>((resolve) =>
    wss.once('connection', (ws) => {
      ws.on('message', (data, binary) => binary && frames.push(data as Buffer));
      ws.send(JSON.stringify({ type: 'ready' }));
      resolve(ws);
    }),
  );
  const client = { url: `http://127.0.0.1:${(wss.address() as AddressInfo).port}`, token: async () => 't' };
  return { wss, frames, session, client };
}

async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((r) => setTimeout(r, 5));
}

/** Until `measure` has not changed over twenty looks in a row (nothing moves any more). */
async function untilStill(measure: () => number): Promise<void> {
  let last = -1;
  let still = 0;
  while (still < 20) {
    await new Promise((r) => setTimeout(r, 10));
    still = measure() === last ? still + 1 : 0;
    last = measure();
  }
}

/** `fleet connect` listening on a free local port in front of `broker`, and a local connection to it (closed after the test). */
async function connectThrough(broker: Awaited<ReturnType<typeof fakeBroker>>): Promise<net.Socket> {
  const listener = await listenTcp(broker.client, 'd1', 'd1', {
    localHost: '127.0.0.1',
    localPort: 0,
    remoteHost: '127.0.0.1',
    remotePort: 80,
    proto: 'tcp',
  });
  const local = net.connect((listener.address() as AddressInfo).port, '127.0.0.1');
  cleanup = () => {
    local.destroy();
    listener.close();
    broker.wss.close();
  };
  return local;
}

describe('fleet connect reading a local connection', () => {
  it('reads in reused buffers larger than 64 KiB, and the bytes arrive intact', async () => {
    const broker = await fakeBroker();
    const local = await connectThrough(broker);
    await broker.session;
    const data = crypto.randomBytes(8 * 1024 * 1024);
    local.end(data);
    await until(() => broker.frames.reduce((n, f) => n + f.length, 0) >= data.length);
    expect(Buffer.concat(broker.frames).equals(data)).toBe(true);
    // Node's own reads are 64 KiB at most: a larger frame is one of ours.
    expect(Math.max(...broker.frames.map((f) => f.length))).toBeGreaterThan(64 * 1024);
    expect(Math.max(...broker.frames.map((f) => f.length))).toBeLessThanOrEqual(BULK_READ_SIZE);
  });

  it('reads a connection that carries little into small buffers only', async () => {
    const broker = await fakeBroker();
    sharedFirstReads.clear(); // this connection allocates its own
    const allocated: number[] = [];
    const allocUnsafeSlow = Buffer.allocUnsafeSlow;
    const spy = vi.spyOn(Buffer, 'allocUnsafeSlow').mockImplementation((n: number) => (allocated.push(n), allocUnsafeSlow(n)));
    try {
      const local = await connectThrough(broker);
      await broker.session;
      local.end('GET / HTTP/1.1\r\nHost: d1\r\n\r\n');
      await until(() => broker.frames.length > 0);
    } finally {
      spy.mockRestore();
    }
    expect(Buffer.concat(broker.frames).toString()).toBe('GET / HTTP/1.1\r\nHost: d1\r\n\r\n');
    expect(allocated).toContain(FIRST_READ_SIZE);
    expect(allocated).not.toContain(BULK_READ_SIZE);
  });

  it('local connections opened and closed one after another allocate a first read buffer for the first only', async () => {
    const broker = await fakeBroker();
    sharedFirstReads.clear();
    const allocUnsafeSlow = Buffer.allocUnsafeSlow;
    let allocated = 0;
    const spy = vi.spyOn(Buffer, 'allocUnsafeSlow').mockImplementation((n: number) => (n === FIRST_READ_SIZE && allocated++, allocUnsafeSlow(n)));
    try {
      // Every tunnel opens (the fake broker answers only its first session otherwise).
      let received = 0;
      broker.wss.on('connection', (ws) => {
        // The far end answers the first bytes by closing: the tunnel ends, and with it the local connection.
        ws.on('message', (_data, binary) => binary && (received++, ws.close()));
        ws.send(JSON.stringify({ type: 'ready' }));
      });
      const local = await connectThrough(broker);
      await new Promise((r) => local.once('connect', r));
      await broker.session;
      let afterFirst = 0;
      for (let i = 0; i < 10; i++) {
        const next = net.connect(local.remotePort!, '127.0.0.1');
        await new Promise((r) => next.once('connect', r));
        next.write('x');
        await until(() => received > i);
        next.destroy();
        // Its buffers (and its tunnel's WebSocket's) are back in the pool once the accepted side closes.
        await untilStill(() => sharedFirstReads.size);
        if (i === 0) afterFirst = allocated;
      }
      // The first of the ten allocated its own (the first connection still holds one); the others took them from the pool.
      expect(allocated).toBe(afterFirst);
    } finally {
      spy.mockRestore();
    }
  });

  it('stops reading the local connection while the broker does not read, and loses nothing', async () => {
    const broker = await fakeBroker();
    const local = await connectThrough(broker);
    const ws = await broker.session;
    ws.pause();
    const data = crypto.randomBytes(48 * 1024 * 1024);
    local.write(data);
    // Until the kernel's buffers and fleet connect's bounded backlog are full: then nothing moves.
    await untilStill(() => local.writableLength);
    expect(local.writableLength).toBeGreaterThan(0);
    ws.resume();
    await until(() => broker.frames.reduce((n, f) => n + f.length, 0) >= data.length);
    expect(Buffer.concat(broker.frames).equals(data)).toBe(true);
  });

  it('holds a local connection that floods while the broker never reads: nothing more is sent once the session is full, until it drains', async () => {
    const broker = await fakeBroker();
    // What fleet connect asks of its session, in order: each send ('sent' or 'full'), and each 'drain'.
    const seen: string[] = [];
    let session: RemoteSession | undefined;
    const open = RemoteSession.open.bind(RemoteSession);
    const opens = vi.spyOn(RemoteSession, 'open').mockImplementation(async (...args) => {
      session = await open(...args);
      session.on('drain', () => seen.push('drain'));
      return session;
    });
    const sendOwned = RemoteSession.prototype.sendOwned;
    const sends = vi.spyOn(RemoteSession.prototype, 'sendOwned').mockImplementation(function (this: RemoteSession, data: Buffer, done?: () => void) {
      const ok = sendOwned.call(this, data, done);
      seen.push(ok ? 'sent' : 'full');
      return ok;
    });
    try {
      const local = await connectThrough(broker);
      (await broker.session).pause();
      // A local client that writes far more than the kernel's buffers and the session may hold.
      const chunk = crypto.randomBytes(1024 * 1024);
      for (let i = 0; i < 64; i++) local.write(chunk);
      await until(() => seen.includes('full'));
      // Until the kernel's buffers and the session's backlog are full: then nothing moves.
      await untilStill(() => seen.length);
      // Each time the session said full, the local connection was held: no send came before a 'drain'.
      for (let i = 0; i < seen.length - 1; i++) if (seen[i] === 'full') expect(seen[i + 1]).toBe('drain');
      expect(seen.at(-1)).toBe('full');
      // One hold at a time: the bridge's 'drain' listener and this test's.
      expect(session!.listenerCount('drain')).toBe(2);
      // What waits in fleet connect is bounded by the session's high-water mark and one read.
      expect(session!.ws.bufferedAmount).toBeLessThanOrEqual(1024 * 1024 + BULK_READ_SIZE);
    } finally {
      opens.mockRestore();
      sends.mockRestore();
    }
  });
});
