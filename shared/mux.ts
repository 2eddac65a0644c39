/**
 * Channels over one agent WebSocket, both ends (broker and agent). Each channel is a Duplex stream
 * with credit-based flow control in each direction (see protocol.ts): `write` waits for credit, and
 * credit is returned only as the reader consumes, so buffers stay bounded by the window.
 */
import { EventEmitter } from 'node:events';
import { Duplex } from 'node:stream';
import type WebSocket from 'ws';
import { AgentRefusal, isAgentRefusalCode, refusalCodeOf } from './codes.js';
import {
  AgentClose,
  decodeData,
  encodeData,
  MAX_CHANNEL_CREDIT,
  MuxErrorCode,
  type ChannelControl,
  type ChannelKind,
  type ChannelParams,
  type ControlMessage,
} from './protocol.js';

export const DEFAULT_WINDOW = 1024 * 1024;
const MAX_FRAME = 64 * 1024;
const OPEN_TIMEOUT_MS = 15_000;
/** Unreadable messages tolerated on one connection; the next one closes it. */
export const MAX_PROTOCOL_ERRORS = 8;
/**
 * Bytes handed to the WebSocket but not yet flushed, at most. Credit keeps each channel's data in
 * flight below its window, so more than this means the peer stopped reading: the connection is cut
 * rather than queued to.
 */
export const MAX_UNREAD_BYTES = 64 * 1024 * 1024;
/** A peer closed for a protocol error gets this long to see the close frame before its socket is cut. */
const PROTOCOL_ERROR_CLOSE_GRACE_MS = 2000;

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

interface PendingWrite {
  chunk: Buffer;
  offset: number;
  callback: (error?: Error | null) => void;
}

export interface ChannelStats {
  bytesIn: number;
  bytesOut: number;
}

export class Channel extends Duplex {
  private sendCredit: number;
  private pending?: PendingWrite;
  private pushed = 0;
  private granted = 0;
  /** What the peer may still send us: the window, less what arrived, plus what we granted back. */
  private receiveCredit: number;
  private peerClosed = false;
  private readonly grantBatch: number;
  readonly stats: ChannelStats = { bytesIn: 0, bytesOut: 0 };

  constructor(
    private readonly mux: Mux,
    readonly id: number,
    readonly kind: ChannelKind,
    readonly params: ChannelParams,
    window: number,
    /** Datagram channels never split a write across frames. */
    private readonly messageMode = false,
  ) {
    super({ readableHighWaterMark: window, writableHighWaterMark: 256 * 1024, allowHalfOpen: true });
    this.sendCredit = window;
    this.receiveCredit = window;
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
    this.pending = { chunk, offset: 0, callback };
    this.flush();
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

  private flush(): void {
    const p = this.pending;
    if (!p) return;
    while (p.offset < p.chunk.length && this.sendCredit > 0) {
      const left = p.chunk.length - p.offset;
      if (this.messageMode && this.sendCredit < left) return; // wait for room for the whole datagram
      const n = this.messageMode ? left : Math.min(MAX_FRAME, this.sendCredit, left);
      this.mux.sendData(this.id, p.chunk.subarray(p.offset, p.offset + n));
      p.offset += n;
      this.sendCredit -= n;
      this.stats.bytesOut += n;
    }
    if (p.offset >= p.chunk.length) {
      this.pending = undefined;
      p.callback();
    }
  }

  /** Returns credit to the peer for bytes our reader has consumed. */
  private grant(): void {
    if (this.peerClosed) return;
    const consumed = this.pushed - this.readableLength;
    const n = consumed - this.granted;
    if (n >= this.grantBatch || (n > 0 && this.readableLength === 0)) {
      this.granted += n;
      this.receiveCredit += n;
      this.mux.send({ t: 'credit', ch: this.id, n });
    }
  }

  /** @internal from the mux; throws MuxProtocolError when the peer sends beyond the credit it holds. */
  onData(payload: Buffer): void {
    if (payload.length > this.receiveCredit) {
      throw new MuxProtocolError(
        MuxErrorCode.creditExceeded,
        `channel ${this.id}: ${payload.length} bytes arrived with ${this.receiveCredit} bytes of credit left`,
        true,
      );
    }
    this.receiveCredit -= payload.length;
    if (this.destroyed || this.readableEnded) return;
    this.pushed += payload.length;
    this.stats.bytesIn += payload.length;
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
    this.flush();
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

export type OpenHandler = (channel: Channel) => Promise<Record<string, unknown> | void>;

export interface MuxOptions {
  /** Per channel and direction, both ends alike; at most MAX_CHANNEL_CREDIT. */
  window?: number;
  /** Unflushed bytes above which the peer counts as not reading (MAX_UNREAD_BYTES). */
  maxUnreadBytes?: number;
  /** Agent side: serves channels the broker opens. Resolve with optional info, throw to refuse. */
  onOpen?: OpenHandler;
}

/**
 * One end of the agent connection. Emits `control` for device-level messages (inventory, reload…)
 * and `close` when the WebSocket is gone (every channel is then destroyed).
 *
 * What the peer sends is checked on receipt: data beyond the credit granted and grants above
 * MAX_CHANNEL_CREDIT close the connection at once, other unreadable messages after
 * MAX_PROTOCOL_ERRORS. `protocol-error` is emitted for the first one only (one log line per
 * connection); `protocolErrors` counts them all.
 */
export class Mux extends EventEmitter {
  private readonly channels = new Map<number, Channel>();
  private readonly opening = new Map<number, { resolve: (info: Record<string, unknown>) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();
  private nextId = 1;
  private closed = false;
  private protocolErrorCount = 0;
  private readonly maxUnreadBytes: number;
  readonly window: number;
  /** The close code, when this end closed the connection (a protocol error, a peer not reading). */
  closeCode?: number;

  constructor(
    readonly ws: WebSocket,
    private readonly options: MuxOptions = {},
  ) {
    super();
    this.window = options.window ?? DEFAULT_WINDOW;
    if (!(this.window > 0 && this.window <= MAX_CHANNEL_CREDIT)) throw new RangeError(`window must be from 1 to ${MAX_CHANNEL_CREDIT} bytes`);
    this.maxUnreadBytes = options.maxUnreadBytes ?? MAX_UNREAD_BYTES;
    ws.on('message', (data, isBinary) => {
      if (this.closed) return;
      try {
        if (isBinary) this.onBinary(data as Buffer);
        else this.onText(String(data));
      } catch (err) {
        this.onProtocolError(err instanceof MuxProtocolError ? err : new MuxProtocolError(MuxErrorCode.unreadable, (err as Error).message));
      }
    });
    ws.on('close', () => this.shutdown('connection closed'));
  }

  get openChannels(): number {
    return this.channels.size;
  }

  /** Protocol errors of the peer on this connection (only the first is emitted). */
  get protocolErrors(): number {
    return this.protocolErrorCount;
  }

  send(msg: ControlMessage): void {
    if (!this.canSend()) return;
    this.ws.send(JSON.stringify(msg));
  }

  /** @internal */
  sendData(ch: number, payload: Buffer): void {
    if (!this.canSend()) return;
    this.ws.send(encodeData(ch, payload), { binary: true });
  }

  /** Checked before every send: a peer that leaves too much unread is cut, never queued to without bound. */
  private canSend(): boolean {
    if (this.closed || this.ws.readyState !== this.ws.OPEN) return false;
    if (this.ws.bufferedAmount <= this.maxUnreadBytes) return true;
    // A close frame would queue behind the unread bytes: cut the connection.
    this.ws.terminate();
    this.shutdown(`peer not reading: more than ${this.maxUnreadBytes} bytes unread`, AgentClose.peerNotReading);
    return false;
  }

  private onProtocolError(err: MuxProtocolError): void {
    this.protocolErrorCount += 1;
    if (this.protocolErrorCount === 1) this.emit('protocol-error', err);
    if (!err.fatal && this.protocolErrorCount <= MAX_PROTOCOL_ERRORS) return;
    this.close(AgentClose.protocolError, err.fatal ? `protocol error: ${err.code}` : 'protocol error: too many unreadable messages');
    // What the peer still sends is not read (a hostile one keeps sending until its socket is cut).
    this.ws.pause();
    setTimeout(() => this.ws.terminate(), PROTOCOL_ERROR_CLOSE_GRACE_MS).unref();
  }

  /** @internal */
  forget(id: number): void {
    this.channels.delete(id);
  }

  /** Broker side: opens a channel; resolves once the agent has set it up. */
  async open(kind: ChannelKind, params: ChannelParams, timeoutMs = OPEN_TIMEOUT_MS): Promise<{ channel: Channel; info: Record<string, unknown> }> {
    if (this.closed) throw new Error('agent is not connected');
    const id = this.nextId++;
    const channel = new Channel(this, id, kind, params, this.window, kind === 'tunnel' && (params as { proto?: string }).proto === 'udp');
    this.channels.set(id, channel);
    const info = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.opening.delete(id);
        reject(new Error('the agent did not answer in time'));
      }, timeoutMs);
      this.opening.set(id, { resolve, reject, timer });
      this.send({ t: 'open', ch: id, kind, params });
    }).catch((err: Error) => {
      this.channels.delete(id);
      channel.destroy();
      throw err;
    });
    return { channel, info };
  }

  close(code?: number, reason?: string): void {
    this.ws.close(code, reason);
    this.shutdown(reason ?? 'closed', code);
  }

  private shutdown(reason: string, code?: number): void {
    if (this.closed) return;
    this.closed = true;
    this.closeCode = code;
    for (const [, pending] of this.opening) {
      clearTimeout(pending.timer);
      pending.reject(new Error(reason));
    }
    this.opening.clear();
    for (const channel of [...this.channels.values()]) channel.onClose(reason);
    this.channels.clear();
    this.emit('close', reason);
  }

  private onBinary(frame: Buffer): void {
    const decoded = decodeData(frame);
    if (!decoded) throw new MuxProtocolError(MuxErrorCode.unreadable, 'binary frame shorter than its channel id');
    this.channels.get(decoded.ch)?.onData(decoded.payload);
  }

  private onText(text: string): void {
    const msg = JSON.parse(text) as ControlMessage;
    if (typeof msg !== 'object' || msg === null || typeof msg.t !== 'string') {
      throw new MuxProtocolError(MuxErrorCode.unreadable, 'text frame is not a control message');
    }
    switch (msg.t) {
      case 'open':
        void this.accept(msg.ch, msg.kind, msg.params);
        return;
      case 'opened': {
        const pending = this.opening.get(msg.ch);
        if (!pending) return;
        clearTimeout(pending.timer);
        this.opening.delete(msg.ch);
        pending.resolve(msg.info ?? {});
        return;
      }
      case 'credit':
        this.channels.get(msg.ch)?.onCredit(msg.n);
        return;
      case 'eof':
        this.channels.get(msg.ch)?.onEof();
        return;
      case 'close': {
        const pending = this.opening.get(msg.ch);
        if (pending) {
          clearTimeout(pending.timer);
          this.opening.delete(msg.ch);
          const message = msg.error ?? 'refused by the agent';
          // The refusal's code travels with it, so the broker branches on the code, not the sentence.
          pending.reject(isAgentRefusalCode(msg.code) ? new AgentRefusal(msg.code, message) : new Error(message));
          return;
        }
        this.channels.get(msg.ch)?.onClose(msg.error);
        return;
      }
      case 'ctl':
        this.channels.get(msg.ch)?.onControl(msg.msg);
        return;
      default:
        this.emit('control', msg);
    }
  }

  private async accept(id: number, kind: ChannelKind, params: ChannelParams): Promise<void> {
    if (!this.options.onOpen || this.channels.has(id)) {
      this.send({ t: 'close', ch: id, error: 'channels cannot be opened from this side' });
      // Every refusal is a reply: a peer repeating opens is a protocol error, not a reply queue.
      this.onProtocolError(new MuxProtocolError(MuxErrorCode.unexpected, `open of channel ${String(id)} refused`));
      return;
    }
    const channel = new Channel(this, id, kind, params, this.window, kind === 'tunnel' && (params as { proto?: string }).proto === 'udp');
    this.channels.set(id, channel);
    try {
      const info = await this.options.onOpen(channel);
      this.send({ t: 'opened', ch: id, ...(info ? { info } : {}) });
    } catch (err) {
      channel.destroy(err as Error);
    }
  }
}
