/**
 * WebSocket frame pieces for the paths that write frames on the socket themselves, past ws
 * (shared/mux-frame.ts for channel data, cli/remote.ts for `fleet connect`'s reads): a final
 * binary frame's header (RFC 6455 §5.2), a fresh masking key, and masking with ws's own native
 * routine (bufferutil) where it is installed.
 */
import crypto from 'node:crypto';
import { createRequire } from 'node:module';

type MaskFn = (source: Buffer, mask: Buffer, output: Buffer, offset: number, length: number) => void;
/** The native masking ws itself uses (bufferutil), when it is installed; else the same in JavaScript. */
const nativeMask: MaskFn | undefined = (() => {
  try {
    return (createRequire(import.meta.url)('bufferutil') as { mask: MaskFn }).mask;
  } catch {
    return undefined;
  }
})();
/** Below this size the JavaScript loop is as fast as a call into native code (ws's own threshold). */
const NATIVE_MASK_MIN = 48;

/** Random bytes for masking keys, drawn in bulk (as ws does). */
const maskPool = Buffer.alloc(8 * 1024);
let maskPoolAt = maskPool.length;

/** The length of a binary frame's header for a payload of `length` bytes, with the 4-byte key when masked. */
export function binaryHeaderLength(length: number, masked: boolean): number {
  return 2 + (length < 126 ? 0 : length < 65536 ? 2 : 8) + (masked ? 4 : 0);
}

/**
 * Writes a final binary frame's header at the start of `frame` (FIN, opcode 2, the length in 7, 16
 * or 64 bits); masked, with a fresh random key as its last 4 bytes, which it answers (a view).
 */
export function writeBinaryHeader(frame: Buffer, length: number, masked: boolean): Buffer | undefined {
  frame[0] = 0x82;
  const flag = masked ? 0x80 : 0;
  if (length < 126) frame[1] = flag | length;
  else if (length < 65536) {
    frame[1] = flag | 126;
    frame.writeUInt16BE(length, 2);
  } else {
    frame[1] = flag | 127;
    frame.writeBigUInt64BE(BigInt(length), 2);
  }
  if (!masked) return undefined;
  if (maskPoolAt + 4 > maskPool.length) {
    crypto.randomFillSync(maskPool);
    maskPoolAt = 0;
  }
  const end = binaryHeaderLength(length, true);
  const mask = frame.subarray(end - 4, end);
  maskPool.copy(mask, 0, maskPoolAt, maskPoolAt + 4);
  maskPoolAt += 4;
  return mask;
}

/** The key turned to a phase, for the native routine (which starts every key at its first byte). */
const phasedKey = Buffer.alloc(4);

/** Masks `source` into `output` at `offset`; the key's phase starts at `phase` (a byte index of the masked payload). */
export function maskInto(source: Buffer, mask: Buffer, output: Buffer, offset: number, phase: number): void {
  if (nativeMask && source.length >= NATIVE_MASK_MIN) {
    if ((phase & 3) === 0) return nativeMask(source, mask, output, offset, source.length);
    for (let k = 0; k < 4; k++) phasedKey[k] = mask[(phase + k) & 3];
    return nativeMask(source, phasedKey, output, offset, source.length);
  }
  for (let i = 0; i < source.length; i++) output[offset + i] = source[i] ^ mask[(phase + i) & 3];
}

/** Masks `data` where it lies. */
export function maskInPlace(data: Buffer, mask: Buffer): void {
  maskInto(data, mask, data, 0, 0);
}
