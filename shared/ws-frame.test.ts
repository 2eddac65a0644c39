import { describe, expect, it } from 'vitest';
import { binaryHeaderLength, maskInPlace, maskInto, writeBinaryHeader } from './ws-frame.js';

describe('ws-frame', () => {
  it('writes the length in 7, 16 or 64 bits at the boundaries RFC 6455 sets', () => {
    for (const [length, bytes, marker] of [
      [125, 2, 125],
      [126, 4, 126],
      [65535, 4, 126],
      [65536, 10, 127],
    ] as const) {
      const header = Buffer.alloc(binaryHeaderLength(length, false));
      expect(header.length).toBe(bytes);
      expect(writeBinaryHeader(header, length, false)).toBeUndefined();
      expect(header[0]).toBe(0x82);
      expect(header[1]).toBe(marker);
      if (marker === 126) expect(header.readUInt16BE(2)).toBe(length);
      if (marker === 127) expect(Number(header.readBigUInt64BE(2))).toBe(length);
    }
  });

  it('a masked header carries the MASK bit and a fresh key each time, which unmasks the payload', () => {
    const payload = Buffer.from(Array.from({ length: 300 }, (_, i) => i & 0xff));
    const header = Buffer.alloc(binaryHeaderLength(payload.length, true));
    const mask = writeBinaryHeader(header, payload.length, true)!;
    expect(header[1] & 0x80).toBe(0x80);
    expect(header.subarray(header.length - 4)).toEqual(mask);
    const other = writeBinaryHeader(Buffer.alloc(header.length), payload.length, true)!;
    expect(other.equals(mask)).toBe(false);
    const data = Buffer.from(payload);
    maskInPlace(data, mask);
    expect(data.equals(payload)).toBe(false);
    for (let i = 0; i < data.length; i++) data[i] ^= mask[i & 3];
    expect(data.equals(payload)).toBe(true);
  });

  it('masks from any phase of the key, short and long payloads alike', () => {
    const mask = Buffer.from([1, 2, 3, 4]);
    for (const size of [5, 100]) {
      const source = Buffer.alloc(size, 0xaa);
      const out = Buffer.alloc(size + 3);
      maskInto(source, mask, out, 3, 2);
      for (let i = 0; i < size; i++) expect(out[3 + i]).toBe(0xaa ^ mask[(2 + i) & 3]);
    }
  });
});
