/**
 * What the client types, written to the pty's master side (console.ts). node-pty queues every write
 * to the thread pool (`fs.write`), so a keystroke waited for a worker thread to wake and write it,
 * and its completion woke the agent's loop once more. The master side is non-blocking: a keystroke
 * is written at once, in the turn it arrived. What the pty does not take (its input buffer is full:
 * the program does not read, or a paste outruns it) waits here, in order, and is written again on
 * a timer; beyond PTY_INPUT_MAX waiting, the writer says so (`write` answers false) and the caller
 * stops reading the channel until `drain`, so the client's credit runs out instead of memory here.
 */

import { EventEmitter } from 'node:events';
import fs from 'node:fs';

/** Input waiting for the pty, at most, before the writer asks its caller to stop reading. */
export const PTY_INPUT_MAX = 64 * 1024;
/** A full pty input buffer is tried again after this long (the program reads its input meanwhile). */
const RETRY_MS = 2;

export class PtyInput extends EventEmitter<{ drain: []; error: [Error] }> {
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private timer?: NodeJS.Timeout;
  private closed = false;

  /** `fd`: the pty's master side, non-blocking (node-pty opens it so). */
  constructor(private readonly fd: number) {
    super();
  }

  /** Bytes waiting for the pty. */
  get waiting(): number {
    return this.queued;
  }

  /** Writes what the pty takes now and keeps the rest, in order; false once PTY_INPUT_MAX is waiting. */
  write(data: Buffer): boolean {
    if (this.closed || data.length === 0) return true;
    if (this.queue.length === 0) {
      const n = this.tryWrite(data);
      if (n === data.length) return true;
      data = data.subarray(n);
    }
    this.queue.push(Buffer.from(data)); // the caller's buffer is its own again once we return
    this.queued += data.length;
    this.retryLater();
    return this.queued < PTY_INPUT_MAX;
  }

  /** Nothing more is written (the shell is gone, or the session ended). */
  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    this.timer = undefined;
    this.queue.length = 0;
    this.queued = 0;
  }

  /** Bytes the pty took (0 when its input buffer is full); a failure closes the writer. */
  private tryWrite(data: Buffer): number {
    try {
      return fs.writeSync(this.fd, data);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') return 0;
      this.close();
      this.emit('error', err as Error);
      return data.length;
    }
  }

  private retryLater(): void {
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.flush();
    }, RETRY_MS);
  }

  private flush(): void {
    const wasFull = this.queued >= PTY_INPUT_MAX;
    while (!this.closed && this.queue.length > 0) {
      const head = this.queue[0];
      const n = this.tryWrite(head);
      if (this.closed) return;
      this.queued -= n;
      if (n < head.length) {
        this.queue[0] = head.subarray(n);
        this.retryLater();
        break;
      }
      this.queue.shift();
    }
    if (wasFull && this.queued < PTY_INPUT_MAX) this.emit('drain');
  }
}
