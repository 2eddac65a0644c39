/**
 * A channel's data frame (`[channel id][bytes]`, protocol.ts) written straight to the WebSocket's
 * socket, framed here as one final binary frame (RFC 6455 §5.2), so that the bytes are not copied
 * to be framed:
 *  - from the broker (a server: frames unmasked), a small header carrying the channel id is written
 *    before the payload itself, which is not copied at all;
 *  - from the agent (a client: every frame masked with a fresh random key, §5.3), the payload is
 *    masked once into the frame, where `ws.send(encodeData(…))` copied it to frame it and then
 *    again to mask it.
 * The receiving end sees the same frame as before. ws is bypassed only while it has nothing queued
 * (no compression, no frame of its own waiting), so frames keep their order; otherwise the caller
 * sends through ws.
 */
import type { Socket } from 'node:net';
import type WebSocket from 'ws';
import { binaryHeaderLength, maskInto, writeBinaryHeader } from './ws-frame.js';

/** What of ws this reads: its socket, whether its sender is idle, and which end it is. */
interface WsInternals {
  _socket?: Socket;
  _sender?: { _state?: number; _queue?: unknown[] };
  _isServer?: boolean;
}

/**
 * Writes `[ch][payload]` as one binary frame on the WebSocket's socket. `done` runs once the socket
 * has flushed it (with the error, if the socket failed first); until then `payload` is the socket's
 * (from the broker it is written as it is). Answers false, having written nothing, when ws cannot
 * be bypassed now: the caller then sends through ws.
 */
export function writeDataFrame(ws: WebSocket, ch: number, payload: Buffer, done: (err?: Error | null) => void): boolean {
  const { _socket: socket, _sender: sender, _isServer: isServer } = ws as unknown as WsInternals;
  if (!socket || !sender || sender._state !== 0 || (sender._queue?.length ?? 0) > 0 || isServer === undefined) return false;
  const length = 4 + payload.length;
  const headerLength = binaryHeaderLength(length, !isServer);
  // From a server the payload follows its own header; from a client it is masked into the frame.
  const frame = Buffer.allocUnsafe(headerLength + 4 + (isServer ? 0 : payload.length));
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
    socket.write(frame, done);
  }
  socket.uncork();
  return true;
}
