import { generateKeyPairSync } from 'node:crypto';
import { once, type EventEmitter } from 'node:events';
import { createRequire } from 'node:module';
import type { AddressInfo, Server as NetServer } from 'node:net';
import ssh2, { type Connection, type ServerChannel } from 'ssh2';
import { afterEach, describe, expect, it } from 'vitest';
import { openSshPrivateKey } from '../../shared/ssh-keys.js';
import { paddingStats, poolPacketPadding, PADDING_POOL_BYTES } from './packet-padding.js';

interface TestClient extends EventEmitter {
  connect(config: Record<string, unknown>): void;
  exec(command: string, cb: (err: Error | undefined, channel: ServerChannel) => void): void;
  end(): void;
}
const { Server, Client } = ssh2 as unknown as {
  Server: new (config: { hostKeys: string[]; algorithms?: Record<string, string[]> }, listener: (conn: Connection) => void) => NetServer;
  Client: new () => TestClient;
};
const crypto = createRequire(import.meta.url)('ssh2/lib/protocol/crypto.js') as {
  CIPHER_INFO: Record<string, { keyLen: number; ivLen: number }>;
  createCipher(config: unknown): { allocPacket(n: number): Buffer };
};

const closers: (() => void)[] = [];
afterEach(() => {
  for (const close of closers.splice(0)) close();
});

/** An ssh2 server echoing what an exec channel sends, and an ssh2 client, agreeing on `cipher` (and `mac`, an hmac name, unless the cipher is an AEAD). */
async function echoPair(cipher: string, mac: string): Promise<TestClient> {
  const algorithms = { cipher: [cipher], ...(mac.startsWith('hmac') ? { hmac: [mac] } : {}) };
  const server = new Server({ hostKeys: [openSshPrivateKey(generateKeyPairSync('ed25519').privateKey)], algorithms }, (conn: Connection) => {
    conn.on('authentication', (ctx) => ctx.accept());
    conn.on('session', (accept) =>
      accept().on('exec', (ok: () => ServerChannel) => {
        const stream = ok();
        stream.pipe(stream);
      }),
    );
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const client = new Client();
  client.connect({ host: '127.0.0.1', port: (server.address() as AddressInfo).port, username: 'u', password: 'p', algorithms });
  await once(client, 'ready');
  closers.push(() => {
    client.end();
    server.close();
  });
  return client;
}

describe('poolPacketPadding', () => {
  it("changes ssh2's AEAD and MAC packet ciphers (its native binding and the fallbacks), and only once", () => {
    const changed = poolPacketPadding();
    expect(changed).toEqual(
      expect.arrayContaining(['ChaChaPolyCipherBinding', 'AESGCMCipherBinding', 'GenericCipherBinding', 'ChaChaPolyCipherNative', 'AESGCMCipherNative']),
    );
    expect(poolPacketPadding()).toBe(changed);
  });

  it('pads a thousand 32 KiB packets from one fill of the pool (ssh2 drew random bytes for each), each padding byte handed out once', () => {
    poolPacketPadding();
    const info = crypto.CIPHER_INFO['chacha20-poly1305@openssh.com'];
    const cipher = crypto.createCipher({ outbound: { onWrite: () => {}, cipherInfo: info, cipherKey: Buffer.alloc(info.keyLen), seqno: 0 } });
    const before = paddingStats.fills;
    const paddings: Buffer[] = [];
    for (let i = 0; i < 1000; i++) {
      const payload = 32 * 1024 + 9 + (i % 8);
      const packet = cipher.allocPacket(payload);
      // length, padding length, padding to a multiple of 8 after the length, and room for the tag
      const padLen = packet[4];
      expect(padLen).toBeGreaterThanOrEqual(4);
      expect(packet.readUInt32BE(0) % 8).toBe(0);
      expect(packet.length).toBe(4 + packet.readUInt32BE(0) + 16);
      paddings.push(Buffer.from(packet.subarray(5 + payload, 5 + payload + padLen)));
    }
    const drawn = paddings.reduce((n, p) => n + p.length, 0);
    expect(paddingStats.fills - before).toBeLessThanOrEqual(Math.ceil(drawn / PADDING_POOL_BYTES) + 1);
    // Not a constant: random bytes, and no padding repeats the one before it.
    expect(new Set(Buffer.concat(paddings)).size).toBeGreaterThan(200);
    for (let i = 1; i < paddings.length; i++) expect(paddings[i].equals(paddings[i - 1])).toBe(false);
  });

  it('never hands the same pool bytes out twice, across fills: no 8-byte run of the paddings repeats anywhere', () => {
    poolPacketPadding();
    const info = crypto.CIPHER_INFO['aes128-gcm@openssh.com'];
    const cipher = crypto.createCipher({
      outbound: { onWrite: () => {}, cipherInfo: info, cipherKey: Buffer.alloc(info.keyLen), cipherIV: Buffer.alloc(info.ivLen), seqno: 0 },
    });
    const before = paddingStats.fills;
    const paddings: Buffer[] = [];
    // Small packets of every length mod 16: paddings of 4 to 19 bytes, 3 pool fills and more.
    for (let i = 0; paddingStats.fills - before < 4; i++) {
      const payload = 20 + (i % 16);
      const packet = cipher.allocPacket(payload);
      paddings.push(Buffer.from(packet.subarray(5 + payload, 5 + payload + packet[4])));
    }
    const drawn = Buffer.concat(paddings);
    expect(drawn.length).toBeGreaterThan(3 * PADDING_POOL_BYTES - 20 * 3);
    // Random bytes handed out once: a repeated 8-byte run (p ≈ n²/2^65, under 1e-9 here) means reuse.
    const seen = new Set<bigint>();
    for (let at = 0; at + 8 <= drawn.length; at++) seen.add(drawn.readBigUInt64LE(at));
    expect(seen.size).toBe(drawn.length - 7);
    // Nor a byte or a few at the seam of two paddings: one's last byte is the next one's first 1 time in 256, not always.
    const seams = paddings.slice(1).filter((p, i) => p[0] === paddings[i].at(-1)).length;
    expect(seams).toBeLessThan(paddings.length / 20);
  });

  it.each([
    ['chacha20-poly1305@openssh.com', 'its tag'],
    ['aes128-gcm@openssh.com', 'its tag'],
    ['aes128-ctr', 'hmac-sha2-256-etm@openssh.com'],
    ['aes256-ctr', 'hmac-sha2-256'],
  ])('keeps a connection with %s and %s whole: 1 MiB echoed back byte for byte', async (cipher, mac) => {
    poolPacketPadding();
    const client = await echoPair(cipher, mac);
    const data = Buffer.alloc(1024 * 1024);
    for (let i = 0; i < data.length; i++) data[i] = (i * 7 + (i >> 11)) & 0xff;
    const channel = await new Promise<ServerChannel>((resolve, reject) => client.exec('echo', (err, c) => (err ? reject(err) : resolve(c))));
    const got: Buffer[] = [];
    let n = 0;
    const all = new Promise<void>((resolve) =>
      channel.on('data', (d: Buffer) => {
        got.push(d);
        n += d.length;
        if (n >= data.length) resolve();
      }),
    );
    channel.write(data);
    await all;
    expect(Buffer.concat(got).equals(data)).toBe(true);
  });
});
