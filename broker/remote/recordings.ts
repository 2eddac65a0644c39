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
 * Writes one session's events behind the session, with at most RECORDING_BUFFER_MAX bytes waiting:
 * a flood faster than the disk never grows memory. When the cap is hit the output is dropped and a
 * marker `[t, "m", "gap: n bytes not recorded"]` says so once the writer caught up, or — when the
 * recording is required — `overflow` is called (the session ends instead of going unrecorded), as
 * it is when a write fails.
 */
export class ConsoleRecorder {
  private readonly stream: fs.WriteStream;
  private readonly start = Date.now();
  /** Carries a character split across two chunks over to the next one. */
  private readonly decoder = new StringDecoder('utf8');
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
    return Math.round(Date.now() - this.start) / 1000;
  }

  /** What the device's terminal printed. */
  output(chunk: Buffer): void {
    this.event('o', this.decoder.write(chunk), chunk.length);
  }

  resize(cols: number, rows: number): void {
    this.event('r', `${cols}x${rows}`, 0);
  }

  private event(type: 'o' | 'r', data: string, size: number): void {
    if (this.closed || this.failed) return;
    const line = `${JSON.stringify([this.elapsed, type, data])}\n`;
    if (this.waiting + line.length > RECORDING_BUFFER_MAX) {
      this.dropped += size;
      if (this.required) {
        this.closed = true;
        this.stream.end();
        this.overflow?.();
      }
      return;
    }
    if (this.dropped > 0) {
      const gap = `${JSON.stringify([this.elapsed, 'm', `gap: ${this.dropped} bytes not recorded`])}\n`;
      this.dropped = 0;
      this.write(gap);
    }
    this.write(line);
  }

  private write(line: string): void {
    const n = line.length;
    this.waiting += n;
    this.stream.write(line, () => (this.waiting -= n));
  }

  /** Ends the file once what waits is written. */
  close(): Promise<void> {
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
