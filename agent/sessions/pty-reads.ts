/**
 * What the console's program writes, read from the pty's master side into reused buffers
 * (shared/read-buffers.ts), as the broker's relay and `fleet connect` read their sockets. node-pty
 * reads its pty through a tty stream: every read, a lone echo included, was a fresh 64 KiB buffer
 * (cut down to what was read: an allocation and a copy) and a trip through the stream's push and
 * its read-ahead tick before node-pty's 'data'. Read into a reused buffer, each read is emitted as
 * 'data' on the same stream at once (node-pty's listeners, its pause and resume, the end of the
 * process, all as before); a view of it that is written on (the channel keeps a write it cannot
 * frame at once) holds the buffer until that write's callback.
 */
import type { Socket } from 'node:net';
import type { IPty } from 'node-pty';
import { LeasedReads } from '../../shared/read-buffers.js';

/**
 * Moves `pty`'s reads into reused buffers. Answers what to call, in a 'data' listener, for each view
 * handed on (its release goes to the write's callback), or undefined where node-pty's stream is not
 * one that can be moved (node-pty's own reads are then kept).
 */
export function readPtyIntoBuffers(pty: IPty): LeasedReads | undefined {
  const socket = (pty as unknown as { _socket?: Socket })._socket;
  if (!LeasedReads.movable(socket)) return undefined;
  const reads = new LeasedReads(socket);
  return reads.start() ? reads : undefined;
}
