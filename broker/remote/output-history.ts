/**
 * Where a console's output goes besides its sockets: the latest of it, kept in a fixed-size ring for
 * a re-attach or a watcher joining (their screen is drawn from it: the WebSocket console,
 * console-relay.ts, and the SSH console). (The session's recording batches for itself: recordings.ts.)
 */

/** A replay starts after the first line break within this many bytes: no half escape sequence. */
const REPLAY_ALIGN = 4096;

/** A fixed-size ring of the latest output bytes. */
export class OutputHistory {
  private readonly buf: Buffer;
  private start = 0;
  private length = 0;

  constructor(readonly capacity: number) {
    this.buf = Buffer.alloc(capacity);
  }

  get size(): number {
    return this.length;
  }

  push(chunk: Buffer): void {
    const cap = this.capacity;
    const data = chunk.length > cap ? chunk.subarray(chunk.length - cap) : chunk;
    let at = (this.start + this.length) % cap;
    for (let offset = 0; offset < data.length;) {
      const n = Math.min(cap - at, data.length - offset);
      data.copy(this.buf, at, offset, offset + n);
      offset += n;
      at = (at + n) % cap;
    }
    const total = this.length + data.length;
    if (total > cap) this.start = (this.start + total - cap) % cap;
    this.length = Math.min(total, cap);
  }

  /** The kept bytes, oldest first, starting at a line break when the ring has wrapped. */
  contents(): Buffer {
    const head = this.buf.subarray(this.start, Math.min(this.capacity, this.start + this.length));
    const tail = this.buf.subarray(0, this.length - head.length);
    const all = Buffer.concat([head, tail]);
    if (this.length < this.capacity) return all;
    const nl = all.subarray(0, REPLAY_ALIGN).indexOf(0x0a);
    return nl >= 0 ? all.subarray(nl + 1) : all;
  }
}
