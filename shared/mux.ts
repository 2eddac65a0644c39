/**
 * Channels over one agent WebSocket, both ends (broker and agent). Each channel is a Duplex stream
 * with credit-based flow control in each direction (see protocol.ts): `write` waits for credit, and
 * credit is returned only as the reader consumes, so buffers stay bounded by the window.
 *
 * Sending is scheduled across channels so that a keystroke never waits behind a bulk transfer:
 * each channel keeps its own backlog, the mux hands the socket one frame at a time in round robin
 * (channels that were idle first), and never more than SEND_IN_FLIGHT_MAX un-flushed data bytes sit
 * in the WebSocket's buffer. Control frames (credit, eof, close, resize…) go out at once. While
 * someone types (a small frame from a quiet channel), busy channels are held to a small window for
 * a second, so that little of theirs sits in kernel buffers in front of the next keystroke.
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
import { CHANNEL_MESSAGES, parseEnvelope, readMessage, type MessageTable, type PeerMessage } from './wire.js';

export const DEFAULT_WINDOW = 1024 * 1024;
/** Largest data frame: what one channel may put ahead of another's frame in one turn. */
export const MAX_FRAME = 32 * 1024;
/**
 * Data bytes handed to the WebSocket and not yet flushed to the socket, at most. Whatever sits
 * there is in front of the next keystroke; the rest of each channel's backlog waits in the mux,
 * where the scheduler can still put an interactive frame first.
 */
export const SEND_IN_FLIGHT_MAX = 128 * 1024;
/** A frame at most this big from a quiet channel is interactive (keystrokes, an echo, a prompt). */
export const INTERACTIVE_FRAME_MAX = 1024;
/** A channel that sent at most this much within INTERACTIVE_HOLD_MS is quiet: its small frames are interactive. */
const QUIET_BYTES = 64 * 1024;
/** How long after an interactive frame the busy channels are held to HELD_BULK_WINDOW. */
export const INTERACTIVE_HOLD_MS = 1000;
/**
 * While someone types, a busy channel may have at most this many bytes sent and not yet credited
 * (instead of its whole window): those bytes sit in the kernel's socket buffers and the peer's, in
 * front of the next keystroke, where no scheduling can reach them any more.
 */
export const HELD_BULK_WINDOW = 128 * 1024;
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

/** What a channel asks of its mux. */
interface ChannelHost {
  send(msg: WireMessage): void;
  sendData(ch: number, payload: Buffer): void;
  schedule(channel: Channel): void;
  forget(id: number): void;
}

export class Channel extends Duplex {
  private sendCredit: number;
  private readonly window: number;
  /** Bytes sent since recentSince (a window of INTERACTIVE_HOLD_MS): how busy the channel is. */
  private recentBytes = 0;
  private recentSince = 0;
  private pending?: PendingWrite;
  private pushed = 0;
  private granted = 0;
  /** What the peer may still send us: the window, less what arrived, plus what we granted back. */
  private receiveCredit: number;
  private grantQueued = false;
  private peerClosed = false;
  private readonly grantBatch: number;
  readonly stats: ChannelStats = { bytesIn: 0, bytesOut: 0 };

  constructor(
    private readonly mux: ChannelHost,
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
    const left = p.chunk.length - p.offset;
    // A datagram waits for room for the whole of it.
    return this.messageMode ? this.sendCredit >= left : this.sendCredit > 0;
  }

  /**
   * @internal from the scheduler: sends the next frame of the backlog (one datagram, or at most
   * MAX_FRAME bytes) and reports the write done once its last byte is handed to the socket.
   */
  sendFrame(): number {
    const p = this.pending;
    if (!p || !this.sendable) return 0;
    const left = p.chunk.length - p.offset;
    const n = this.messageMode ? left : Math.min(MAX_FRAME, this.sendCredit, left);
    this.mux.sendData(this.id, p.chunk.subarray(p.offset, p.offset + n));
    const now = Date.now();
    if (now - this.recentSince > INTERACTIVE_HOLD_MS) {
      this.recentSince = now;
      this.recentBytes = 0;
    }
    this.recentBytes += n;
    p.offset += n;
    this.sendCredit -= n;
    this.stats.bytesOut += n;
    if (p.offset >= p.chunk.length) {
      this.pending = undefined;
      p.callback();
    }
    return n;
  }

  /** @internal whether the channel sent little lately: its small frames are someone typing, not the tail of a transfer. */
  get quiet(): boolean {
    return this.recentBytes <= QUIET_BYTES;
  }

  /** @internal bytes sent and not yet credited back by the peer: in buffers between us and its reader. */
  get uncredited(): number {
    return Math.max(0, this.window - this.sendCredit);
  }

  /**
   * Returns credit to the peer for bytes our reader has consumed: at once for a batch; for a
   * little read with nothing left to read (a keystroke, an echo), once this turn of the event loop
   * is over, so the credit frame neither delays those bytes on their way nor goes out per tiny frame.
   */
  private grant(): void {
    if (this.peerClosed) return;
    const n = this.pushed - this.readableLength - this.granted;
    if (n >= this.grantBatch) return this.sendGrant(n);
    if (n > 0 && this.readableLength === 0 && !this.grantQueued) {
      this.grantQueued = true;
      setImmediate(() => {
        this.grantQueued = false;
        const due = this.pushed - this.readableLength - this.granted;
        if (due > 0 && !this.peerClosed) this.sendGrant(due);
      });
    }
  }

  private sendGrant(n: number): void {
    this.granted += n;
    this.receiveCredit += n;
    this.mux.send({ t: 'credit', ch: this.id, n });
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

function first<T>(set: Set<T>): T | undefined {
  return set.values().next().value;
}

export type OpenHandler = (channel: Channel) => Promise<Record<string, unknown> | void>;

/** What a mux sends: the agent protocol's messages, and on a link between brokers its own. */
export type WireMessage = ControlMessage | PeerMessage;

export interface MuxEvents<M> {
  /** a device-level (or link-level) message, read with the mux's table */
  control: [msg: M];
  'protocol-error': [err: MuxProtocolError];
  close: [reason: string];
}

export interface MuxOptions<M extends { t: string }> {
  /**
   * The device-level messages this end takes, one reader each (shared/wire.ts): FROM_AGENT on the
   * broker, FROM_BROKER on the agent, FROM_PEER on a link between brokers. A message of one of these
   * types that does not read is the peer's protocol error; other types are left alone.
   */
  receives: MessageTable<M>;
  /** Per channel and direction, both ends alike; at most MAX_CHANNEL_CREDIT. */
  window?: number;
  /** Unflushed bytes above which the peer counts as not reading (MAX_UNREAD_BYTES). */
  maxUnreadBytes?: number;
  /** Agent side: serves channels the broker opens. Resolve with optional info, throw to refuse. */
  onOpen?: OpenHandler;
  /**
   * When both ends open channels (a link between two brokers): the ids this end gives its own
   * channels, odd or even, so the two ends never pick the same one. Default: 1, 2, 3… (agent link).
   */
  channelIds?: 'odd' | 'even';
}

/**
 * One end of the agent connection. Emits `control` for device-level messages (inventory, reload…),
 * read with `options.receives`, and `close` when the WebSocket is gone (every channel is then destroyed).
 *
 * What the peer sends is checked on receipt: data beyond the credit granted and grants above
 * MAX_CHANNEL_CREDIT close the connection at once, other unreadable messages (not JSON, or a known
 * type that does not read: shared/wire.ts) after MAX_PROTOCOL_ERRORS. `protocol-error` is emitted for the first one only (one log line per
 * connection); `protocolErrors` counts them all.
 */
export class Mux<M extends { t: string }> extends EventEmitter<MuxEvents<M>> {
  private readonly channels = new Map<number, Channel>();
  private readonly opening = new Map<number, { resolve: (info: Record<string, unknown>) => void; reject: (e: Error) => void; timer: NodeJS.Timeout }>();
  private nextId: number;
  private readonly idStep: number;
  private closed = false;
  private protocolErrorCount = 0;
  private readonly maxUnreadBytes: number;
  /** Send scheduling (see the top of this file): channels with a backlog, in the order they are served. */
  private readonly newFlows = new Set<Channel>();
  private readonly oldFlows = new Set<Channel>();
  private inFlight = 0;
  private pumping = false;
  /** The socket is corked until the end of this turn (see coalesce). */
  private corked = false;
  /** Until when busy channels are held to HELD_BULK_WINDOW (see holdBulk). */
  private interactiveUntil = 0;
  private holdTimer?: NodeJS.Timeout;
  readonly window: number;
  /** The close code, when this end closed the connection (a protocol error, a peer not reading). */
  closeCode?: number;

  constructor(
    readonly ws: WebSocket,
    private readonly options: MuxOptions<M>,
  ) {
    super();
    this.window = options.window ?? DEFAULT_WINDOW;
    if (!(this.window > 0 && this.window <= MAX_CHANNEL_CREDIT)) throw new RangeError(`window must be from 1 to ${MAX_CHANNEL_CREDIT} bytes`);
    this.maxUnreadBytes = options.maxUnreadBytes ?? MAX_UNREAD_BYTES;
    this.nextId = options.channelIds === 'even' ? 2 : 1;
    this.idStep = options.channelIds ? 2 : 1;
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

  send(msg: WireMessage): void {
    if (!this.canSend()) return;
    this.coalesce();
    this.ws.send(JSON.stringify(msg));
  }

  /**
   * Frames sent in one turn of the event loop leave in one write: the socket is corked until the
   * turn's callbacks and promise jobs are done (a group of sessions opened at once is one write
   * to the agent, not one each; a lone keystroke leaves in the same turn, with no delay).
   */
  private coalesce(): void {
    if (this.corked) return;
    const socket = (this.ws as unknown as { _socket?: { cork(): void; uncork(): void } })._socket;
    if (!socket) return;
    this.corked = true;
    socket.cork();
    process.nextTick(() => {
      this.corked = false;
      socket.uncork();
    });
  }

  /** @internal from the scheduler only: one data frame, counted in flight until the socket has it. */
  sendData(ch: number, payload: Buffer): void {
    if (!this.canSend()) return;
    const n = payload.length;
    this.inFlight += n;
    this.coalesce();
    this.ws.send(encodeData(ch, payload), { binary: true }, () => {
      this.inFlight -= n;
      this.pump();
    });
  }

  /** @internal a channel has data to send (a write, or new credit for its backlog). */
  schedule(channel: Channel): void {
    if (this.newFlows.has(channel) || this.oldFlows.has(channel)) return;
    // A channel that was idle (a keystroke, a resize's redraw) is served before the busy ones.
    this.newFlows.add(channel);
    this.pump();
  }

  /**
   * Hands frames to the socket while it has room: one frame per turn per channel, idle-then-busy
   * channels first, then the busy ones in round robin. A channel with nothing it may send (no
   * data, or no credit) leaves the rotation until it schedules itself again.
   */
  private pump(): void {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (!this.closed && this.inFlight < SEND_IN_FLIGHT_MAX) {
        const channel = first(this.newFlows) ?? first(this.oldFlows);
        if (!channel) return;
        this.newFlows.delete(channel);
        this.oldFlows.delete(channel);
        if (!channel.sendable) continue;
        if (channel.uncredited >= HELD_BULK_WINDOW && this.holdingBulk()) continue; // its credit, or the hold's end, brings it back
        const sent = channel.sendFrame();
        if (sent <= INTERACTIVE_FRAME_MAX && channel.quiet) this.holdBulk();
        // The write callback may have queued the channel's next chunk, which scheduled it anew.
        this.newFlows.delete(channel);
        if (channel.sendable) this.oldFlows.add(channel);
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Someone types: busy channels are held to HELD_BULK_WINDOW until INTERACTIVE_HOLD_MS after the last keystroke. */
  private holdBulk(): void {
    this.interactiveUntil = Date.now() + INTERACTIVE_HOLD_MS;
    if (this.holdTimer) return;
    const release = () => {
      const left = this.interactiveUntil - Date.now();
      if (left > 0 && !this.closed) {
        this.holdTimer = setTimeout(release, left);
        this.holdTimer.unref?.();
        return;
      }
      this.holdTimer = undefined;
      // Channels held back wait for no credit: give them their turn again.
      for (const channel of this.channels.values()) if (channel.sendable) this.schedule(channel);
    };
    this.holdTimer = setTimeout(release, INTERACTIVE_HOLD_MS);
    this.holdTimer.unref?.();
  }

  private holdingBulk(): boolean {
    return this.interactiveUntil > Date.now();
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
    const channel = this.channels.get(id);
    if (channel) {
      this.newFlows.delete(channel);
      this.oldFlows.delete(channel);
    }
    this.channels.delete(id);
  }

  /** Broker side: opens a channel; resolves once the agent has set it up. */
  async open(kind: ChannelKind, params: ChannelParams, timeoutMs = OPEN_TIMEOUT_MS): Promise<{ channel: Channel; info: Record<string, unknown> }> {
    if (this.closed) throw new Error('agent is not connected');
    const id = this.nextId;
    this.nextId += this.idStep;
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
    this.newFlows.clear();
    this.oldFlows.clear();
    clearTimeout(this.holdTimer);
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
    const envelope = parseEnvelope(text);
    if (!envelope) throw new MuxProtocolError(MuxErrorCode.unreadable, 'text frame is not a control message');
    const msg = readMessage(CHANNEL_MESSAGES, envelope);
    if (msg === 'unknown') return this.onDeviceMessage(envelope);
    if (!msg) throw new MuxProtocolError(MuxErrorCode.unreadable, `${envelope.t.slice(0, 40)} message does not read`);
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
    }
  }

  /** A device-level message: read with this end's table; a type it does not take is left alone. */
  private onDeviceMessage(envelope: { t: string } & Record<string, unknown>): void {
    const msg = readMessage(this.options.receives, envelope);
    if (msg === 'unknown') return;
    if (!msg) throw new MuxProtocolError(MuxErrorCode.unreadable, `${envelope.t.slice(0, 40)} message does not read`);
    this.emit('control', msg as M);
  }

  private async accept(id: number, kind: ChannelKind, params: ChannelParams): Promise<void> {
    const ours = this.options.channelIds !== undefined && (id % 2 === 1) === (this.options.channelIds === 'odd');
    if (!this.options.onOpen || this.channels.has(id) || ours) {
      this.send({ t: 'close', ch: id, error: 'channels cannot be opened from this side' });
      // Every refusal is a reply: a peer repeating opens is a protocol error, not a reply queue.
      this.onProtocolError(new MuxProtocolError(MuxErrorCode.unexpected, `open of channel ${id} refused`));
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
