/**
 * Reused read buffers for one socket read with `onread` (the agent's tunnel target, `fleet connect`'s
 * local connection). Node's own reads are a fresh 64 KiB buffer each, whose garbage collection was a
 * large share of both processes' CPU on a bulk stream. A buffer is its reader's from the read that
 * fills it until the reader's consumer is done with it (its bytes framed and flushed, or copied), then
 * it is reused; the reader pauses while its consumer is full, so few are ever out at once.
 */

/**
 * The first reads of a socket are this size. Most tunnels carry little each way (a request, a
 * handshake, an answer): a 256 KiB buffer allocated for each at connect was a third of the agent's
 * time in garbage collection when sessions were opened and closed in a loop.
 */
export const FIRST_READ_SIZE = 16 * 1024;
/**
 * The first read that fills its buffer shows a bulk stream, read in buffers of this size from then
 * on: a fast peer is read in a quarter of Node's system calls, and sent in a quarter of the frames.
 */
export const BULK_READ_SIZE = 256 * 1024;
/** Buffers kept for reuse once their consumer is done with them. */
const READ_POOL = 4;

export class ReadBuffers {
  private readonly free: Buffer[] = [];
  private size = FIRST_READ_SIZE;

  /** The buffer of the next read (the `onread` option's `buffer`). */
  readonly next = (): Buffer => this.free.pop() ?? Buffer.allocUnsafeSlow(this.size);

  /** A read of `n` bytes into `buf`: one that filled it moves the socket to bulk-size reads. */
  read(n: number, buf: Buffer): void {
    if (n < buf.length || this.size === BULK_READ_SIZE) return;
    this.size = BULK_READ_SIZE;
    this.free.length = 0;
  }

  /** `buf` may be read into again (a small buffer after the move to bulk reads is dropped). */
  give(buf: Buffer): void {
    if (buf.length === this.size && this.free.length < READ_POOL) this.free.push(buf);
  }
}
