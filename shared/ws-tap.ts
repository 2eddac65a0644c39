/**
 * Binary frames read straight off a WebSocket's socket, piece by piece as the socket's reads
 * bring them, for the data paths (the mux's channel data, a tunnel's bytes from the user): ws
 * re-assembles a frame that spans several reads (a 128 KiB frame comes in 64 KiB reads) by copying
 * it into a new buffer, and that copy, and the garbage collection the fresh buffers bring, were the
 * largest costs after the system calls. Here each piece is a view of the read that brought it
 * (unmasked in place, as ws does), handed on at once; nothing is re-assembled.
 *
 * Only what the tap is sure of is taken: a final, uncompressed binary frame, masked exactly when the
 * peer must mask (a client's frames), no larger than ws's maxPayload, outside a fragmented message.
 * Every other frame (text, control, continuation, anything malformed or oversized) and everything
 * after a close frame go to ws's own parser byte for byte, which reads or refuses them as before.
 * The tap starts at a frame boundary: while ws holds part of a frame, reads still go to ws.
 */
import type WebSocket from 'ws';
import { maskInto } from './ws-frame.js';

/** Bytes `at` to `at + piece.length` of a binary frame's payload of `length` bytes (a view of the socket's read). */
export type PieceHandler = (piece: Buffer, at: number, length: number) => void;

/** What of ws's receiver this reads: the write the socket's reads go to, and whether it is between frames. */
interface ReceiverInternals {
  write(chunk: Buffer): boolean;
  _isServer?: boolean;
  _maxPayload?: number;
  _state?: number;
  _bufferedBytes?: number;
  _fragmented?: number;
  _opcode?: number;
}

const OPCODE_BINARY = 2;
const OPCODE_CLOSE = 8;
/** Longest frame header: 2 bytes, a 64-bit length, a masking key. */
const MAX_HEADER = 14;
/** ws refuses 64-bit lengths whose high word is above this (payloads beyond 2^53 - 1). */
const MAX_HIGH_WORD = 2 ** 21 - 1;

/**
 * Hands the payloads of the binary frames the WebSocket receives to `onPiece` instead of ws's
 * 'message' (see above); `onPiece` must not throw. Answers false, changing nothing, when ws's
 * receiver is not the one this was written against: the caller then reads 'message' as before.
 * With `reusedReads` (the socket's reads land in buffers that are read into again), what goes to
 * ws is copied first, as ws keeps the bytes of a frame until it is whole.
 */
export function tapBinaryFrames(ws: WebSocket, onPiece: PieceHandler, reusedReads = false): boolean {
  const receiver = (ws as unknown as { _receiver?: ReceiverInternals })._receiver;
  if (!receiver || typeof receiver.write !== 'function' || typeof receiver._isServer !== 'boolean') return false;
  if (typeof receiver._state !== 'number' || typeof receiver._bufferedBytes !== 'number') return false;
  const write = receiver.write.bind(receiver);
  const wsWrite = reusedReads ? (chunk: Buffer) => write(Buffer.from(chunk)) : write;
  const reader = new FrameTap(receiver._isServer, receiver._maxPayload ?? 0, onPiece, wsWrite, () => atBoundary(receiver));
  receiver.write = (chunk: Buffer) => reader.write(chunk);
  return true;
}

/** Whether ws's parser holds nothing of a frame (nor of a fragmented message), and saw no close. */
function atBoundary(r: ReceiverInternals): boolean {
  return r._state === 0 && r._bufferedBytes === 0 && !r._fragmented && r._opcode !== OPCODE_CLOSE;
}

const enum State {
  /** reading a frame header (into `header`) */
  header,
  /** a taken frame's payload: handed to onPiece */
  take,
  /** another frame's payload: handed to ws */
  pass,
}

/** @internal exported for its tests */
export class FrameTap {
  private synced = false;
  /** After a close frame everything goes to ws. */
  private off = false;
  private state = State.header;
  private readonly header = Buffer.alloc(MAX_HEADER);
  private headerHave = 0;
  /** A binary or text frame without FIN was passed: its continuations are ws's until the final one. */
  private fragmented = false;
  private length = 0;
  private at = 0;
  private remaining = 0;
  private mask?: Buffer;
  private readonly phased = Buffer.alloc(4);

  constructor(
    private readonly isServer: boolean,
    private readonly maxPayload: number,
    private readonly onPiece: PieceHandler,
    private readonly wsWrite: (chunk: Buffer) => boolean,
    private readonly wsAtBoundary: () => boolean,
  ) {}

  write(chunk: Buffer): boolean {
    if (this.off) return this.wsWrite(chunk);
    if (!this.synced) {
      if (!this.wsAtBoundary()) return this.wsWrite(chunk);
      this.synced = true;
    }
    let ok = true;
    let i = 0;
    while (i < chunk.length) {
      if (this.off) return this.wsWrite(chunk.subarray(i)) && ok;
      if (this.state === State.header) {
        i = this.readHeader(chunk, i);
        if (this.state === State.header) break; // the header continues in the next read
        if (this.state === State.pass) ok = this.wsWrite(Buffer.from(this.header.subarray(0, this.headerHave))) && ok;
        this.headerHave = 0;
        if (this.state === State.take && this.length === 0) this.onPiece(chunk.subarray(i, i), 0, 0);
        if (this.remaining === 0) this.state = State.header;
        continue;
      }
      const n = Math.min(this.remaining, chunk.length - i);
      const piece = chunk.subarray(i, i + n);
      i += n;
      this.remaining -= n;
      if (this.state === State.pass) ok = this.wsWrite(piece) && ok;
      else {
        if (this.mask) this.unmask(piece);
        const at = this.at;
        this.at += n;
        this.onPiece(piece, at, this.length);
      }
      if (this.remaining === 0) this.state = State.header;
    }
    return ok;
  }

  /** Reads header bytes from `chunk` at `i`; once the header is whole, decides take or pass. Answers the new index. */
  private readHeader(chunk: Buffer, i: number): number {
    const h = this.header;
    while (i < chunk.length) {
      const need = this.headerHave < 2 ? 2 : headerLength(h[1]);
      if (this.headerHave >= need) break;
      const n = Math.min(need - this.headerHave, chunk.length - i);
      chunk.copy(h, this.headerHave, i, i + n);
      this.headerHave += n;
      i += n;
    }
    if (this.headerHave < 2 || this.headerHave < headerLength(h[1])) return i;
    const fin = (h[0] & 0x80) !== 0;
    const rsv = h[0] & 0x70;
    const opcode = h[0] & 0x0f;
    const masked = (h[1] & 0x80) !== 0;
    const len7 = h[1] & 0x7f;
    let length = len7;
    let readable = true;
    if (len7 === 126) length = h.readUInt16BE(2);
    else if (len7 === 127) {
      const high = h.readUInt32BE(2);
      readable = high <= MAX_HIGH_WORD;
      length = high * 2 ** 32 + h.readUInt32BE(6);
    }
    const take =
      readable &&
      !this.fragmented &&
      fin &&
      rsv === 0 &&
      opcode === OPCODE_BINARY &&
      masked === this.isServer &&
      (this.maxPayload <= 0 || length <= this.maxPayload);
    this.length = length;
    this.remaining = readable ? length : 0;
    this.at = 0;
    this.mask = take && masked ? h.subarray(this.headerHave - 4, this.headerHave) : undefined;
    if (take) this.state = State.take;
    else {
      this.state = State.pass;
      this.track(fin, opcode);
      // ws refuses what it cannot read and closes: from here on everything is its own.
      if (!readable || opcode === OPCODE_CLOSE) this.off = true;
    }
    return i;
  }

  /** Follows a fragmented message that ws reads (text, or binary without FIN, and its continuations). */
  private track(fin: boolean, opcode: number): void {
    if ((opcode === 1 || opcode === OPCODE_BINARY) && !fin) this.fragmented = true;
    else if (opcode === 0 && fin) this.fragmented = false;
  }

  /** Unmasks a piece in place; its first byte is payload byte `this.at`, so the key starts at that phase. */
  private unmask(piece: Buffer): void {
    const mask = this.mask as Buffer;
    const phase = this.at & 3;
    for (let k = 0; k < 4; k++) this.phased[k] = mask[(phase + k) & 3];
    maskInto(piece, this.phased, piece, 0, 0);
  }
}

/** A header's length from its second byte: 2, plus the extended length, plus the key when masked. */
function headerLength(second: number): number {
  const len7 = second & 0x7f;
  return 2 + (len7 === 126 ? 2 : len7 === 127 ? 8 : 0) + (second & 0x80 ? 4 : 0);
}
