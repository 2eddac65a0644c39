/**
 * The tar format (POSIX ustar, with PAX and GNU long-name records read), as far as file transfer
 * needs it: regular files, directories and symlinks. Written as ustar, with a PAX record for a
 * name or size ustar cannot hold. Parsing is incremental and holds at most one header, or one PAX or
 * long-name record of up to MAX_META bytes, whatever the archive says.
 */

export const BLOCK = 512;
/** Largest PAX or GNU long-name record accepted. */
export const MAX_META = 64 * 1024;
const MAX_OCTAL_SIZE = 0o77777777777;

export type TarEntryType = 'file' | 'directory' | 'symlink' | 'other';

export interface TarHeader {
  name: string;
  type: TarEntryType;
  mode: number;
  size?: number;
  mtime?: number;
  linkname?: string;
}

export interface TarEntry extends TarHeader {
  data?: Buffer;
}

export class TarFormatError extends Error {}

function writeString(block: Buffer, offset: number, length: number, value: string): void {
  block.write(value, offset, Math.min(length, Buffer.byteLength(value)), 'utf8');
}

function writeOctal(block: Buffer, offset: number, length: number, value: number): void {
  block.write(
    `${Math.floor(value)
      .toString(8)
      .padStart(length - 1, '0')}\0`,
    offset,
    length,
    'ascii',
  );
}

function paxRecord(key: string, value: string): string {
  const body = ` ${key}=${value}\n`;
  let length = Buffer.byteLength(body);
  let text = `${length}${body}`;
  // The length counts its own digits.
  while (Buffer.byteLength(text) !== length) {
    length = Buffer.byteLength(text);
    text = `${length}${body}`;
  }
  return text;
}

function padding(size: number): Buffer {
  const rest = size % BLOCK;
  return Buffer.alloc(rest === 0 ? 0 : BLOCK - rest);
}

function ustarBlock(name: string, prefix: string, header: TarHeader, size: number, typeflag: string): Buffer {
  const block = Buffer.alloc(BLOCK);
  writeString(block, 0, 100, name);
  writeOctal(block, 100, 8, header.mode & 0o7777);
  writeOctal(block, 108, 8, 0);
  writeOctal(block, 116, 8, 0);
  writeOctal(block, 124, 12, size);
  writeOctal(block, 136, 12, header.mtime ?? Math.floor(Date.now() / 1000));
  block.write('        ', 148, 8, 'ascii');
  block.write(typeflag, 156, 1, 'ascii');
  writeString(block, 157, 100, header.linkname ?? '');
  block.write('ustar\u000000', 257, 8, 'ascii');
  writeString(block, 345, 155, prefix);
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'ascii');
  return block;
}

/** Where a long name splits into ustar's prefix and name fields, if it can. */
function splitName(name: string): { prefix: string; name: string } | undefined {
  if (Buffer.byteLength(name) <= 100) return { prefix: '', name };
  for (let i = name.length - 1; i > 0; i--) {
    if (name[i] !== '/') continue;
    const prefix = name.slice(0, i);
    const rest = name.slice(i + 1);
    if (Buffer.byteLength(prefix) <= 155 && Buffer.byteLength(rest) <= 100 && rest.length > 0) return { prefix, name: rest };
  }
  return undefined;
}

/** The header block(s) of one entry: a PAX record first when ustar cannot hold the name or size. */
export function tarHeader(header: TarHeader): Buffer {
  const size = header.type === 'file' ? (header.size ?? 0) : 0;
  const typeflag = { file: '0', directory: '5', symlink: '2', other: '0' }[header.type];
  const split = splitName(header.name);
  const records: string[] = [];
  if (!split) records.push(paxRecord('path', header.name));
  if (size > MAX_OCTAL_SIZE) records.push(paxRecord('size', String(size)));
  if (header.linkname && Buffer.byteLength(header.linkname) > 100) records.push(paxRecord('linkpath', header.linkname));
  const main = ustarBlock(split?.name ?? header.name.slice(-100), split?.prefix ?? '', header, size > MAX_OCTAL_SIZE ? 0 : size, typeflag);
  if (records.length === 0) return main;
  const body = Buffer.from(records.join(''));
  const pax = ustarBlock('PaxHeader', '', { name: 'PaxHeader', type: 'file', mode: 0o644 }, body.length, 'x');
  return Buffer.concat([pax, body, padding(body.length), main]);
}

/** The bytes after a file's data that fill its last block. */
export function tarPadding(size: number): Buffer {
  return padding(size);
}

/** Two zero blocks end an archive. */
export function tarEnd(): Buffer {
  return Buffer.alloc(2 * BLOCK);
}

/** A whole archive in memory (for tests and small archives). */
export function writeTar(entries: TarEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const entry of entries) {
    const data = entry.type === 'file' ? (entry.data ?? Buffer.alloc(0)) : Buffer.alloc(0);
    parts.push(tarHeader({ ...entry, size: data.length }), data, padding(data.length));
  }
  parts.push(tarEnd());
  return Buffer.concat(parts);
}

function readString(block: Buffer, offset: number, length: number): string {
  const field = block.subarray(offset, offset + length);
  const end = field.indexOf(0);
  return field.subarray(0, end === -1 ? field.length : end).toString('utf8');
}

function readNumber(block: Buffer, offset: number, length: number): number {
  const field = block.subarray(offset, offset + length);
  if (field[0] & 0x80) {
    // GNU base-256: big-endian binary after the marker bit.
    let value = field[0] & 0x7f;
    for (let i = 1; i < field.length; i++) value = value * 256 + field[i];
    if (!Number.isSafeInteger(value)) throw new TarFormatError('number out of range');
    return value;
  }
  const text = field
    .toString('ascii')
    .replace(/[\0 ]+$/g, '')
    .replace(/^ +/, '');
  if (text === '') return 0;
  if (!/^[0-7]+$/.test(text)) throw new TarFormatError(`invalid octal field ${JSON.stringify(text)}`);
  return parseInt(text, 8);
}

function checksumOk(block: Buffer): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : block[i];
  return readNumber(block, 148, 8) === sum;
}

function parsePax(body: Buffer): Map<string, string> {
  const records = new Map<string, string>();
  let offset = 0;
  while (offset < body.length) {
    const space = body.indexOf(0x20, offset);
    if (space === -1) break;
    const length = Number(body.subarray(offset, space).toString('ascii'));
    if (!Number.isInteger(length) || length <= 0 || offset + length > body.length) throw new TarFormatError('malformed PAX record');
    const record = body.subarray(space + 1, offset + length - 1).toString('utf8');
    const eq = record.indexOf('=');
    if (eq > 0) records.set(record.slice(0, eq), record.slice(eq + 1));
    offset += length;
  }
  return records;
}

export type TarEvent = { t: 'entry'; header: TarHeader } | { t: 'data'; data: Buffer } | { t: 'end-entry' } | { t: 'end' };

/**
 * An incremental tar reader: `push` bytes, get back what they completed. Data arrives in the
 * pieces it was pushed in, never gathered; only a header or a metadata record is held.
 */
export class TarParser {
  private held: Buffer = Buffer.alloc(0);
  /** bytes of the current entry's data still to come, then the padding to skip */
  private remaining = 0;
  private skip = 0;
  private meta?: { kind: 'pax' | 'gnu-name' | 'gnu-link' | 'ignored'; size: number; parts: Buffer[]; got: number };
  private pax = new Map<string, string>();
  private longName?: string;
  private longLink?: string;
  ended = false;

  push(chunk: Buffer): TarEvent[] {
    const events: TarEvent[] = [];
    let input = chunk;
    while (input.length > 0 && !this.ended) {
      if (this.remaining > 0) {
        const n = Math.min(this.remaining, input.length);
        const piece = input.subarray(0, n);
        input = input.subarray(n);
        this.remaining -= n;
        if (this.meta) {
          this.meta.parts.push(Buffer.from(piece));
          this.meta.got += n;
        } else events.push({ t: 'data', data: piece });
        if (this.remaining === 0) this.finishBody(events);
        continue;
      }
      if (this.skip > 0) {
        const n = Math.min(this.skip, input.length);
        input = input.subarray(n);
        this.skip -= n;
        continue;
      }
      const need = BLOCK - this.held.length;
      this.held = Buffer.concat([this.held, input.subarray(0, need)]);
      input = input.subarray(need);
      if (this.held.length < BLOCK) break;
      const block = this.held;
      this.held = Buffer.alloc(0);
      this.onHeader(block, events);
    }
    return events;
  }

  private finishBody(events: TarEvent[]): void {
    const size = this.meta ? this.meta.size : this.currentSize;
    this.skip = padding(size).length;
    if (this.meta) {
      const body = Buffer.concat(this.meta.parts);
      if (this.meta.kind === 'pax') for (const [k, v] of parsePax(body)) this.pax.set(k, v);
      if (this.meta.kind === 'gnu-name') this.longName = readString(body, 0, body.length);
      if (this.meta.kind === 'gnu-link') this.longLink = readString(body, 0, body.length);
      this.meta = undefined;
      return;
    }
    events.push({ t: 'end-entry' });
  }

  private currentSize = 0;

  private onHeader(block: Buffer, events: TarEvent[]): void {
    if (block.every((b) => b === 0)) {
      this.ended = true;
      events.push({ t: 'end' });
      return;
    }
    if (!checksumOk(block)) throw new TarFormatError('header checksum mismatch: not a tar archive, or a damaged one');
    const typeflag = String.fromCharCode(block[156] || 0x30);
    let size = readNumber(block, 124, 12);
    if (typeflag === 'x' || typeflag === 'g' || typeflag === 'L' || typeflag === 'K') {
      if (size > MAX_META) throw new TarFormatError(`metadata record of ${size} bytes is larger than ${MAX_META}`);
      const kind = typeflag === 'x' ? 'pax' : typeflag === 'L' ? 'gnu-name' : typeflag === 'K' ? 'gnu-link' : 'ignored';
      this.meta = { kind, size, parts: [], got: 0 };
      this.remaining = size;
      if (size === 0) this.finishBody(events);
      return;
    }
    const magic = block.subarray(257, 262).toString('ascii');
    const prefix = magic === 'ustar' ? readString(block, 345, 155) : '';
    let name = readString(block, 0, 100);
    if (prefix) name = `${prefix}/${name}`;
    name = this.pax.get('path') ?? this.longName ?? name;
    const linkname = this.pax.get('linkpath') ?? this.longLink ?? readString(block, 157, 100);
    if (this.pax.has('size')) size = Number(this.pax.get('size'));
    if (!Number.isSafeInteger(size) || size < 0) throw new TarFormatError('invalid entry size');
    this.pax.clear();
    this.longName = undefined;
    this.longLink = undefined;
    const type: TarEntryType = typeflag === '0' || typeflag === '7' ? 'file' : typeflag === '5' ? 'directory' : typeflag === '2' ? 'symlink' : 'other';
    // Only files carry data; other types' size is still skipped (hard links, devices carry none).
    const dataSize = type === 'file' || type === 'other' ? size : 0;
    this.currentSize = dataSize;
    events.push({ t: 'entry', header: { name, type, mode: readNumber(block, 100, 8), size: dataSize, mtime: readNumber(block, 136, 12), linkname } });
    this.remaining = dataSize;
    if (dataSize === 0) this.finishBody(events);
  }
}

/** Reads a whole archive in memory (for tests and small archives). */
export function readTar(archive: Buffer): TarEntry[] {
  const parser = new TarParser();
  const entries: TarEntry[] = [];
  let current: TarEntry | undefined;
  let parts: Buffer[] = [];
  for (const event of parser.push(archive)) {
    if (event.t === 'entry') {
      current = { ...event.header };
      parts = [];
    } else if (event.t === 'data') parts.push(Buffer.from(event.data));
    else if (event.t === 'end-entry' && current) {
      if (current.type === 'file') current.data = Buffer.concat(parts);
      entries.push(current);
      current = undefined;
    }
  }
  if (!parser.ended) throw new TarFormatError('the archive ends before its end marker');
  return entries;
}
