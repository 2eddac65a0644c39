import net from 'node:net';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { BULK_READ_SIZE, FIRST_READ_SIZE } from '../../shared/read-buffers.js';
import { readInLargePieces } from './large-reads.js';

/** A connected pair: `server` is the gateway's end (accepted), `client` the peer's. */
async function pair(): Promise<{ server: net.Socket; client: net.Socket; close: () => void }> {
  const listener = net.createServer();
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  const accepted = new Promise<net.Socket>((resolve) => listener.once('connection', resolve));
  const client = net.connect((listener.address() as net.AddressInfo).port, '127.0.0.1');
  const server = await accepted;
  await new Promise((resolve) => (client.connecting ? client.once('connect', resolve) : resolve(undefined)));
  return {
    server,
    client,
    close: () => {
      client.destroy();
      server.destroy();
      listener.close();
    },
  };
}

let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

describe('the gateway reads its connections in large pieces', () => {
  it('reads more than 64 KiB at a time from a fast client, every byte in order', async () => {
    const { server, client, close } = await pair();
    cleanup = close;
    server.pause();
    expect(readInLargePieces(server)).toBe(true);
    const payload = Buffer.alloc(8 * 1024 * 1024);
    for (let i = 0; i < payload.length; i += 4) payload.writeUInt32LE(i, i);
    const sizes: number[] = [];
    const got: Buffer[] = [];
    const ended = new Promise((resolve) => server.once('end', resolve));
    // Written before the gateway reads: its first reads find a full kernel buffer.
    client.end(payload);
    server.on('data', (chunk: Buffer) => {
      sizes.push(chunk.length);
      got.push(Buffer.from(chunk));
    });
    server.resume();
    await ended;
    expect(Buffer.concat(got).equals(payload)).toBe(true);
    // Node's own reads are 64 KiB at most.
    expect(Math.max(...sizes)).toBeGreaterThan(64 * 1024);
    expect(Math.max(...sizes)).toBeLessThanOrEqual(BULK_READ_SIZE);
    expect(sizes.length).toBeLessThan(payload.length / (64 * 1024));
  });

  it('reads a connection that carries little (a sign-in, keystrokes) into small fresh buffers only', async () => {
    const { server, client, close } = await pair();
    cleanup = close;
    const allocated: number[] = [];
    const allocUnsafeSlow = Buffer.allocUnsafeSlow;
    const spy = vi.spyOn(Buffer, 'allocUnsafeSlow').mockImplementation((n: number) => (allocated.push(n), allocUnsafeSlow(n)));
    const got: Buffer[] = [];
    try {
      expect(readInLargePieces(server)).toBe(true);
      server.on('data', (chunk: Buffer) => got.push(chunk));
      for (const keystroke of ['l', 's', '\r']) {
        const before = got.length;
        client.write(keystroke);
        while (got.length === before) await new Promise((resolve) => setImmediate(resolve));
      }
    } finally {
      spy.mockRestore();
    }
    expect(Buffer.concat(got).toString()).toBe('ls\r');
    // One buffer for each read and one for the read after: none read into twice, none of bulk size.
    expect(allocated).toEqual(new Array(got.length + 1).fill(FIRST_READ_SIZE));
    expect(new Set(got.map((chunk) => chunk.buffer)).size).toBe(got.length);
  });

  it('keeps bytes put back before the move (a preamble read) first, then the reads after it', async () => {
    const { server, client, close } = await pair();
    cleanup = close;
    const first = await new Promise<Buffer>((resolve) => {
      server.once('data', resolve);
      client.write('FLEET-DEVICE x\r\nSSH-2.0-a');
    });
    server.pause();
    server.unshift(first.subarray(16));
    readInLargePieces(server);
    let seen = '';
    server.on('data', (d: Buffer) => (seen += d.toString('latin1')));
    const ended = new Promise((resolve) => server.once('end', resolve));
    server.resume();
    client.end('bc\r\nrest');
    await ended;
    expect(seen).toBe('SSH-2.0-abc\r\nrest');
  });

  it('holds a client that floods a gateway that does not read at its high-water mark and one read', async () => {
    const { server, client, close } = await pair();
    cleanup = close;
    readInLargePieces(server);
    // Read once (so the socket reads), then never again.
    const firstRead = new Promise((resolve) => server.once('data', resolve));
    const chunk = Buffer.alloc(1024 * 1024, 7);
    let written = 0;
    const flood = () => {
      while (written < 256 * 1024 * 1024 && client.write(chunk)) written += chunk.length;
    };
    client.on('drain', flood);
    flood();
    await firstRead;
    server.pause();
    const handle = (server as unknown as { _handle: { reading: boolean } })._handle;
    // Reading stops once the socket's buffer passes its mark; nothing more is taken from the kernel.
    await new Promise<void>((resolve) => {
      const check = () => (handle.reading ? setImmediate(check) : resolve());
      check();
    });
    const held = server.readableLength;
    expect(held).toBeLessThanOrEqual(server.readableHighWaterMark + BULK_READ_SIZE);
    // Turns go by (the client still writing into the kernel's buffers): what the gateway holds does not grow.
    for (let i = 0; i < 50; i++) await new Promise((resolve) => setImmediate(resolve));
    expect(server.readableLength).toBe(held);
    expect(handle.reading).toBe(false);
  });
});
