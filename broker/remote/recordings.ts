import fs from 'node:fs';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import type { Logger } from 'pino';
import { ensurePrivateDir, PRIVATE_FILE_MODE } from '../data-dir.js';

/**
 * Console recordings: asciicast v2 files (one JSON header line, then `[seconds, "o", text]` for
 * output and `[seconds, "r", "COLSxROWS"]` for resizes), one per session id under
 * `<DATA_DIR>/recordings`, 0700 / 0600. Only what the device's terminal printed is kept: the
 * keystrokes (which may hold passwords typed at prompts that do not echo) are not.
 */

/** Bytes of events waiting for the disk, at most; beyond this output is dropped (a gap) or the session ends. */
export const RECORDING_BUFFER_MAX = 1024 * 1024;
/**
 * Output that comes within this long of an event's first byte (and until RECORD_BATCH_BYTES of it)
 * joins that event, stamped with the time its first byte came: a keystroke's echo then costs no line
 * of JSON of its own. The event is closed when later output comes, or when the events are written.
 */
export const RECORD_BATCH_MS = 20;
export const RECORD_BATCH_BYTES = 16 * 1024;
/**
 * Events wait this long (or until RECORD_BATCH_BYTES of them) and are written together: typing costs
 * one disk write (a write on the thread pool, whose completion wakes the broker once more) and one
 * timer a second, not one per echo. A broker killed outright loses at most this much of a recording.
 */
export const RECORD_WRITE_MS = 1000;
const DAY_MS = 86_400_000;
const SESSION_ID = /^[0-9a-f-]{36}$/;

export function recordingsDir(dataDir: string): string {
  return path.join(dataDir, 'recordings');
}

/** The recording file of a session id, or undefined for anything that is not one (no path tricks). */
export function recordingPath(dataDir: string, sessionId: string): string | undefined {
  return SESSION_ID.test(sessionId) ? path.join(recordingsDir(dataDir), `${sessionId}.cast`) : undefined;
}

/**
 * Writes one session's events behind the session, output in events of RECORD_BATCH_MS or
 * RECORD_BATCH_BYTES (a resize and `close` record what is held first, so the order is kept), the
 * events written together every RECORD_WRITE_MS or RECORD_BATCH_BYTES, with at most
 * RECORDING_BUFFER_MAX bytes waiting:
 * a flood faster than the disk never grows memory. When the cap is hit the output is dropped and a
 * marker `[t, "m", "gap: n bytes not recorded"]` says so once the writer caught up, or — when the
 * recording is required — `overflow` is called (the session ends instead of going unrecorded), as
 * it is when a write fails.
 */
export class ConsoleRecorder {
  private readonly stream: fs.WriteStream;
  /** A monotonic clock: a change of the wall clock never makes the events' times go backwards. */
  private readonly start = performance.now();
  /** Carries a character split across two chunks over to the next one. */
  private readonly decoder = new StringDecoder('utf8');
  /** Output held for the next event, already decoded: a copy, so the caller may reuse its buffer. */
  private held: string[] = [];
  private heldBytes = 0;
  /** When the first byte held came (seconds into the recording). */
  private heldSince = 0;
  /** Events closed and not yet handed to the file (see RECORD_WRITE_MS), and their length. */
  private lines: string[] = [];
  private linesLength = 0;
  private writeTimer?: NodeJS.Timeout;
  private waiting = 0;
  private dropped = 0;
  private closed = false;
  /** Set once a write failed: nothing more is written. */
  failed?: Error;
  readonly finished: Promise<void>;
  /** Called (required recordings only) when output could not be recorded: the session must end. */
  overflow?: () => void;

  private constructor(
    readonly file: string,
    fd: number,
    readonly required: boolean,
    private readonly logger: Pick<Logger, 'warn'>,
  ) {
    this.stream = fs.createWriteStream('', { fd, autoClose: true });
    this.finished = new Promise((resolve) => this.stream.once('close', () => resolve()));
    this.stream.on('error', (err) => {
      this.failed ??= err;
      this.logger.warn({ err, file }, 'console recording could not be written');
      if (this.required) this.overflow?.();
    });
  }

  /**
   * Creates the file (exclusively, 0600) and writes its header; throws when it cannot (a full or
   * unwritable disk), which refuses a session whose recording is required.
   */
  static open(
    dataDir: string,
    sessionId: string,
    size: { cols: number; rows: number },
    meta: { title?: string; env?: Record<string, string> },
    logger: Pick<Logger, 'warn'>,
    required = false,
  ): ConsoleRecorder {
    const file = recordingPath(dataDir, sessionId);
    if (!file) throw new Error(`not a session id: ${sessionId}`);
    ensurePrivateDir(path.dirname(file), logger);
    const fd = fs.openSync(file, 'wx', PRIVATE_FILE_MODE);
    const header = { version: 2, width: size.cols, height: size.rows, timestamp: Math.floor(Date.now() / 1000), ...meta };
    try {
      fs.writeSync(fd, `${JSON.stringify(header)}\n`);
    } catch (err) {
      fs.closeSync(fd);
      throw err;
    }
    return new ConsoleRecorder(file, fd, required, logger);
  }

  private get elapsed(): number {
    return Math.round(performance.now() - this.start) / 1000;
  }

  /**
   * What the device's terminal printed. Call it after the output went to the user: nothing here is
   * on an echo's way, it is held (copied) for the next event.
   */
  output(chunk: Buffer): void {
    if (this.closed || this.failed || chunk.length === 0) return;
    // The event held since RECORD_BATCH_MS ago or more is closed: this output starts the next one.
    if (this.heldBytes > 0 && (this.elapsed - this.heldSince) * 1000 >= RECORD_BATCH_MS) this.flush();
    this.hold(this.decoder.write(chunk), chunk.length);
    if (this.heldBytes >= RECORD_BATCH_BYTES) this.flush();
    this.writeSoon();
  }

  /** The events are written once RECORD_BATCH_BYTES of them wait, or RECORD_WRITE_MS from now. */
  private writeSoon(): void {
    if (this.closed || this.failed) return;
    if (this.linesLength >= RECORD_BATCH_BYTES) return this.writeLines();
    // Not unref'd: a broker on its way out records what it holds before it exits.
    this.writeTimer ??= setTimeout(() => {
      this.flush();
      this.writeLines();
    }, RECORD_WRITE_MS);
  }

  private hold(text: string, bytes: number): void {
    if (this.heldBytes === 0) this.heldSince = this.elapsed;
    this.held.push(text);
    this.heldBytes += bytes;
  }

  resize(cols: number, rows: number): void {
    this.flush();
    this.event('r', `${cols}x${rows}`, 0, this.elapsed);
    this.writeSoon();
  }

  /** Closes what is held as one event, at the time its first byte came (written with the next lines). */
  private flush(): void {
    if (this.heldBytes === 0) return;
    const data = this.held.length === 1 ? this.held[0] : this.held.join('');
    const size = this.heldBytes;
    this.held = [];
    this.heldBytes = 0;
    this.event('o', data, size, this.heldSince);
  }

  private event(type: 'o' | 'r', data: string, size: number, at: number): void {
    if (this.closed || this.failed) return;
    const line = `${JSON.stringify([at, type, data])}\n`;
    if (this.waiting + this.linesLength + line.length > RECORDING_BUFFER_MAX) {
      this.dropped += size;
      if (this.required) {
        this.writeLines(); // what was recorded until now stays in the file
        this.closed = true;
        this.stream.end();
        this.overflow?.();
      }
      return;
    }
    if (this.dropped > 0) {
      // Stamped as the event it comes before: the times never go backwards.
      const gap = `${JSON.stringify([at, 'm', `gap: ${this.dropped} bytes not recorded`])}\n`;
      this.dropped = 0;
      this.write(gap);
    }
    this.write(line);
  }

  private write(line: string): void {
    this.lines.push(line);
    this.linesLength += line.length;
  }

  /** Hands the closed events to the file in one write. */
  private writeLines(): void {
    clearTimeout(this.writeTimer);
    this.writeTimer = undefined;
    if (this.linesLength === 0 || this.closed || this.failed) return;
    const text = this.lines.length === 1 ? this.lines[0] : this.lines.join('');
    const n = this.linesLength;
    this.lines = [];
    this.linesLength = 0;
    this.waiting += n;
    this.stream.write(text, () => (this.waiting -= n));
  }

  /** Records what is held, then ends the file once what waits is written. */
  close(): Promise<void> {
    if (!this.closed && !this.failed) {
      // A character cut off at the very end is recorded as U+FFFD, as a terminal would show it.
      const rest = this.decoder.end();
      if (rest) this.hold(rest, 1);
      this.flush(); // may end a required recording that overflows
      this.writeLines();
    }
    clearTimeout(this.writeTimer);
    if (!this.closed) {
      this.closed = true;
      if (this.dropped > 0) this.stream.write(`${JSON.stringify([this.elapsed, 'm', `gap: ${this.dropped} bytes not recorded`])}\n`);
      this.stream.end();
    }
    return this.finished;
  }
}

/** Removes recordings last written more than `days` ago; answers how many. */
export function removeOldRecordings(dataDir: string, days: number, now = Date.now()): number {
  const dir = recordingsDir(dataDir);
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return 0;
  }
  let removed = 0;
  for (const name of names) {
    if (!name.endsWith('.cast')) continue;
    const file = path.join(dir, name);
    try {
      if (now - fs.statSync(file).mtimeMs > days * DAY_MS) {
        fs.unlinkSync(file);
        removed += 1;
      }
    } catch {
      // gone meanwhile
    }
  }
  return removed;
}
