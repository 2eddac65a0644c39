/**
 * One file an sftp client opened: a copy session of the broker's machinery (a download for
 * reading, an upload for writing), read or written sequentially.
 */
import type { Channel } from '../../shared/mux.js';
import type { ChannelControl } from '../../shared/protocol.js';
import type { ErrorFrame } from '../remote/relay.js';
import type { LiveRelay } from '../remote/sessions.js';
import { SFTP_STATUS, type Attrs, type SftpStream } from './sftp-answers.js';
import { SFTP_READ_MAX } from './sftp-flow.js';

/** Bytes read ahead from the device for one open file, at most; the device waits beyond. */
export const READ_AHEAD = 1024 * 1024;
/** Largest answer to one READ: what the client is told it may ask (a larger ask is answered short). */
const MAX_READ = SFTP_READ_MAX;
/** READs of one file waiting for data at once (OpenSSH keeps 64 in flight); past this a READ fails. */
export const MAX_WAITING_READS = 128;

/**
 * The SSH channel's flow as an open file sees it (SftpFlow): whether the client's window has room for
 * an answer (and ssh2 holds none it had no room for), answers sent straight into SSH packets, and
 * holding the client's window while the device's channel is full.
 */
export interface FileFlow {
  /** Whether a READ's answer of `length` bytes may go out now (else the flow calls resume once it may: SftpFlow.canAnswer). */
  canAnswer(length: number): boolean;
  hold(holder: object): void;
  release(holder: object): void;
  /** Sends a READ's answer made of `parts` straight into SSH packets (SftpFlow.answerData); false: not now, answer through ssh2. */
  answerData(reqid: number, parts: readonly Buffer[], length: number): boolean;
}

const NO_FLOW: FileFlow = { canAnswer: () => true, hold() {}, release() {}, answerData: () => false };

/**
 * One open file: a copy session (download for reading, upload for writing) of the broker's
 * machinery, adopted so it is listed, re-checked and endable like any other. Reads and writes
 * must be sequential (as scp and sftp's get and put make them); the copy channel has no seek.
 */
export class SftpFile implements LiveRelay {
  readonly done: Promise<{ bytesIn: number; bytesOut: number; reason: string; failed?: boolean }>;
  private resolveDone!: (end: { bytesIn: number; bytesOut: number; reason: string; failed?: boolean }) => void;
  bytesIn = 0;
  bytesOut = 0;
  position = 0;
  private held: Buffer[] = [];
  private heldBytes = 0;
  private ended = false;
  failure?: string;
  private result?: { ok: boolean; error?: string };
  private readonly waiting: { reqid: number; length: number }[] = [];
  /** Bytes the waiting READs ask for. */
  private waitingBytes = 0;
  /** WRITEs taken while the device's channel was full: answered when it drains. */
  private unanswered: number[] = [];
  private onResult?: () => void;
  private reason?: string;

  constructor(
    readonly writing: boolean,
    readonly channel: Channel,
    readonly attrs: Attrs,
    private readonly sftp: SftpStream,
    private readonly flow: FileFlow = NO_FLOW,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    channel.on('control', (msg: ChannelControl) => {
      if (msg.type !== 'result') return;
      this.result = { ok: msg.ok, ...(msg.error ? { error: msg.error } : {}) };
      this.reason ??= msg.ok ? `copied ${msg.bytes} bytes` : `copy failed: ${msg.error ?? 'unknown error'}`;
      // An upload the device gave up on (its disk full, a write failed) reads nothing more: the
      // WRITEs waiting for its channel, and any after, fail now rather than wait for it forever.
      if (writing && !msg.ok) {
        this.failure ??= msg.error ?? 'the copy failed on the device';
        this.answerWrites(SFTP_STATUS.failure, this.failure);
      }
      this.onResult?.();
    });
    channel.on('close', () => {
      if (channel.errored) this.failure ??= channel.errored.message;
      this.ended = true;
      this.serve();
      this.answerWrites(SFTP_STATUS.failure, this.failure ?? 'the copy has ended');
      this.onResult?.();
      this.resolveDone({ bytesIn: this.bytesIn, bytesOut: this.bytesOut, reason: this.reason ?? 'closed', failed: !!this.failure });
    });
    // An upload's channel carries nothing back but its result; read it so its end is seen.
    if (writing) channel.resume();
    if (!writing) {
      channel.on('data', (chunk: Buffer) => {
        this.held.push(chunk);
        this.heldBytes += chunk.length;
        if (this.heldBytes >= READ_AHEAD) channel.pause();
        this.serve();
      });
      channel.on('end', () => {
        this.ended = true;
        this.serve();
      });
      // Our end of a download is the agent's signal to start sending.
      channel.end();
    }
  }

  read(reqid: number, offset: number, length: number): void {
    // Past the end (a client reads ahead of the size it was told): end of file.
    if (offset >= this.attrs.size && this.waiting.length === 0 && this.heldBytes === 0) return this.sftp.status(reqid, SFTP_STATUS.eof);
    if (offset !== this.position + this.waitingBytes) return this.sftp.status(reqid, SFTP_STATUS.failure, 'only sequential reads are supported');
    if (this.waiting.length >= MAX_WAITING_READS)
      return this.sftp.status(reqid, SFTP_STATUS.failure, `at most ${MAX_WAITING_READS} reads of one file in flight`);
    const asked = Math.max(0, Math.min(length, MAX_READ));
    this.waiting.push({ reqid, length: asked });
    this.waitingBytes += asked;
    this.serve();
  }

  /** The client's window opened: READs held back for it are answered. */
  resume(): void {
    if (!this.writing) this.serve();
  }

  /**
   * Answers the waiting READs in order from what the device sent. While the client's window has no
   * room for the next answer (or ssh2 holds answers it had no room for), none is given: the data
   * stays here (at most READ_AHEAD, the device's channel paused beyond), so a client that asks and
   * never reads holds at most its window, one answer and the read-ahead.
   */
  private serve(): void {
    while (this.waiting.length > 0) {
      const next = this.waiting[0];
      if (this.failure || (this.result && !this.result.ok)) {
        this.shiftWaiting();
        this.sftp.status(next.reqid, SFTP_STATUS.failure, this.failure ?? this.result?.error ?? 'copy failed');
        continue;
      }
      if (this.heldBytes < next.length && !this.ended) break;
      if (!this.flow.canAnswer(Math.min(next.length, this.heldBytes))) break;
      this.shiftWaiting();
      if (this.heldBytes === 0) {
        this.sftp.status(next.reqid, SFTP_STATUS.eof);
        continue;
      }
      const { parts, length } = this.take(next.length);
      this.position += length;
      this.bytesOut += length;
      if (!this.flow.answerData(next.reqid, parts, length)) this.sftp.data(next.reqid, parts.length === 1 ? parts[0] : Buffer.concat(parts, length));
      // Short only at the end of the file: what was asked beyond it is the end of file.
      if (length < next.length) {
        this.waitingBytes = 0;
        for (const w of this.waiting.splice(0)) this.sftp.status(w.reqid, SFTP_STATUS.eof);
      }
    }
    if (this.heldBytes < READ_AHEAD && this.channel.isPaused() && !this.channel.destroyed) this.channel.resume();
  }

  private shiftWaiting(): void {
    const w = this.waiting.shift();
    if (w) this.waitingBytes -= w.length;
  }

  /**
   * Up to `length` bytes from the front of what is held, as views of the chunks the device sent
   * (a READ of 255 KiB spans two of its 128 KiB frames): nothing is copied here.
   */
  private take(length: number): { parts: Buffer[]; length: number } {
    const parts: Buffer[] = [];
    let n = 0;
    while (n < length && this.held.length > 0) {
      const chunk = this.held[0];
      const part = chunk.length <= length - n ? (this.held.shift() as Buffer) : chunk.subarray(0, length - n);
      if (part !== chunk) this.held[0] = chunk.subarray(part.length);
      parts.push(part);
      n += part.length;
    }
    this.heldBytes -= n;
    return { parts, length: n };
  }

  write(reqid: number, offset: number, data: Buffer): void {
    if (offset !== this.position) return this.sftp.status(reqid, SFTP_STATUS.failure, 'only sequential writes are supported');
    if (this.failure || this.channel.destroyed) return this.sftp.status(reqid, SFTP_STATUS.failure, this.failure ?? 'the copy has ended');
    this.position += data.length;
    this.bytesIn += data.length;
    this.attrs.size = this.position;
    // While the device's channel is full the answers wait for it to drain, and the client's SSH
    // window is held: a client that sends without waiting for answers stops once its window is spent.
    const taken = this.channel.write(data);
    if (taken && this.unanswered.length === 0) return this.sftp.status(reqid, SFTP_STATUS.ok);
    this.unanswered.push(reqid);
    if (this.unanswered.length > 1) return;
    this.flow.hold(this);
    this.channel.once('drain', () => this.answerWrites(SFTP_STATUS.ok));
  }

  /** Answers the WRITEs that waited for the device's channel, and lets the client's window open again. */
  private answerWrites(code: number, message?: string): void {
    if (this.unanswered.length === 0) return;
    for (const reqid of this.unanswered.splice(0)) this.sftp.status(reqid, code, message);
    this.flow.release(this);
  }

  /** Closing a written file waits for the device to check and rename it. */
  async close(): Promise<{ ok: boolean; error?: string }> {
    if (!this.writing) {
      if (!this.channel.destroyed) this.channel.destroy();
      return { ok: true };
    }
    if (!this.channel.destroyed && !this.channel.writableEnded) this.channel.end();
    if (!this.result && !this.ended) await new Promise<void>((resolve) => (this.onResult = resolve));
    if (!this.channel.destroyed) this.channel.destroy();
    return this.result ?? { ok: false, error: this.failure ?? 'the copy ended without a result' };
  }

  abort(frame: ErrorFrame, _code: number, reason: string): void {
    this.reason ??= reason;
    this.failure ??= frame.message;
    if (!this.channel.destroyed) this.channel.destroy();
  }
}
