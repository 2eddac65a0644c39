/**
 * One channel of a mux (mux.ts): a Duplex stream with credit-based flow control in each direction
 * (see protocol.ts). `write` waits for credit, and credit is returned only as the reader consumes,
 * so buffers stay bounded by the window. The channel cuts its backlog into frames when the send
 * scheduler (mux-scheduler.ts) gives it a turn, and checks what the peer sends it against the
 * credit it granted.
 */
import { Duplex } from 'node:stream';
import { refusalCodeOf } from './codes.js';
import { MAX_CHANNEL_CREDIT, MuxErrorCode, type ChannelControl, type ChannelKind, type ChannelParams, type ControlMessage } from './protocol.js';
import type { PeerMessage } from './wire.js';

export const DEFAULT_WINDOW = 1024 * 1024;
/** Largest data frame: what one channel may put ahead of another's frame in one turn. */
export const MAX_FRAME = 32 * 1024;
/**
 * A write that fits in one frame of up to this size is copied and reported done at once: a channel's
 * next keystroke or screenful then never waits for the socket to flush the previous one (behind a
 * busy channel's frames). Other frames are the written buffer itself, and the write is reported done
 * once its last frame is flushed (the socket flushes them in order).
 */
export const COPIED_FRAME_MAX = 16 * 1024;
/** A channel that sent at most this much within the last one or two INTERACTIVE_HOLD_MS is quiet: its small frames are interactive. */
const QUIET_BYTES = 64 * 1024;
/**
 * Credit for little reads (keystrokes, echoes) is held this long, then rides with the channel's next
 * data frame (the same write), or goes in a frame of its own once this long again passed with nothing
 * sent. Owed credit stays below an eighth of the window (a batch's worth is granted at once), so the
 * peer never waits for it: a round trip of typing carries no credit at all, and a stream of them one
 * grant per SMALL_GRANT_DELAY_MS at most, instead of one per keystroke each way.
 */
export const SMALL_GRANT_DELAY_MS = 250;
/** How long after an interactive frame the busy channels are held to HELD_BULK_WINDOW. */
export const INTERACTIVE_HOLD_MS = 1000;

/** A data frame's payload: one buffer, or several framed as one (a channel's writes gathered by `_writev`). */
export type FramePayload = Buffer | readonly Buffer[];

/** What a mux sends: the agent protocol's messages, and on a link between brokers its own. */
export type WireMessage = ControlMessage | PeerMessage;

/** What the peer did wrong; `fatal` ones close the connection at once. */
export class MuxProtocolError extends Error {
  constructor(
    readonly code: MuxErrorCode,
    message: string,
    readonly fatal = false,
  ) {
    super(message);
  }
}

/** A write being sent: one chunk (`_write`), or the chunks of several writes gathered (`_writev`). */
interface PendingWrite {
  chunks: Buffer[];
  /** The chunk the next frame starts in, and where in it. */
  index: number;
  offset: number;
  /** Bytes of all the chunks not yet framed. */
  left: number;
  /** Whether a frame of this write went out already. */
  started: boolean;
  callback: (error?: Error | null) => void;
  /** The writer handed every chunk over (handOver): their frames may be masked where they lie. */
  owned: boolean;
}

/** Chunks whose writers gave them up, until the channel's `_write` takes them (see handOver). */
const handedOver = new WeakSet<Buffer>();

/**
 * Marks `chunk`, about to be written to a channel, as handed over: its writer neither reads nor
 * changes it again before that write's callback (a read buffer reused only after it). A client end
 * may then mask its frames where they lie (RFC 6455 §5.3) instead of into a copy: after the write the
 * chunk's bytes are no longer what was written. Every other chunk is only read.
 */
export function handOver(chunk: Buffer): Buffer {
  handedOver.add(chunk);
  return chunk;
}

export interface ChannelStats {
  bytesIn: number;
  bytesOut: number;
}

/** What a channel asks of its mux. */
export interface ChannelHost {
  send(msg: WireMessage): void;
  /**
   * `flushed` runs once the socket has the payload (which is not copied: it is the socket's until
   * then). `owned`: the payload is the mux's for good (handed over, or a copy): it may be masked in place.
   */
  sendData(ch: number, payload: FramePayload, flushed?: () => void, owned?: boolean): void;
  schedule(channel: Channel): void;
  /**
   * A quiet channel's lone small write, sent at once (`sendCopy`) when nothing waits to go first
   * (mux-scheduler.ts `sendAtOnce`); false, with nothing sent, when it must take its turn. A host
   * without it has every write take its turn.
   */
  sendAtOnce?(channel: Channel, chunk: Buffer): boolean;
  forget(id: number): void;
}

export class Channel extends Duplex {
  private sendCredit: number;
  private readonly window: number;
  /** Bytes sent since recentSince (a window of INTERACTIVE_HOLD_MS): how busy the channel is. */
  private recentBytes = 0;
  private recentSince = 0;
  /** Bytes sent in the window before recentSince's, when that one ended right where this one began (see quiet). */
  private earlierBytes = 0;
  private pending?: PendingWrite;
  private pushed = 0;
  private granted = 0;
  /** What the peer may still send us: the window, less what arrived, plus what we granted back. */
  private receiveCredit: number;
  /**
   * Credit owed for little reads (grant): held SMALL_GRANT_DELAY_MS, then `ripe` (the next data frame
   * of ours takes it), then sent alone SMALL_GRANT_DELAY_MS later if no frame took it. One timer for
   * a whole run of keystrokes, not one armed and cleared per keystroke.
   */
  private grantTimer?: NodeJS.Timeout;
  private grantRipe = false;
  private peerClosed = false;
  private readonly grantBatch: number;
  readonly stats: ChannelStats = { bytesIn: 0, bytesOut: 0 };
  /** Whether the reader gives leased chunks back (takeLeases). */
  leasesTaken = false;
  /** The release of each chunk pushed that is a view of the mux's reused read, until the reader takes it (leaseOf). */
  private readonly leases = new WeakMap<Buffer, (error?: unknown) => void>();

  constructor(
    private readonly mux: ChannelHost,
    readonly id: number,
    readonly kind: ChannelKind,
    readonly params: ChannelParams,
    window: number,
    /** Datagram channels never split a write across frames. */
    private readonly messageMode = false,
  ) {
    super({
      readableHighWaterMark: window,
      writableHighWaterMark: 256 * 1024,
      allowHalfOpen: true,
      // Writes queued behind the one being sent (or held for the turn, see write) go out together, in
      // frames that span them; a datagram is a frame of its own.
      writev: messageMode
        ? undefined
        : function (this: Duplex, chunks: { chunk: Buffer }[], callback: (error?: Error | null) => void) {
            (this as Channel).writeMany(chunks, callback);
          },
    });
    this.sendCredit = window;
    this.receiveCredit = window;
    this.window = window;
    this.grantBatch = Math.max(1, Math.floor(window / 8));
    // A channel's failure is reported through 'close' and `errored`; it must never crash the process.
    this.on('error', () => {});
    // Control messages that arrive before anyone listens (right after `opened`) wait for the first listener.
    this.on('newListener', (event: string) => {
      if (event !== 'control' || this.heldControl.length === 0) return;
      queueMicrotask(() => {
        const held = this.heldControl.splice(0);
        for (const msg of held) this.emit('control', msg);
      });
    });
  }

  private readonly heldControl: ChannelControl[] = [];
  /** Whether this turn's writes are held (corked) until the turn is done (write). */
  private turnHeld = false;

  /** @internal from the mux */
  onControl(msg: ChannelControl): void {
    if (this.listenerCount('control') === 0) this.heldControl.push(msg);
    else this.emit('control', msg);
  }

  /** Sends a channel-level control message (resize, exit, meta, result). */
  control(msg: ChannelControl): void {
    if (!this.peerClosed) this.mux.send({ t: 'ctl', ch: this.id, msg });
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    if (this.peerClosed) return callback(new Error('channel closed by peer'));
    this.pending = { chunks: [chunk], index: 0, offset: 0, left: chunk.length, started: false, callback, owned: handedOver.delete(chunk) };
    this.mux.schedule(this);
  }

  /**
   * A busy channel's writes of one turn are held until the turn's callbacks and promise jobs are done
   * (shared/turn-cork.ts), then taken together (`_writev`) and cut into frames that span them: ssh2
   * writes a 32 KiB packet at a time, eight of them from one 256 KiB read, and each was a frame and
   * a write(2) of its own to the peer, as the next write is taken only once the previous one's frames
   * are flushed. A quiet channel's write (a keystroke, an echo) is not held: its frame is on the
   * socket before write() returns. Writes queued behind one being sent are gathered the same way, at
   * any pace. Their callbacks all run once the last of them is flushed (a writer that reuses a buffer
   * at its write's callback gets it back a little later: at most the high-water mark's worth, as
   * write() says "wait" beyond it). A datagram channel keeps one frame per write.
   *
   * A quiet channel's lone small write (a keystroke, an echo: at most COPIED_FRAME_MAX, with nothing
   * before it in the stream nor in the channel, not corked, credit for all of it) does not go through
   * Writable, `_write` and the scheduler's turn at all when the scheduler holds nothing that would go
   * first: it is copied into its frame and handed to the socket here (sendCopy, accounted as
   * sendFrame's frames are), and its callback runs on the next tick, as Writable runs a write's that
   * completed at once. Every other write goes through the stream, so none overtakes an earlier one.
   */
  override write(chunk: unknown, callback?: (error: Error | null | undefined) => void): boolean;
  override write(chunk: unknown, encoding: BufferEncoding, callback?: (error: Error | null | undefined) => void): boolean;
  override write(chunk: unknown, encoding?: unknown, cb?: unknown): boolean {
    if (
      this.pending === undefined &&
      !this.messageMode &&
      Buffer.isBuffer(chunk) &&
      chunk.length > 0 &&
      chunk.length <= COPIED_FRAME_MAX &&
      chunk.length <= this.sendCredit &&
      this.writableLength === 0 &&
      this.writableCorked === 0 &&
      this.writable &&
      !this.peerClosed &&
      this.quiet &&
      this.mux.sendAtOnce?.(this, chunk) === true
    ) {
      const callback = typeof encoding === 'function' ? encoding : cb;
      if (typeof callback === 'function') process.nextTick(callback as (error: Error | null) => void, null);
      return true;
    }
    if (!this.turnHeld && !this.messageMode && !this.quiet) {
      this.turnHeld = true;
      this.cork();
      process.nextTick(releaseTurn, this);
    }
    return super.write(chunk, encoding as BufferEncoding, cb as (error: Error | null | undefined) => void);
  }

  /** @internal the turn that held this channel's writes is done (write): they go to the scheduler. */
  releaseTurn(): void {
    if (!this.turnHeld) return;
    this.turnHeld = false;
    if (!this.destroyed) this.uncork();
  }

  /** Writes held for this turn leave before the channel is destroyed in it, as they would have unheld. */
  override destroy(error?: Error): this {
    if (!this.destroyed) this.releaseTurn();
    return super.destroy(error);
  }

  private writeMany(entries: { chunk: Buffer }[], callback: (error?: Error | null) => void): void {
    if (this.peerClosed) return callback(new Error('channel closed by peer'));
    const chunks: Buffer[] = [];
    let left = 0;
    let owned = true;
    for (const { chunk } of entries) {
      // Every chunk leaves the set, owned or not.
      if (!handedOver.delete(chunk)) owned = false;
      chunks.push(chunk);
      left += chunk.length;
    }
    this.pending = { chunks, index: 0, offset: 0, left, started: false, callback, owned };
    this.mux.schedule(this);
  }

  override _final(callback: (error?: Error | null) => void): void {
    if (!this.peerClosed) this.mux.send({ t: 'eof', ch: this.id });
    callback();
  }

  override _read(): void {
    this.grant();
  }

  // Every consumption, flowing or paused, goes through read(): the place to return credit.
  override read(size?: number): Buffer | string | null {
    const chunk = super.read(size);
    if (chunk !== null) this.grant();
    return chunk;
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.stopGrantTimer();
    if (!this.peerClosed) {
      this.peerClosed = true;
      const code = refusalCodeOf(error);
      this.mux.send({ t: 'close', ch: this.id, ...(error ? { error: error.message } : {}), ...(code ? { code } : {}) });
    }
    this.mux.forget(this.id);
    const p = this.pending;
    this.pending = undefined;
    p?.callback(error ?? new Error('channel closed'));
    callback(error);
  }

  /** @internal whether the scheduler can take a frame now: data waiting, and credit for it. */
  get sendable(): boolean {
    const p = this.pending;
    if (!p || this.destroyed) return false;
    // A datagram waits for room for the whole of it.
    return this.messageMode ? this.sendCredit >= p.left : this.sendCredit > 0;
  }

  /**
   * @internal from the scheduler: sends the next frame of the backlog (one datagram, or at most
   * `maxFrame` bytes) and reports the write done once the socket has flushed its last byte (the
   * frames are the written buffer itself, not copies: it is not the writer's again before), or at
   * once for a write of one small frame, which is copied (COPIED_FRAME_MAX).
   */
  sendFrame(maxFrame = MAX_FRAME): number {
    const p = this.pending;
    if (!p || !this.sendable) return 0;
    const n = this.messageMode ? p.left : Math.min(maxFrame, this.sendCredit, p.left);
    const started = p.started;
    const frame = takeFrame(p, n);
    const last = p.left === 0;
    if (last) this.pending = undefined;
    if (!last) this.mux.sendData(this.id, frame, undefined, p.owned);
    // A write of one small frame is copied and done at once; a longer write's frames before this one are its buffers, flushed in order before this one.
    else if (n > COPIED_FRAME_MAX || started) this.mux.sendData(this.id, frame, () => p.callback(), p.owned);
    else {
      this.mux.sendData(this.id, Buffer.isBuffer(frame) ? Buffer.from(frame) : Buffer.concat(frame, n), undefined, true);
      p.callback();
    }
    this.account(n);
    return n;
  }

  /**
   * @internal from the scheduler (sendAtOnce): a lone small write, framed as a copy and sent at once,
   * past the stream (see write). Accounted as sendFrame's frames are.
   */
  sendCopy(chunk: Buffer): number {
    handedOver.delete(chunk);
    this.mux.sendData(this.id, Buffer.from(chunk), undefined, true);
    this.account(chunk.length);
    return chunk.length;
  }

  /** A data frame of `n` bytes went out: the credit it took, how busy the channel is, the owed grant it carries. */
  private account(n: number): void {
    // Credit owed for little reads, held long enough, goes in the same write as this frame (grant).
    if (this.grantRipe) this.grantOwed();
    const now = Date.now();
    if (now - this.recentSince > INTERACTIVE_HOLD_MS) {
      // The window that ended is kept as the one before, if it ended less than a window ago.
      this.earlierBytes = now - this.recentSince <= 2 * INTERACTIVE_HOLD_MS ? this.recentBytes : 0;
      this.recentSince = now;
      this.recentBytes = 0;
    }
    this.recentBytes += n;
    this.sendCredit -= n;
    this.stats.bytesOut += n;
  }

  /**
   * @internal whether the channel sent little lately: its small frames are someone typing, not the
   * tail of a transfer. Lately is the current window of INTERACTIVE_HOLD_MS and the one before it:
   * counted over the current window alone, a transfer was quiet for the first frames of every new
   * window, and a small frame among them (the end of a read, a piece of a frame) held every busy
   * channel of the connection, itself included, to HELD_BULK_WINDOW for a second, as a keystroke does.
   */
  get quiet(): boolean {
    const since = Date.now() - this.recentSince;
    if (since > 2 * INTERACTIVE_HOLD_MS) return true;
    if (since > INTERACTIVE_HOLD_MS) return this.recentBytes <= QUIET_BYTES;
    return this.recentBytes + this.earlierBytes <= QUIET_BYTES;
  }

  /** @internal bytes sent and not yet credited back by the peer: in buffers between us and its reader. */
  get uncredited(): number {
    return Math.max(0, this.window - this.sendCredit);
  }

  /**
   * Returns credit to the peer for bytes our reader has consumed: at once for a batch; for little
   * reads with nothing left to read (keystrokes, echoes), held SMALL_GRANT_DELAY_MS, then with this
   * channel's next data frame (sendFrame: the same write, no wake-up of the peer of its own), or
   * alone SMALL_GRANT_DELAY_MS later still if nothing was sent. A run of typing then carries one
   * credit per SMALL_GRANT_DELAY_MS at most each way, riding on a keystroke or an echo, where each
   * keystroke and each echo carried one (a JSON frame built, sent and parsed per keystroke, and a
   * timer armed and cleared).
   */
  private grant(): void {
    if (this.peerClosed) return;
    const n = this.pushed - this.readableLength - this.granted;
    if (n >= this.grantBatch) return this.sendGrant(n);
    if (n > 0 && this.readableLength === 0 && !this.grantTimer) {
      this.grantTimer = setTimeout(() => this.ripen(), SMALL_GRANT_DELAY_MS);
      this.grantTimer.unref?.();
    }
  }

  /** The owed credit was held long enough: the next data frame takes it, or it goes alone later. */
  private ripen(): void {
    this.grantRipe = true;
    this.grantTimer = setTimeout(() => this.grantOwed(), SMALL_GRANT_DELAY_MS);
    this.grantTimer.unref?.();
  }

  /** Sends the credit owed for little reads, if any (their timers' end, or a data frame going out). */
  private grantOwed(): void {
    const due = this.pushed - this.readableLength - this.granted;
    if (due > 0 && !this.peerClosed) this.sendGrant(due);
    else this.stopGrantTimer();
  }

  private stopGrantTimer(): void {
    clearTimeout(this.grantTimer);
    this.grantTimer = undefined;
    this.grantRipe = false;
  }

  private sendGrant(n: number): void {
    this.stopGrantTimer();
    this.granted += n;
    this.receiveCredit += n;
    this.mux.send({ t: 'credit', ch: this.id, n });
  }

  /**
   * The reader will give back each chunk it reads (mux.ts `leaseReads`): it takes each chunk's release
   * with `leaseOf` as it reads it, in the 'data' listener, and calls it once done with the chunk (its
   * write flushed). The mux may then hand on views of its reused reads, not copies. A chunk whose
   * release is never called (read some other way) is only never read into again.
   */
  takeLeases(): void {
    this.leasesTaken = true;
  }

  /** The release of a chunk just read (takeLeases), or undefined for one that is the reader's to keep. */
  leaseOf(chunk: Buffer): ((error?: unknown) => void) | undefined {
    const release = this.leases.get(chunk);
    if (release) this.leases.delete(chunk);
    return release;
  }

  /**
   * @internal from the mux; throws MuxProtocolError when the peer sends beyond the credit it holds.
   * `release`: the payload is a view of a read the mux reuses once it is called (see takeLeases).
   */
  onData(payload: Buffer, release?: (error?: unknown) => void): void {
    if (payload.length > this.receiveCredit) {
      throw new MuxProtocolError(
        MuxErrorCode.creditExceeded,
        `channel ${this.id}: ${payload.length} bytes arrived with ${this.receiveCredit} bytes of credit left`,
        true,
      );
    }
    this.receiveCredit -= payload.length;
    if (this.destroyed || this.readableEnded) return release?.();
    this.pushed += payload.length;
    this.stats.bytesIn += payload.length;
    if (release) this.leases.set(payload, release);
    this.push(payload);
    this.grant();
  }

  /** @internal throws MuxProtocolError for a grant that is not a positive whole number or exceeds the bound. */
  onCredit(n: unknown): void {
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n <= 0 || this.sendCredit + n > MAX_CHANNEL_CREDIT) {
      throw new MuxProtocolError(
        MuxErrorCode.creditOverflow,
        `channel ${this.id}: grant of ${String(n)} refused (credit is bounded by ${MAX_CHANNEL_CREDIT})`,
        true,
      );
    }
    this.sendCredit += n;
    if (this.pending) this.mux.schedule(this);
  }

  /** @internal */
  onEof(): void {
    if (!this.readableEnded) this.push(null);
  }

  /** @internal the peer closed the channel: end both ways, or fail with its error. */
  onClose(error?: string): void {
    this.peerClosed = true;
    if (error) {
      this.destroy(new Error(error));
      return;
    }
    this.push(null);
    const p = this.pending;
    this.pending = undefined;
    p?.callback(new Error('channel closed by peer'));
    if (!this.writableEnded) this.end();
    // Data already buffered for our reader is still delivered; the stream then closes itself.
    if (this.readableLength === 0) this.destroy();
  }
}

function releaseTurn(channel: Channel): void {
  channel.releaseTurn();
}

/**
 * The next `n` bytes of a write (n at most what is left of it), as views of its chunks: one buffer
 * while they lie in one chunk, else the pieces of each chunk they span, framed as one.
 */
function takeFrame(p: PendingWrite, n: number): FramePayload {
  p.started = true;
  p.left -= n;
  const parts: Buffer[] = [];
  let need = n;
  do {
    const chunk = p.chunks[p.index];
    const take = Math.min(need, chunk.length - p.offset);
    if (take > 0 || parts.length === 0) parts.push(chunk.subarray(p.offset, p.offset + take));
    need -= take;
    p.offset += take;
    if (p.offset === chunk.length && p.index < p.chunks.length - 1) {
      p.index += 1;
      p.offset = 0;
    }
  } while (need > 0);
  return parts.length === 1 ? parts[0] : parts;
}
