/**
 * Where a console's output goes besides its sockets: the latest of it, kept in a fixed-size ring for
 * a re-attach or a watcher joining (their screen is drawn from it: the WebSocket console,
 * console-relay.ts, and the SSH console), and the session's recording, fed in batches.
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

/**
 * Output is handed to the recording at most this long after it came (or once RECORD_BATCH_BYTES
 * wait), as one event: a keystroke's echo then costs no line of JSON and no disk write of its own
 * (a write on the thread pool, whose completion woke the broker once more), and neither is on its way.
 */
export const RECORD_BATCH_MS = 20;
const RECORD_BATCH_BYTES = 16 * 1024;

/** What a console's recording takes (recordings.ts). */
export interface RecordingSink {
  output(chunk: Buffer): void;
  resize(cols: number, rows: number): void;
}

/** A recording fed in batches; a resize and `flush` (at the end) hand over what waits first, so the order is kept. */
export class BatchedRecording {
  private waiting: Buffer[] = [];
  private waitingBytes = 0;
  private timer?: NodeJS.Timeout;

  constructor(private readonly sink: RecordingSink) {}

  output(chunk: Buffer): void {
    this.waiting.push(chunk);
    this.waitingBytes += chunk.length;
    if (this.waitingBytes >= RECORD_BATCH_BYTES) return this.flush();
    if (this.timer) return;
    this.timer = setTimeout(() => this.flush(), RECORD_BATCH_MS);
    this.timer.unref();
  }

  resize(cols: number, rows: number): void {
    this.flush();
    this.sink.resize(cols, rows);
  }

  /** Hands what waits to the recording, as one event. */
  flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.waiting.length === 0) return;
    const chunk = this.waiting.length === 1 ? this.waiting[0] : Buffer.concat(this.waiting);
    this.waiting = [];
    this.waitingBytes = 0;
    this.sink.output(chunk);
  }
}
