import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { selfSignedCertificate } from '../test/support/tls.js';
import { RemoteSession } from './remote.js';

/** What the server saw of the client's first data frame. */
interface SeenFrame {
  masked: boolean;
  maskKey: Buffer;
  payload: Buffer;
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-mask-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

function selfSignedCert(): { cert: Buffer; key: Buffer } {
  const { cert, key } = selfSignedCertificate(dir, 'server');
  return { cert: fs.readFileSync(cert), key: fs.readFileSync(key) };
}

/**
 * A bare WebSocket server written against RFC 6455 (no ws library, which would refuse unmasked
 * client frames before a test could see them): answers the upgrade, sends `ready`, and reports
 * the header of the client's first frame.
 */
function rawServer(secure: boolean): Promise<{ url: string; firstFrame: Promise<SeenFrame>; close: () => void }> {
  let seen!: (frame: SeenFrame) => void;
  const firstFrame = new Promise<SeenFrame>((resolve) => (seen = resolve));
  const onSocket = (socket: net.Socket) => {
    let buffer = Buffer.alloc(0);
    let upgraded = false;
    socket.on('error', () => {});
    socket.on('data', (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      if (!upgraded) {
        const end = buffer.indexOf('\r\n\r\n');
        if (end < 0) return;
        const key = /sec-websocket-key: *(\S+)/i.exec(buffer.subarray(0, end).toString())?.[1] ?? '';
        const accept = crypto.createHash('sha1').update(`${key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11`).digest('base64');
        socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${accept}\r\n\r\n`);
        const ready = Buffer.from('{"type":"ready"}');
        socket.write(Buffer.concat([Buffer.from([0x81, ready.length]), ready]));
        upgraded = true;
        buffer = buffer.subarray(end + 4);
      }
      if (buffer.length < 2) return;
      const masked = (buffer[1] & 0x80) !== 0;
      const length = buffer[1] & 0x7f; // the test sends short frames only
      const header = 2 + (masked ? 4 : 0);
      if (buffer.length < header + length) return;
      const maskKey = masked ? Buffer.from(buffer.subarray(2, 6)) : Buffer.alloc(4);
      const payload = Buffer.from(buffer.subarray(header, header + length)).map((b, i) => b ^ maskKey[i % 4]);
      seen({ masked, maskKey, payload: Buffer.from(payload) });
    });
  };
  const server = secure ? tls.createServer(selfSignedCert(), onSocket) : net.createServer(onSocket);
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      resolve({ url: `${secure ? 'https' : 'http'}://127.0.0.1:${port}`, firstFrame, close: () => server.close() });
    });
  });
}

let cleanup: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanup) c();
  cleanup = [];
});

describe('CLI remote session framing', () => {
  for (const secure of [false, true]) {
    it(`masks every frame it sends with a non-zero random key (RFC 6455 §5.3) over ${secure ? 'TLS' : 'plain TCP'}`, async () => {
      const server = await rawServer(secure);
      cleanup.push(server.close);
      // The server's certificate is self-signed: trust it for this connection only.
      const previous = process.env.NODE_TLS_REJECT_UNAUTHORIZED;
      if (secure) process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';
      let session: RemoteSession;
      try {
        session = await RemoteSession.open({ url: server.url, token: async () => 'token' }, 'tunnel', { device_id: 'x' });
      } finally {
        if (previous === undefined) delete process.env.NODE_TLS_REJECT_UNAUTHORIZED;
        else process.env.NODE_TLS_REJECT_UNAUTHORIZED = previous;
      }
      cleanup.push(() => session.ws.terminate());
      session.start().send(Buffer.from('hello device'));
      const frame = await server.firstFrame;
      expect(frame.masked).toBe(true);
      expect(frame.maskKey.equals(Buffer.alloc(4))).toBe(false);
      expect(frame.payload.toString()).toBe('hello device');
    });
  }
});

describe('bytes handed over (sendOwned)', () => {
  it('are masked in place with a fresh key and arrive intact and in order, between frames ws sends itself', async () => {
    const { WebSocketServer } = await import('ws');
    // ws as the server: it refuses a frame that is not masked, and unmasks what it gets.
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise((r) => wss.once('listening', r));
    const received: Buffer[] = [];
    const texts: string[] = [];
    let closedWith: number | undefined;
    wss.on('connection', (ws) => {
      ws.send('{"type":"ready"}');
      ws.on('message', (data, binary) => (binary ? received.push(data as Buffer) : texts.push(String(data))));
      ws.on('close', (code) => (closedWith = code));
    });
    try {
      const url = `http://127.0.0.1:${(wss.address() as net.AddressInfo).port}`;
      const session = await RemoteSession.open({ url, token: async () => 'token' }, 'tunnel', { device_id: 'd', port: 22 });
      session.start();
      const sizes = [1, 47, 48, 125, 126, 65_535, 65_536, 300_000];
      const sent = sizes.map((n) => crypto.randomBytes(n));
      const handed = sent.map((b) => Buffer.from(b));
      handed.forEach((b, i) => {
        session.sendOwned(b);
        if (i % 3 === 0) session.control({ type: 'eof' });
      });
      // The caller's own buffer was masked where it lay (no copy made of it).
      expect(handed.at(-1)?.equals(sent.at(-1) as Buffer)).toBe(false);
      await expect.poll(() => received.length, { timeout: 10_000 }).toBe(sizes.length);
      expect(received.map((b) => b.toString('hex'))).toEqual(sent.map((b) => b.toString('hex')));
      expect(texts).toHaveLength(3);
      // Two frames with the same payload get different keys: each key is fresh.
      const twice = Buffer.alloc(64, 7);
      const a = Buffer.from(twice);
      const b = Buffer.from(twice);
      session.sendOwned(a);
      session.sendOwned(b);
      expect(a.equals(b)).toBe(false);
      await expect.poll(() => received.length, { timeout: 10_000 }).toBe(sizes.length + 2);
      expect(received.slice(-2).every((r) => r.equals(twice))).toBe(true);
      expect(closedWith).toBeUndefined();
      session.close();
    } finally {
      wss.close();
    }
  });
});

/** A ws server that sends `ready` and hands the test the raw socket of its one connection, to write frames on. */
async function frameServer(secure = false): Promise<{ url: string; socket: Promise<net.Socket>; close: () => void }> {
  const { WebSocketServer } = await import('ws');
  const https = await import('node:https');
  const tlsServer = secure ? https.createServer(selfSignedCert()) : undefined;
  if (tlsServer) await new Promise<void>((resolve) => tlsServer.listen(0, '127.0.0.1', resolve));
  const wss = tlsServer
    ? new WebSocketServer({ server: tlsServer, perMessageDeflate: false })
    : new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
  if (!tlsServer) await new Promise((resolve) => wss.once('listening', resolve));
  const socket = new Promise<net.Socket>((resolve) =>
    wss.once('connection', (ws) => {
      ws.send(JSON.stringify({ type: 'ready' }));
      resolve((ws as unknown as { _socket: net.Socket })._socket);
    }),
  );
  const port = ((tlsServer ?? wss).address() as net.AddressInfo).port;
  const close = () => (wss.close(), tlsServer?.close());
  return { url: `${secure ? 'https' : 'http'}://127.0.0.1:${port}`, socket, close };
}

/** A final binary frame's header from a server (unmasked), 64-bit length. */
function serverHeader(length: number, masked = false): Buffer {
  const header = Buffer.alloc(10);
  header[0] = 0x82;
  header[1] = (masked ? 0x80 : 0) | 127;
  header.writeBigUInt64BE(BigInt(length), 2);
  return header;
}

async function openTunnel(url: string): Promise<RemoteSession> {
  const session = await RemoteSession.open({ url, token: async () => 'token' }, 'tunnel', { device_id: 'x' });
  cleanup.push(() => session.ws.terminate());
  return session;
}

describe('bytes read as they arrive (readPieces)', () => {
  it('hands on the first part of a frame before the rest of it has arrived', async () => {
    const server = await frameServer();
    cleanup.push(server.close);
    const session = await openTunnel(server.url);
    const received: Buffer[] = [];
    let first!: () => void;
    const firstArrived = new Promise<void>((resolve) => (first = resolve));
    session.on('data', (d: Buffer) => (received.push(Buffer.from(d)), first()));
    session.readPieces().start();
    const payload = crypto.randomBytes(200 * 1024);
    const socket = await server.socket;
    socket.write(Buffer.concat([serverHeader(payload.length), payload.subarray(0, 1000)]));
    // ws would hold these bytes until the whole frame is there.
    await firstArrived;
    expect(Buffer.concat(received).equals(payload.subarray(0, 1000))).toBe(true);
    socket.write(payload.subarray(1000));
    await vi.waitFor(() => expect(Buffer.concat(received).length).toBe(payload.length));
    expect(Buffer.concat(received).equals(payload)).toBe(true);
  });

  it.each([
    ['in the turn of its read, as a local socket that takes it at once', process.nextTick],
    ['later, as a slow local socket', setImmediate],
  ] as const)('reads into reused buffers, each read into again only once every view of it is done (released %s)', async (_, later) => {
    const server = await frameServer();
    cleanup.push(server.close);
    const session = await openTunnel(server.url);
    const received: Buffer[] = [];
    const buffers = new Set<ArrayBufferLike>();
    let withDone = 0;
    let overwritten = 0;
    session.on('data', (d: Buffer, done?: () => void) => {
      const copy = Buffer.from(d);
      received.push(copy);
      if (!done) return; // ws's own message (the fragmented one): a buffer of its own
      withDone++;
      buffers.add(d.buffer);
      // Released once written: the view must still hold its bytes then.
      later(() => {
        if (!d.equals(copy)) overwritten++;
        done();
      });
    });
    session.readPieces().start();
    const socket = await server.socket;
    const bulk = crypto.randomBytes(8 * 1024 * 1024);
    const fragments = [crypto.randomBytes(100 * 1024), crypto.randomBytes(100 * 1024)];
    const fragmentHeader = (opcode: number, fin: boolean, length: number) => {
      const header = serverHeader(length);
      header[0] = (fin ? 0x80 : 0) | opcode;
      return header;
    };
    const half = bulk.length / 2;
    for (let at = 0; at < half; at += 128 * 1024) socket.write(Buffer.concat([serverHeader(128 * 1024), bulk.subarray(at, at + 128 * 1024)]));
    await vi.waitFor(() => expect(Buffer.concat(received).length).toBe(half), { timeout: 20_000 });
    // A fragmented message is ws's to put together: its first part, alone in a read, must survive the read after it.
    socket.write(Buffer.concat([fragmentHeader(2, false, fragments[0].length), fragments[0]]));
    await new Promise((resolve) => setTimeout(resolve, 20));
    socket.write(Buffer.concat([fragmentHeader(0, true, fragments[1].length), fragments[1]]));
    for (let at = half; at < bulk.length; at += 128 * 1024) socket.write(Buffer.concat([serverHeader(128 * 1024), bulk.subarray(at, at + 128 * 1024)]));
    const expected = Buffer.concat([bulk.subarray(0, half), ...fragments, bulk.subarray(half)]);
    await vi.waitFor(() => expect(Buffer.concat(received).length).toBe(expected.length), { timeout: 20_000 });
    expect(Buffer.concat(received).equals(expected)).toBe(true);
    expect(overwritten).toBe(0);
    expect(withDone).toBeGreaterThan(0);
    // Node's own reads are a fresh buffer each: 8 MiB would be at least 128 of them.
    if (later === process.nextTick) expect(buffers.size).toBeLessThanOrEqual(8);
    else expect(buffers.size).toBeLessThan(64);
  });

  it('over TLS reads as before (the socket decrypts its own reads), and the bytes arrive intact', async () => {
    const server = await frameServer(true);
    cleanup.push(server.close);
    const previous = process.env.NODE_TLS_REJECT_UNAUTHORIZED;
    process.env.NODE_TLS_REJECT_UNAUTHORIZED = '0';
    let session: RemoteSession;
    try {
      session = await openTunnel(server.url);
    } finally {
      if (previous === undefined) delete process.env.NODE_TLS_REJECT_UNAUTHORIZED;
      else process.env.NODE_TLS_REJECT_UNAUTHORIZED = previous;
    }
    const received: Buffer[] = [];
    session.on('data', (d: Buffer, done?: () => void) => (received.push(Buffer.from(d)), done?.()));
    session.readPieces().start();
    const socket = await server.socket;
    const data = crypto.randomBytes(4 * 1024 * 1024);
    for (let at = 0; at < data.length; at += 128 * 1024) socket.write(Buffer.concat([serverHeader(128 * 1024), data.subarray(at, at + 128 * 1024)]));
    await vi.waitFor(() => expect(Buffer.concat(received).length).toBe(data.length), { timeout: 20_000 });
    expect(Buffer.concat(received).equals(data)).toBe(true);
  });

  it('stops reading the broker while the reader holds every buffer, and loses nothing', async () => {
    const server = await frameServer();
    cleanup.push(server.close);
    const session = await openTunnel(server.url);
    const received: Buffer[] = [];
    const held: (() => void)[] = [];
    let reading = false;
    // A local side that does not read: the bridge pauses the session at the first write it refuses.
    session.on('data', (d: Buffer, done?: () => void) => {
      received.push(Buffer.from(d));
      if (reading) return done?.();
      if (done) held.push(done);
      session.pause();
    });
    session.readPieces().start();
    const socket = await server.socket;
    const data = crypto.randomBytes(32 * 1024 * 1024);
    for (let at = 0; at < data.length; at += 128 * 1024) socket.write(Buffer.concat([serverHeader(128 * 1024), data.subarray(at, at + 128 * 1024)]));
    await vi.waitFor(() => expect(received.length).toBeGreaterThan(0));
    let last = -1;
    let still = 0;
    while (still < 20) {
      await new Promise((r) => setTimeout(r, 10));
      still = socket.writableLength === last ? still + 1 : 0;
      last = socket.writableLength;
    }
    // Paused: what was read is at most a read or two, the rest waits in the kernel and the server.
    const bytesRead = (session.ws as unknown as { _socket: net.Socket })._socket.bytesRead;
    expect(bytesRead).toBeLessThan(2 * 1024 * 1024);
    expect(socket.writableLength).toBeGreaterThan(0);
    reading = true;
    for (const done of held.splice(0)) done();
    session.resume();

    await vi.waitFor(() => expect(Buffer.concat(received).length).toBe(data.length), { timeout: 20_000 });
    expect(Buffer.concat(received).equals(data)).toBe(true);
  });

  it('still refuses a masked frame from the server and a frame above maxPayload, as ws does', async () => {
    for (const [frame, code] of [
      [Buffer.concat([serverHeader(8, true), Buffer.alloc(4), Buffer.alloc(8)]), 'WS_ERR_UNEXPECTED_MASK'],
      [serverHeader(200 * 1024 * 1024), 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH'],
    ] as const) {
      const server = await frameServer();
      cleanup.push(server.close);
      const session = await openTunnel(server.url);
      const data: Buffer[] = [];
      session.on('data', (d: Buffer) => data.push(d));
      const refused = new Promise<string | undefined>((resolve) => session.ws.on('error', (e: NodeJS.ErrnoException) => resolve(e.code)));
      const closed = new Promise<void>((resolve) => session.on('close', () => resolve()));
      session.readPieces().start();
      (await server.socket).write(frame);
      expect(await refused).toBe(code);
      await closed;
      expect(data).toEqual([]);
    }
  });
});
