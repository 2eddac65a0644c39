/**
 * Where a console's output goes besides its sockets: the latest of it, kept in a bounded ring for
 * a re-attach or a watcher joining (their screen is drawn from it: the WebSocket console,
 * console-relay.ts, and the SSH console). (The session's recording batches for itself: recordings.ts.)
 */

/** A replay starts after the first line break within this many bytes: no half escape sequence. */
const REPLAY_ALIGN = 4096;

/**
 * The first allocation of a history. A console that printed little holds little: a 64 KiB ring
 * allocated (and zeroed) for every console at its open was garbage V8 let pile up to its external
 * memory limit, about 64 MiB of a broker's RSS, under a peer that opened and closed consoles in a
 * loop (docs/performance.md, "Hostile peers, sixth round").
 */
const HISTORY_FIRST_BYTES = 1024;

/** A ring of the latest output bytes, at most `capacity`. */
export class OutputHistory {
  /** Grows with the output, doubling from HISTORY_FIRST_BYTES, to `capacity`; only then does the ring wrap. */
  private buf: Buffer = Buffer.alloc(0);
  private start = 0;
  private length = 0;

  constructor(readonly capacity: number) {}

  /** Bytes this history holds memory for (what it was given, rounded up; at most its capacity). */
  get allocated(): number {
    return this.buf.length;
  }

  get size(): number {
    return this.length;
  }

  push(chunk: Buffer): void {
    const cap = this.capacity;
    const data = chunk.length > cap ? chunk.subarray(chunk.length - cap) : chunk;
    if (this.buf.length < cap) this.grow(this.length + data.length);
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

  /** Room for `need` bytes (the ring has not wrapped yet: its bytes are at the start, in order). */
  private grow(need: number): void {
    if (need <= this.buf.length) return;
    const size = Math.min(this.capacity, Math.max(need, HISTORY_FIRST_BYTES, this.buf.length * 2));
    const grown = Buffer.allocUnsafe(size);
    this.buf.copy(grown, 0, 0, this.length);
    this.buf = grown;
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
