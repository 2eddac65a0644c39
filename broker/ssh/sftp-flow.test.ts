import crypto from 'node:crypto';
import { once, type EventEmitter } from 'node:events';
import type { AddressInfo, Server as NetServer } from 'node:net';
import ssh2, { type Connection } from 'ssh2';
import { afterEach, describe, expect, it } from 'vitest';
import { openSshPrivateKey } from '../../shared/ssh-keys.js';
import type { SftpStream } from './sftp-answers.js';
import { limitsPacket, SFTP_READ_MAX, SFTP_WRITE_MAX, SftpFlow, versionPacket } from './sftp-flow.js';

/** The parts of ssh2 this test uses beyond the project's declarations (its client's sftp). */
type Done<T> = (err: Error | undefined, value: T) => void;
interface ClientSftp {
  _maxReadLen: number;
  _maxWriteLen: number;
  maxOpenHandles: number;
  open(path: string, flags: string, cb: Done<Buffer>): void;
  write(handle: Buffer, data: Buffer, offset: number, length: number, position: number, cb: (err?: Error) => void): void;
  read(handle: Buffer, buffer: Buffer, offset: number, length: number, position: number, cb: (err: Error | undefined, bytesRead: number) => void): void;
}
interface TestClient extends EventEmitter {
  connect(config: Record<string, unknown>): void;
  sftp(cb: Done<ClientSftp>): void;
  end(): void;
}
const { Server, Client } = ssh2 as unknown as {
  Server: new (config: { hostKeys: string[] }, listener: (conn: Connection) => void) => NetServer;
  Client: new () => TestClient;
};

/** An ssh2 server whose sftp subsystem is ours to drive, and an ssh2 client signed in to it. */
async function pair(onSftp: (stream: SftpStream, flow: SftpFlow) => void) {
  const hostKey = openSshPrivateKey(crypto.generateKeyPairSync('ed25519').privateKey);
  const server = new Server({ hostKeys: [hostKey] }, (conn: Connection) => {
    conn.on('authentication', (ctx) => ctx.accept());
    conn.on('session', (accept) =>
      accept().on('sftp', (ok: () => SftpStream) => {
        const stream = ok();
        const flow = new SftpFlow(stream);
        flow.start();
        stream.on('EXTENDED', (reqid: number, name: string) => {
          if (name !== 'limits@openssh.com' || !flow.answerLimits(reqid)) stream.status(reqid, 8);
        });
        onSftp(stream, flow);
      }),
    );
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const client = new Client();
  client.connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, username: 'u', password: 'p' });
  await once(client, 'ready');
  const sftp = await new Promise<ClientSftp>((resolve, reject) => client.sftp((err, s) => (err ? reject(err) : resolve(s))));
  closers.push(() => {
    client.end();
    server.close();
  });
  return sftp;
}

const closers: (() => void)[] = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

/** A file's bytes, not a repeating pattern a misplaced piece could pass for. */
function content(length: number): Buffer {
  const out = Buffer.alloc(length);
  for (let i = 0; i < length; i++) out[i] = (i * 131 + (i >> 9) * 7) & 0xff;
  return out;
}

/** `count` READs of `size` bytes from offset 0 on, all in flight, their answers in the order they came. */
function readAll(sftp: ClientSftp, handle: Buffer, count: number, size: number): Promise<Buffer[]> {
  return Promise.all(
    Array.from(
      { length: count },
      (_, i) =>
        new Promise<Buffer>((resolve, reject) => {
          const into = Buffer.alloc(size);
          sftp.read(handle, into, 0, size, i * size, (err, n) => (err ? reject(err) : resolve(into.subarray(0, n))));
        }),
    ),
  );
}

describe('SftpFlow', () => {
  it('encodes VERSION 3 with limits@openssh.com, and its answer: 256 KiB packets, 255 KiB reads and writes, handles not told', () => {
    const version = versionPacket();
    expect(version.readUInt32BE(0)).toBe(version.length - 4);
    expect([...version.subarray(4, 9)]).toEqual([2, 0, 0, 0, 3]);
    expect(version.subarray(9).toString('latin1')).toBe('\0\0\0\x12limits@openssh.com\0\0\0\x011');
    const limits = limitsPacket(7);
    expect(limits[4]).toBe(201);
    expect(limits.readUInt32BE(5)).toBe(7);
    expect([9, 17, 25, 33].map((at) => Number(limits.readBigUInt64BE(at)))).toEqual([256 * 1024, SFTP_READ_MAX, SFTP_WRITE_MAX, 0]);
  });

  it("announces limits@openssh.com in ssh2's VERSION and answers it: a client then reads and writes in 255 KiB pieces", async () => {
    const sftp = await pair(() => {});
    // ssh2's client asks for the limits when the VERSION announces them, and takes them.
    expect(sftp._maxReadLen).toBe(SFTP_READ_MAX);
    expect(sftp._maxWriteLen).toBe(SFTP_WRITE_MAX);
    expect(sftp.maxOpenHandles).toBe(Infinity);
  });

  it("stops topping up the client's window while held: a client sending WRITEs without answers is stopped by SSH, then goes on once released", async () => {
    let received = 0;
    let flow!: SftpFlow;
    const holder = {};
    const sftp = await pair((stream, f) => {
      flow = f;
      flow.hold(holder);
      stream.on('OPEN', (reqid: number) => stream.handle(reqid, Buffer.from([1])));
      stream.on('WRITE', (_reqid: number, _handle: Buffer, _offset: number, data: Buffer) => (received += data.length));
    });
    const handle = await new Promise<Buffer>((resolve, reject) => sftp.open('/f', 'w', (err, h) => (err ? reject(err) : resolve(h))));
    const chunk = Buffer.alloc(SFTP_WRITE_MAX);
    // 8 MiB of WRITEs, none answered: only the window (2 MiB) may arrive while held.
    for (let i = 0; i < 32; i++) sftp.write(handle, chunk, 0, chunk.length, i * chunk.length, () => {});
    // The window spent (what is left of it is less than one WRITE), then a moment for any more to come.
    await expect.poll(() => received, { timeout: 10_000 }).toBeGreaterThan(2 * 1024 * 1024 - 2 * chunk.length);
    await new Promise((resolve) => setTimeout(resolve, 300));
    expect(received).toBeLessThanOrEqual(2 * 1024 * 1024);
    flow.release(holder);
    await expect.poll(() => received, { timeout: 10_000 }).toBe(32 * chunk.length);
  });

  it("answers a READ from the device's pieces without ssh2's data() (which copied the answer whole first): the client reads them byte for byte", async () => {
    const file = content(SFTP_READ_MAX);
    const viaSsh2: number[] = [];
    const sftp = await pair((stream, flow) => {
      const data = stream.data.bind(stream);
      stream.data = (reqid: number, d: Buffer) => {
        viaSsh2.push(reqid);
        data(reqid, d);
      };
      stream.on('OPEN', (reqid: number) => stream.handle(reqid, Buffer.from([1])));
      // Three pieces of odd sizes (as frames from the device fall), a piece ending inside an SSH packet.
      stream.on('READ', (reqid: number) => {
        const parts = [file.subarray(0, 1000), file.subarray(1000, 131_072 + 17), file.subarray(131_072 + 17)];
        expect(flow.answerData(reqid, parts, file.length)).toBe(true);
      });
    });
    const handle = await new Promise<Buffer>((resolve, reject) => sftp.open('/f', 'r', (err, h) => (err ? reject(err) : resolve(h))));
    const [got] = await readAll(sftp, handle, 1, SFTP_READ_MAX);
    expect(got.equals(file)).toBe(true);
    expect(viaSsh2).toEqual([]);
  });

  it("declines a READ's answer the client's window has no room for, sending nothing: answered through ssh2 instead, every answer arrives in order", async () => {
    // 12 READs of 255 KiB: the first eight fit the client's 2 MiB window, the rest wait in ssh2.
    const file = content(12 * SFTP_READ_MAX);
    const declined: number[] = [];
    const sftp = await pair((stream, flow) => {
      stream.on('OPEN', (reqid: number) => stream.handle(reqid, Buffer.from([1])));
      stream.on('READ', (reqid: number, _handle: Buffer, offset: number, length: number) => {
        const part = file.subarray(offset, offset + length);
        if (flow.answerData(reqid, [part], part.length)) return;
        declined.push(offset / SFTP_READ_MAX);
        stream.data(reqid, part);
      });
    });
    const handle = await new Promise<Buffer>((resolve, reject) => sftp.open('/f', 'r', (err, h) => (err ? reject(err) : resolve(h))));
    const got = await readAll(sftp, handle, 12, SFTP_READ_MAX);
    expect(Buffer.concat(got).equals(file)).toBe(true);
    // Once one is declined (window spent, or ssh2 holding answers), every later one is too: none jumps the queue.
    expect(declined.length).toBeGreaterThan(0);
    expect(declined).toEqual(Array.from({ length: declined.length }, (_, i) => 12 - declined.length + i));
  });

  it("waits for the client's window rather than answering in pieces: every READ answered whole, none through ssh2, in order", async () => {
    // 24 READs of 255 KiB (6 MiB) against the client's 2 MiB window: most wait for it to open.
    const file = content(24 * SFTP_READ_MAX);
    let viaSsh2 = 0;
    let waited = 0;
    const sftp = await pair((stream, flow) => {
      stream.data = () => void (viaSsh2 += 1);
      const queue: { reqid: number; offset: number; length: number }[] = [];
      const serve = () => {
        while (queue.length > 0 && flow.canAnswer(queue[0].length)) {
          const { reqid, offset, length } = queue.shift()!;
          expect(flow.answerData(reqid, [file.subarray(offset, offset + length)], length)).toBe(true);
        }
        if (queue.length > 0) waited += 1;
      };
      flow.onWindow(serve);
      stream.on('OPEN', (reqid: number) => stream.handle(reqid, Buffer.from([1])));
      stream.on('READ', (reqid: number, _handle: Buffer, offset: number, length: number) => {
        queue.push({ reqid, offset, length });
        serve();
      });
    });
    const handle = await new Promise<Buffer>((resolve, reject) => sftp.open('/f', 'r', (err, h) => (err ? reject(err) : resolve(h))));
    const got = await readAll(sftp, handle, 24, SFTP_READ_MAX);
    expect(Buffer.concat(got).equals(file)).toBe(true);
    expect(viaSsh2).toBe(0);
    expect(waited).toBeGreaterThan(0);
  });
});
