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
import type { Writable } from 'node:stream';
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

/**
 * Writes one read of the pty (`data`, from 'data') to `out`: the view itself, holding its buffer until
 * the write's callback, while nothing waits in `out` before it (the channel frames it at once, or
 * keeps this one write); else a copy. A view queued behind other writes would hold a whole read
 * buffer for what may be a few bytes, once per read, for as long as the peer gives no credit.
 * Answers what `out.write` answers.
 */
export function writePtyRead(out: Writable, data: Buffer, reads: LeasedReads | undefined): boolean {
  if (!reads) return out.write(data);
  if (out.writableLength > 0) return out.write(Buffer.from(data));
  return out.write(data, reads.hold());
}
