import crypto from 'node:crypto';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { encodeFrame, encodeUpdate, INITIAL_PEER_WINDOW, SMUX_HEADER, SmuxCmd, SmuxSession, type SmuxStream } from './smux.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0)) c();
});

/** A connected pair of loopback sockets. */
async function socketPair(): Promise<{ a: net.Socket; b: net.Socket }> {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const accepted = new Promise<net.Socket>((r) => server.once('connection', r));
  const a = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1');
  await new Promise((r) => a.once('connect', r));
  const b = await accepted;
  cleanups.push(() => {
    a.destroy();
    b.destroy();
    server.close();
  });
  return { a, b };
}

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (check()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`never: ${what}`);
}

/** Parses the frames a raw peer received. */
function frames(bytes: Buffer): { version: number; cmd: number; sid: number; data: Buffer }[] {
  const out = [];
  let offset = 0;
  while (offset + SMUX_HEADER <= bytes.length) {
    const length = bytes.readUInt16LE(offset + 2);
    out.push({
      version: bytes[offset],
      cmd: bytes[offset + 1],
      sid: bytes.readUInt32LE(offset + 4),
      data: bytes.subarray(offset + SMUX_HEADER, offset + SMUX_HEADER + length),
    });
    offset += SMUX_HEADER + length;
  }
  return out;
}

/** A server session facing a raw socket we write frames to by hand, and read its frames from. */
async function rawPeer(options: ConstructorParameters<typeof SmuxSession>[1] = { side: 'server' }) {
  const { a, b } = await socketPair();
  const server = new SmuxSession(b, options);
  const streams: SmuxStream[] = [];
  server.on('stream', (s: SmuxStream) => streams.push(s));
  const errors: Error[] = [];
  server.on('protocol-error', (e: Error) => errors.push(e));
  let received = Buffer.alloc(0);
  a.on('data', (d: Buffer) => (received = Buffer.concat([received, d])));
  const closed = new Promise<string>((r) => server.once('close', r));
  return { raw: a, server, streams, errors, closed, received: () => frames(received) };
}

describe('smux v2 framing', () => {
  it('lays frames out as VERSION | CMD | LENGTH (LE16) | STREAM ID (LE32) | DATA', () => {
    const frame = encodeFrame(SmuxCmd.PSH, 0x01020304, Buffer.from('hey'));
    expect([...frame]).toEqual([2, 2, 3, 0, 4, 3, 2, 1, 0x68, 0x65, 0x79]);
    expect([...encodeUpdate(5, 0x10, 0x40000)]).toEqual([2, 4, 8, 0, 5, 0, 0, 0, 0x10, 0, 0, 0, 0, 0, 4, 0]);
  });

  it('accepts a stream opened by hand-built frames and answers with data and a window update', async () => {
    const p = await rawPeer();
    p.raw.write(Buffer.concat([encodeFrame(SmuxCmd.SYN, 1), encodeFrame(SmuxCmd.PSH, 1, Buffer.from('ping'))]));
    await until(() => p.streams.length === 1, 'the stream');
    const [stream] = p.streams;
    expect(stream.id).toBe(1);
    stream.once('data', (d: Buffer) => stream.write(Buffer.concat([Buffer.from('pong:'), d])));
    await until(() => p.received().some((f) => f.cmd === SmuxCmd.PSH), 'the answer');
    const got = p.received();
    expect(got.find((f) => f.cmd === SmuxCmd.PSH)).toMatchObject({ version: 2, sid: 1, data: Buffer.from('pong:ping') });
    // Reading the 4 bytes is reported back: consumed 4, window 256 KiB.
    const upd = got.find((f) => f.cmd === SmuxCmd.UPD)!;
    expect(upd.data.readUInt32LE(0)).toBe(4);
    expect(upd.data.readUInt32LE(4)).toBe(INITIAL_PEER_WINDOW);
    stream.end();
    await until(() => p.received().some((f) => f.cmd === SmuxCmd.FIN && f.sid === 1), 'the FIN');
  });
});

describe('smux v2 sessions', () => {
  it('carries bytes both ways between a client and a server with the checksum intact', async () => {
    const { a, b } = await socketPair();
    const client = new SmuxSession(a, { side: 'client' });
    const server = new SmuxSession(b, { side: 'server' });
    server.on('stream', (s: SmuxStream) => s.pipe(s)); // echo
    const stream = client.openStream();
    expect(stream.id % 2).toBe(1);
    const payload = crypto.randomBytes(3 * 1024 * 1024 + 7);
    const parts: Buffer[] = [];
    stream.on('data', (d: Buffer) => parts.push(d));
    const ended = new Promise((r) => stream.once('end', r));
    stream.end(payload);
    await ended;
    const back = Buffer.concat(parts);
    expect(back.length).toBe(payload.length);
    expect(back.equals(payload)).toBe(true);
    client.close();
  });

  it('stops a writer at the window while the reader reads nothing, and goes on when it reads', async () => {
    const { a, b } = await socketPair();
    const client = new SmuxSession(a, { side: 'client' });
    const server = new SmuxSession(b, { side: 'server' });
    let remote: SmuxStream | undefined;
    server.on('stream', (s: SmuxStream) => {
      remote = s;
      s.pause();
    });
    const stream = client.openStream();
    const total = 4 * INITIAL_PEER_WINDOW;
    let done = false;
    stream.write(crypto.randomBytes(total), () => (done = true));
    await until(() => stream.stats.bytesOut === INITIAL_PEER_WINDOW, 'the window filled');
    await until(() => remote?.stats.bytesIn === INITIAL_PEER_WINDOW, 'the bytes arrived');
    // Give the writer every chance to overrun: it must not.
    for (let i = 0; i < 20; i++) await new Promise((r) => setImmediate(r));
    expect(stream.stats.bytesOut).toBe(INITIAL_PEER_WINDOW);
    expect(done).toBe(false);
    let read = 0;
    remote!.on('data', (d: Buffer) => (read += d.length));
    remote!.resume();
    await until(() => read === total && done, 'everything read');
    client.close();
  });
});

describe('smux v2 against a hostile peer', () => {
  it('ends the session when a stream sends beyond its window, holding no more than the window', async () => {
    const p = await rawPeer();
    p.raw.write(encodeFrame(SmuxCmd.SYN, 1));
    await until(() => p.streams.length === 1, 'the stream');
    p.streams[0].pause(); // nobody reads: no window comes back
    const chunk = Buffer.alloc(32 * 1024, 7);
    for (let i = 0; i < INITIAL_PEER_WINDOW / chunk.length + 1; i++) p.raw.write(encodeFrame(SmuxCmd.PSH, 1, chunk));
    expect(await p.closed).toMatch(/beyond its window/);
    expect(p.errors).toHaveLength(1);
    expect(p.streams[0].stats.bytesIn).toBeLessThanOrEqual(INITIAL_PEER_WINDOW);
  });

  it('refuses streams beyond the limit with FIN, setting none of them up', async () => {
    const p = await rawPeer({ side: 'server', maxStreams: 4 });
    for (let sid = 1; sid <= 19; sid += 2) p.raw.write(encodeFrame(SmuxCmd.SYN, sid));
    await until(() => p.server.refused === 6, 'the refusals');
    expect(p.streams).toHaveLength(4);
    expect(p.server.openStreams).toBe(4);
    await until(() => p.received().filter((f) => f.cmd === SmuxCmd.FIN).length === 6, 'the FINs');
    expect(
      p
        .received()
        .filter((f) => f.cmd === SmuxCmd.FIN)
        .map((f) => f.sid),
    ).toEqual([9, 11, 13, 15, 17, 19]);
    // Data for a refused stream is dropped, not buffered.
    p.raw.write(encodeFrame(SmuxCmd.PSH, 19, Buffer.alloc(1000)));
    p.raw.write(encodeFrame(SmuxCmd.NOP, 0));
    await new Promise((r) => setTimeout(r, 20));
    expect(p.server.closed).toBe(false);
  });

  it('ends the session on a frame larger than the limit, without waiting for its body', async () => {
    const p = await rawPeer({ side: 'server', maxFrame: 1024 });
    p.raw.write(encodeFrame(SmuxCmd.SYN, 1));
    const header = encodeFrame(SmuxCmd.PSH, 1, Buffer.alloc(2000)).subarray(0, SMUX_HEADER);
    p.raw.write(header);
    expect(await p.closed).toMatch(/exceeds the 1024-byte limit/);
  });

  it('ends the session on another version, an unknown command, a reused id or a window update for bytes never sent', async () => {
    const cases: [Buffer, RegExp][] = [
      [encodeFrame(SmuxCmd.SYN, 1, Buffer.alloc(0), 1), /unsupported smux version 1/],
      [encodeFrame(9, 1), /unknown command 9/],
      [Buffer.concat([encodeFrame(SmuxCmd.SYN, 1), encodeFrame(SmuxCmd.SYN, 1)]), /reused/],
      [encodeFrame(SmuxCmd.SYN, 2), /not the peer's to open/],
      [Buffer.concat([encodeFrame(SmuxCmd.SYN, 1), encodeUpdate(1, 500, 1000)]), /never sent/],
    ];
    for (const [bytes, reason] of cases) {
      const p = await rawPeer();
      p.raw.write(bytes);
      expect(await p.closed).toMatch(reason);
    }
  });
});
