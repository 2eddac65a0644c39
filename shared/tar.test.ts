import { describe, expect, it } from 'vitest';
import { BLOCK, MAX_META, readTar, TarFormatError, tarHeader, TarParser, writeTar, type TarEntry } from './tar.js';

const entries: TarEntry[] = [
  { name: 'top/', type: 'directory', mode: 0o755 },
  { name: 'top/short.txt', type: 'file', mode: 0o644, data: Buffer.from('short') },
  // fits ustar only with the prefix field
  { name: `top/${'d'.repeat(120)}/${'f'.repeat(90)}`, type: 'file', mode: 0o600, data: Buffer.alloc(513, 1) },
  // needs a PAX path record
  { name: `top/${'x'.repeat(300)}`, type: 'file', mode: 0o644, data: Buffer.from('long') },
  { name: 'top/link', type: 'symlink', mode: 0o777, linkname: 'short.txt' },
];

describe('tar', () => {
  it('reads back what it writes: ustar prefix and PAX names, files, directories, symlinks', () => {
    const archive = writeTar(entries);
    expect(archive.length % BLOCK).toBe(0);
    const back = readTar(archive);
    expect(back.map((e) => [e.name, e.type, e.mode, e.data?.length, e.linkname || undefined])).toEqual(
      entries.map((e) => [e.name, e.type, e.mode, e.type === 'file' ? e.data!.length : undefined, e.linkname]),
    );
    expect(back[2].data!.equals(entries[2].data!)).toBe(true);
  });

  it('parses the same archive fed one byte at a time', () => {
    const archive = writeTar(entries);
    const parser = new TarParser();
    const names: string[] = [];
    let data = 0;
    for (let i = 0; i < archive.length; i++) {
      for (const event of parser.push(archive.subarray(i, i + 1))) {
        if (event.t === 'entry') names.push(event.header.name);
        if (event.t === 'data') data += event.data.length;
      }
    }
    expect(parser.ended).toBe(true);
    expect(names).toEqual(entries.map((e) => e.name));
    expect(data).toBe(5 + 513 + 4);
  });

  it('refuses a damaged header and a metadata record larger than the limit', () => {
    const archive = writeTar([entries[1]]);
    archive[10] ^= 0xff;
    expect(() => readTar(archive)).toThrow(TarFormatError);

    const pax = tarHeader({ name: 'PaxHeader', type: 'file', mode: 0o644, size: MAX_META + 1 });
    // Turn it into a PAX record header ('x'), fixing its checksum.
    pax.write('x', 156, 1, 'ascii');
    pax.write('        ', 148, 8, 'ascii');
    let sum = 0;
    for (const b of pax) sum += b;
    pax.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'ascii');
    expect(() => new TarParser().push(pax)).toThrow(/larger than/);
  });

  it('reports an archive cut before its end marker', () => {
    const archive = writeTar(entries);
    expect(() => readTar(archive.subarray(0, archive.length - 2 * BLOCK))).toThrow(/end marker/);
  });
});
