/**
 * A gateway connection read in larger pieces. Node.js reads a socket 64 KiB at a time: an upload or
 * a forwarding's stream from the client was a read, a turn of ssh2's parsing and a write to the
 * agent's socket per 64 KiB. Here the socket reads into buffers of its own (16 KiB at first, 256 KiB
 * once a read fills one: shared/read-buffers.ts's sizes), so a fast client's bytes come in a quarter
 * of the reads and turns, and leave towards the agent in a quarter of the writes. A keystroke still
 * comes in the read that brings it.
 *
 * Each read is a fresh buffer (none is read into again, so no ReadBuffers pool): ssh2 may keep views
 * of what it was given, and nothing tells when it is done with them. The buffer for the next read is
 * held by the socket while it waits: small until the connection shows a bulk stream, so an idle or
 * interactive connection holds 16 KiB, not 256. What is read goes through the socket's own buffer
 * (push), so order, pause and backpressure stay Node's: a push over the socket's high-water mark
 * stops reading until its reader takes more, and a client that floods a gateway that does not read
 * is held at that mark and one read.
 */
import type { Socket } from 'node:net';
import { BULK_READ_SIZE, FIRST_READ_SIZE, moveReadsIntoBuffers } from '../../shared/read-buffers.js';

/** Moves `socket` (plain TCP, already open) to larger reads; false, changing nothing, where it cannot. */
export function readInLargePieces(socket: Socket): boolean {
  let size = FIRST_READ_SIZE;
  const next = () => Buffer.allocUnsafeSlow(size);
  return moveReadsIntoBuffers(socket, { next }, (n, buf) => {
    if (n === buf.length) size = BULK_READ_SIZE;
    return socket.push(n === buf.length ? buf : buf.subarray(0, n));
  });
}
