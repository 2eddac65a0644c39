/**
 * ssh2 pads every packet it sends with fresh random bytes from one `crypto.randomFillSync` call
 * per packet (4 to 19 bytes each). In a profile of an scp download through the gateway that call
 * cost the broker as much CPU as encrypting the packet itself: each is a trip through Node's crypto
 * job machinery for a few bytes. Here the padding comes from a pooled buffer of the same CSPRNG's
 * output, filled 64 KiB at a time and each byte handed out once (as OpenSSH pads from its own
 * buffered arc4random). Only the packet ciphers whose layout is checked against ssh2's own
 * allocPacket, packet by packet, at install are changed; any other keeps ssh2's.
 */
import { randomFillSync } from 'node:crypto';
import { createRequire } from 'node:module';

/** Random bytes drawn at once; each is handed out once. */
export const PADDING_POOL_BYTES = 64 * 1024;

/** ssh2's outbound cipher, as far as packet allocation goes (ssh2 1.x, lib/protocol/crypto.js). */
interface PacketCipher {
  allocPacket(payloadLen: number): Buffer;
  _encBlockLen?: number;
  _aadLen?: number;
  _macLen?: number;
}

interface Ssh2Crypto {
  CIPHER_INFO: Record<string, { keyLen: number; ivLen: number }>;
  MAC_INFO: Record<string, { len: number }>;
  createCipher(config: unknown): PacketCipher;
}

/** Where a cipher class puts its padding: its block, what of the packet is not padded to it (an AEAD's or ETM's length field), what follows (a MAC or tag written in place). */
interface Layout {
  block(c: PacketCipher): number;
  aad(c: PacketCipher): number;
  trailer(c: PacketCipher): number;
}

const fixed = (n: number) => () => n;
/** ssh2's cipher classes by name, with the layout each allocPacket makes. */
const LAYOUTS: Record<string, Layout> = {
  ChaChaPolyCipherBinding: { block: fixed(8), aad: fixed(4), trailer: fixed(16) },
  ChaChaPolyCipherNative: { block: fixed(8), aad: fixed(4), trailer: fixed(0) },
  AESGCMCipherBinding: { block: fixed(16), aad: fixed(4), trailer: fixed(16) },
  AESGCMCipherNative: { block: fixed(16), aad: fixed(4), trailer: fixed(0) },
  GenericCipherBinding: { block: (c) => c._encBlockLen ?? 0, aad: (c) => c._aadLen ?? 0, trailer: (c) => c._macLen ?? 0 },
  GenericCipherNative: { block: (c) => c._encBlockLen ?? 0, aad: (c) => c._aadLen ?? 0, trailer: fixed(0) },
};

let pool = Buffer.alloc(0);
let used = 0;
/** @internal for tests: pool fills so far. */
export const paddingStats = { fills: 0 };

/** Writes `n` random bytes at `offset` of `target`, from the pool. */
function pad(target: Buffer, offset: number, n: number): void {
  if (used + n > pool.length) {
    pool = randomFillSync(Buffer.allocUnsafeSlow(PADDING_POOL_BYTES));
    used = 0;
    paddingStats.fills += 1;
  }
  for (let i = 0; i < n; i++) target[offset + i] = pool[used + i];
  // Handed out once: the bytes are not read again before the next fill overwrites them.
  used += n;
}

/** ssh2's allocPacket for `layout`, its padding from the pool. */
function pooledAllocPacket(layout: Layout) {
  return function allocPacket(this: PacketCipher, payloadLen: number): Buffer {
    const block = layout.block(this);
    let pktLen = 4 + 1 + payloadLen;
    let padLen = block - ((pktLen - layout.aad(this)) & (block - 1));
    if (padLen < 4) padLen += block;
    pktLen += padLen;
    const packet = Buffer.allocUnsafe(pktLen + layout.trailer(this));
    packet.writeUInt32BE(pktLen - 4, 0);
    packet[4] = padLen;
    pad(packet, 5 + payloadLen, padLen);
    return packet;
  };
}

/** Whether `ours` lays out packets exactly as ssh2's `theirs` does (length, padding length, size) for payloads of every length up to a few blocks, and a full one. */
function sameLayout(cipher: PacketCipher, theirs: PacketCipher['allocPacket'], ours: PacketCipher['allocPacket']): boolean {
  const lengths = [...Array.from({ length: 80 }, (_, i) => i), 32 * 1024 + 9, 35_000];
  return lengths.every((n) => {
    const a = theirs.call(cipher, n);
    const b = ours.call(cipher, n);
    return a.length === b.length && a.readUInt32BE(0) === b.readUInt32BE(0) && a[4] === b[4];
  });
}

let installed: string[] | undefined;

/**
 * Pools ssh2's packet padding (see above), once per process; returns the cipher classes changed
 * (an empty list when ssh2 is not the 1.x this knows: then nothing is changed).
 */
export function poolPacketPadding(): string[] {
  if (installed) return installed;
  installed = [];
  let crypto: Ssh2Crypto;
  try {
    crypto = createRequire(import.meta.url)('ssh2/lib/protocol/crypto.js') as Ssh2Crypto;
  } catch {
    return installed;
  }
  const samples: [string, string | undefined][] = [
    ['chacha20-poly1305@openssh.com', undefined],
    ['aes128-gcm@openssh.com', undefined],
    ['aes128-ctr', 'hmac-sha2-256-etm@openssh.com'],
  ];
  for (const forceNative of [false, true]) {
    for (const [name, mac] of samples) {
      const info = crypto.CIPHER_INFO[name];
      const macInfo = mac ? crypto.MAC_INFO[mac] : undefined;
      if (!info || (mac && !macInfo)) continue;
      let cipher: PacketCipher;
      try {
        cipher = crypto.createCipher({
          outbound: {
            onWrite: () => {},
            cipherInfo: info,
            cipherKey: Buffer.alloc(info.keyLen),
            cipherIV: Buffer.alloc(info.ivLen),
            seqno: 0,
            forceNative,
            ...(macInfo ? { macInfo, macKey: Buffer.alloc(macInfo.len) } : {}),
          },
        });
      } catch {
        continue;
      }
      const proto = Object.getPrototypeOf(cipher) as PacketCipher & { constructor: { name: string } };
      const layout = LAYOUTS[proto.constructor.name];
      if (!layout || installed.includes(proto.constructor.name) || !Object.hasOwn(proto, 'allocPacket')) continue;
      const ours = pooledAllocPacket(layout);
      if (!sameLayout(cipher, proto.allocPacket, ours)) continue;
      proto.allocPacket = ours;
      installed.push(proto.constructor.name);
    }
  }
  return installed;
}
