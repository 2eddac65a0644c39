/**
 * A channel's data frame (`[channel id][bytes]`, protocol.ts) written straight to the WebSocket's
 * socket, framed here as one final binary frame (RFC 6455 §5.2), so that the bytes are not copied
 * to be framed:
 *  - from the broker (a server: frames unmasked), a small header carrying the channel id is written
 *    before the payload itself, which is not copied at all;
 *  - from the agent (a client: every frame masked with a fresh random key, §5.3), the payload is
 *    masked once into the frame, where `ws.send(encodeData(…))` copied it to frame it and then
 *    again to mask it. The frame is a buffer of a small pool, taken back once the socket has
 *    flushed it (FramePool): a download's frames were a fresh 128 KiB buffer each, and their
 *    allocation and the major garbage collections it set off were most of the agent's CPU per GB.
 *    The caller's payload is only read, unless it was handed over (mux-channel.ts handOver: a
 *    tunnel's read buffer, reused only once its write is done): that one is masked where it lies.
 * The receiving end sees the same frame as before. ws is bypassed only while it has nothing queued
 * (no compression, no frame of its own waiting), so frames keep their order; otherwise the caller
 * sends through ws.
 */
import type { Socket } from 'node:net';
import type WebSocket from 'ws';
import { BULK_FRAME } from './mux-scheduler.js';
import { binaryHeaderLength, maskInto, writeBinaryHeader } from './ws-frame.js';

/** What of ws this reads: its socket, whether its sender is idle, and which end it is. */
interface WsInternals {
  _socket?: Socket;
  _sender?: { _state?: number; _queue?: unknown[] };
  _isServer?: boolean;
}

/** The longest header (a 64-bit length and a masking key) and the channel id: a bulk frame fits a pooled buffer. */
export const FRAME_BUFFER_SIZE = 14 + 4 + BULK_FRAME;
/**
 * Shorter frames are allocated as before: a pooled buffer holds one frame, and a small frame in it
 * would leave most of it idle (up to SEND_IN_FLIGHT_MAX / 4 KiB small frames may be in flight at once).
 */
const POOLED_FRAME_MIN = FRAME_BUFFER_SIZE / 2;
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

/**
 * Writes `[ch][payload]` as one binary frame on the WebSocket's socket. `done` runs once the socket
 * has flushed it (with the error, if the socket failed first); until then `payload` is the socket's
 * (from the broker it is written as it is). From a client, an `owned` payload (the caller never
 * reads it again: mux-channel.ts handOver) is masked in place; any other is masked into a pooled
 * frame. Answers false, having written nothing, when ws cannot be bypassed now: the caller then
 * sends through ws.
 */
export function writeDataFrame(ws: WebSocket, ch: number, payload: Buffer, done: (err?: Error | null) => void, owned = false): boolean {
  const { _socket: socket, _sender: sender, _isServer: isServer } = ws as unknown as WsInternals;
  if (!socket || !sender || sender._state !== 0 || (sender._queue?.length ?? 0) > 0 || isServer === undefined) return false;
  const length = 4 + payload.length;
  const headerLength = binaryHeaderLength(length, !isServer);
  if (!isServer && owned && payload.length > 0) {
    // Handed over: masked where it lies, after a header of its own (no frame buffer at all).
    const header = Buffer.allocUnsafe(headerLength + 4);
    const key = writeBinaryHeader(header, length, true) as Buffer;
    header.writeUInt32BE(ch, headerLength);
    for (let i = 0; i < 4; i++) header[headerLength + i] ^= key[i];
    maskInto(payload, key, payload, 0, 4);
    socket.cork();
    socket.write(header);
    socket.write(payload, done);
    socket.uncork();
    return true;
  }
  // From a server the payload follows its own header; from a client it is masked into the frame.
  const frameLength = headerLength + 4 + (isServer ? 0 : payload.length);
  const pooled = frameLength >= POOLED_FRAME_MIN && frameLength <= FRAME_BUFFER_SIZE;
  const buffer = pooled ? framePool.take() : undefined;
  // Every byte of the frame is written below: nothing of a buffer's previous frame is sent again.
  const frame = buffer ? buffer.subarray(0, frameLength) : Buffer.allocUnsafe(frameLength);
  const mask = writeBinaryHeader(frame, length, !isServer);
  frame.writeUInt32BE(ch, headerLength);
  socket.cork();
  if (isServer) {
    if (payload.length === 0) socket.write(frame, done);
    else {
      socket.write(frame);
      socket.write(payload, done);
    }
  } else if (mask) {
    // The channel id is the first 4 bytes of the payload: the key's phase is the same after it.
    for (let i = 0; i < 4; i++) frame[headerLength + i] ^= mask[i];
    maskInto(payload, mask, frame, headerLength + 4, 4);
    socket.write(
      frame,
      buffer
        ? (err?: Error | null) => {
            framePool.give(buffer);
            done(err);
          }
        : done,
    );
  }
  socket.uncork();
  return true;
}
