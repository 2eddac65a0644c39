/**
 * A gateway connection read in larger pieces. Node.js reads a socket 64 KiB at a time: an upload or
 * a forwarding's stream from the client was a read, a turn of ssh2's parsing and a write to the
 * agent's socket per 64 KiB. Here the socket reads into buffers of its own (shared/read-buffers.ts:
 * 16 KiB at first, 256 KiB once a read fills one), so a fast client's bytes come in a quarter of the
 * reads and turns, and leave towards the agent in a quarter of the writes. A keystroke still comes
 * in the read that brings it.
 *
 * Each read is a fresh buffer (none is read into again): ssh2 may keep views of what it was given.
 * What is read goes through the socket's own buffer (push), so order, pause and backpressure stay
 * Node's: a push over the socket's high-water mark stops reading until its reader takes more, and
 * a client that floods a gateway that does not read is held at that mark and one read.
 */
import type { Socket } from 'node:net';
import { moveReadsIntoBuffers, ReadBuffers } from '../../shared/read-buffers.js';

/** Moves `socket` (plain TCP, already open) to larger reads; false, changing nothing, where it cannot. */
export function readInLargePieces(socket: Socket): boolean {
  const buffers = new ReadBuffers();
  return moveReadsIntoBuffers(socket, buffers, (n, buf) => {
    buffers.read(n, buf);
    return socket.push(n === buf.length ? buf : buf.subarray(0, n));
  });
}
