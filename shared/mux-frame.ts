/**
 * A channel's data frame (`[channel id][bytes]`, protocol.ts) written straight to the WebSocket's
 * socket, framed here as one final binary frame (RFC 6455 §5.2), so that the bytes are not copied
 * to be framed. At either end the frame is a small head (the header and the channel id) written
 * before the payload, in one writev:
 *  - from the broker (a server: frames unmasked), the payload is the caller's buffers themselves;
 *  - from the agent (a client: every frame masked with a fresh random key, §5.3), the payload is
 *    masked once, where `ws.send(encodeData(…))` copied it to frame it and then again to mask it.
 *    A payload handed over (mux-channel.ts handOver: a tunnel's read buffer, reused only once its
 *    write is done) is masked where it lies; any other is only read, and masked into a buffer of a
 *    small pool, taken back once the socket has flushed it (FramePool): a download's frames were a
 *    fresh 128 KiB buffer each, and their allocation and the major garbage collections it set off
 *    were most of the agent's CPU per GB.
 * The receiving end sees the same frame as before. ws is bypassed only while it has nothing queued
 * (no compression, no frame of its own waiting), so frames keep their order; otherwise the caller
 * sends through ws.
 */
import type { Socket } from 'node:net';
import type WebSocket from 'ws';
import type { FramePayload } from './mux-channel.js';
import { BULK_FRAME } from './mux-scheduler.js';
import { binaryHeaderLength, maskInto, writeBinaryHeader } from './ws-frame.js';

/** What of ws this reads: its socket, whether its sender is idle, and which end it is. */
interface WsInternals {
  _socket?: Socket;
  _sender?: { _state?: number; _queue?: unknown[] };
  _isServer?: boolean;
}

/** A pooled buffer holds one masked payload, up to a bulk frame's (the frame's head is written before it). */
export const FRAME_BUFFER_SIZE = BULK_FRAME;
/**
 * Shorter payloads are masked into a fresh buffer: a pooled buffer holds one frame, and a small frame
 * in it would leave most of it idle (up to SEND_IN_FLIGHT_MAX / 4 KiB small frames may be in flight at once).
 */
const POOLED_PAYLOAD_MIN = FRAME_BUFFER_SIZE / 2;
/** Buffers kept for reuse: the frames in flight (SEND_IN_FLIGHT_MAX is one bulk frame) and some to spare. */
const FRAME_POOL_SIZE = 4;

/**
 * Buffers for masked frames, reused: a buffer is the socket's from the write that carries it until
 * that write's callback (flushed, or failed: either way the socket is done with it), then it goes
 * back to the pool. While more are out than the pool keeps (a socket that stops taking them),
 * the others are fresh buffers, dropped after their write.
 */
class FramePool {
  private readonly free: Buffer[] = [];
  /** @internal counters for tests: buffers allocated, and takes served by a reused one. */
  readonly stats = { allocated: 0, reused: 0 };

  take(): Buffer {
    const buf = this.free.pop();
    if (buf) {
      this.stats.reused += 1;
      return buf;
    }
    this.stats.allocated += 1;
    return Buffer.allocUnsafeSlow(FRAME_BUFFER_SIZE);
  }

  give(buf: Buffer): void {
    if (this.free.length < FRAME_POOL_SIZE) this.free.push(buf);
  }
}

/** @internal one pool for the process (an agent has one connection; a broker's frames are unmasked). */
export const framePool = new FramePool();

/** The payload's bytes, however many buffers carry them. */
export function payloadLength(payload: FramePayload): number {
  if (Buffer.isBuffer(payload)) return payload.length;
  let n = 0;
  for (const part of payload) n += part.length;
  return n;
}

/**
 * Writes `[ch][payload]` as one binary frame on the WebSocket's socket: a head (the frame's header
 * and the channel id) and then the payload, at either end. `done` runs once the socket has flushed
 * it (with the error, if the socket failed first); until then `payload` is the socket's. From the
 * broker (a server) the payload is written as it is. From a client every byte after the header is
 * masked (RFC 6455 §5.3): an `owned` payload (the caller never reads it again: mux-channel.ts
 * handOver) where it lies, any other into a frame buffer (pooled for bulk frames) that is written in
 * its place. Answers false, having written nothing, when ws cannot be bypassed now: the caller then
 * sends through ws.
 */
export function writeDataFrame(ws: WebSocket, ch: number, payload: FramePayload, done: (err?: Error | null) => void, owned = false): boolean {
  const { _socket: socket, _sender: sender, _isServer: isServer } = ws as unknown as WsInternals;
  if (!socket || !sender || sender._state !== 0 || (sender._queue?.length ?? 0) > 0 || isServer === undefined) return false;
  const bytes = payloadLength(payload);
  const length = 4 + bytes;
  const headerLength = binaryHeaderLength(length, !isServer);
  const head = Buffer.allocUnsafe(headerLength + 4);
  const key = writeBinaryHeader(head, length, !isServer);
  head.writeUInt32BE(ch, headerLength);
  let body: FramePayload = payload;
  let written = done;
  if (key) {
    // The channel id is the first 4 bytes of the masked payload: the key's phase is the same after it.
    for (let i = 0; i < 4; i++) head[headerLength + i] ^= key[i];
    if (owned) maskParts(payload, key, undefined);
    else if (bytes > 0) {
      const pooled = bytes >= POOLED_PAYLOAD_MIN && bytes <= FRAME_BUFFER_SIZE;
      const buffer = pooled ? framePool.take() : undefined;
      // Every byte of the frame is written here: nothing of a buffer's previous frame is sent again.
      body = buffer ? buffer.subarray(0, bytes) : Buffer.allocUnsafe(bytes);
      maskParts(payload, key, body);
      if (buffer)
        written = (err?: Error | null) => {
          framePool.give(buffer);
          done(err);
        };
    }
  }
  // One writev: the head, then the payload's buffers, the last write reporting the whole frame.
  socket.cork();
  socket.write(head, bytes === 0 ? written : undefined);
  if (bytes > 0) writeParts(socket, body, written);
  socket.uncork();
  return true;
}

/** Writes the payload's non-empty buffers, the last with `written`. */
function writeParts(socket: Socket, body: FramePayload, written: (err?: Error | null) => void): void {
  if (Buffer.isBuffer(body)) return void socket.write(body, written);
  let last = body.length - 1;
  while (body[last].length === 0) last -= 1;
  for (let i = 0; i <= last; i++) if (body[i].length > 0) socket.write(body[i], i === last ? written : undefined);
}

/** Masks the payload's bytes (after the 4-byte channel id: the key's phase starts at 0) into `output`, or where they lie. */
function maskParts(payload: FramePayload, key: Buffer, output: Buffer | undefined): void {
  if (Buffer.isBuffer(payload)) return maskInto(payload, key, output ?? payload, 0, 0);
  let at = 0;
  for (const part of payload) {
    maskInto(part, key, output ?? part, output ? at : 0, at);
    at += part.length;
  }
}
