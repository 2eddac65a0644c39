/**
 * Channels over one agent WebSocket, both ends (broker and agent): the connection's side. The mux
 * opens and accepts channels (mux-channel.ts: each a Duplex stream with credit-based flow control),
 * reads what arrives — data frames for a channel, the channel messages, and device-level messages
 * read with this end's table (shared/wire.ts) — and cuts a peer that breaks the protocol or stops
 * reading. Sending is scheduled across channels so that a keystroke never waits behind a bulk
 * transfer (mux-scheduler.ts). Control frames (credit, eof, close, resize…) go out at once.
 */
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import type WebSocket from 'ws';
import { AgentRefusal, isAgentRefusalCode } from './codes.js';
import { Channel, DEFAULT_WINDOW, MuxProtocolError, type FramePayload, type WireMessage } from './mux-channel.js';
import { payloadLength, writeDataFrame } from './mux-frame.js';
import { SendScheduler } from './mux-scheduler.js';
import { LeasedReads } from './read-buffers.js';
import { SocketHold, type Corkable } from './turn-cork.js';
import { AgentClose, decodeData, encodeData, MAX_CHANNEL_CREDIT, MuxErrorCode, type ChannelKind, type ChannelParams } from './protocol.js';
import { CHANNEL_MESSAGES, parseEnvelope, readMessage, type MessageTable } from './wire.js';
import { tapBinaryFrames } from './ws-tap.js';

export {
  Channel,
  COPIED_FRAME_MAX,
  DEFAULT_WINDOW,
  handOver,
  INTERACTIVE_HOLD_MS,
  MAX_FRAME,
  MuxProtocolError,
  SMALL_GRANT_DELAY_MS,
  type ChannelStats,
  type WireMessage,
} from './mux-channel.js';
export { BULK_FRAME, HELD_BULK_WINDOW, INTERACTIVE_FRAME_MAX, SEND_IN_FLIGHT_MAX } from './mux-scheduler.js';

const OPEN_TIMEOUT_MS = 15_000;
/** A channel's own beginning and end: frames that may wait for the rest of the poll (see coalesce). */
const LIFECYCLE: ReadonlySet<string> = new Set(['open', 'opened', 'close']);
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

export type OpenHandler = (channel: Channel) => Promise<Record<string, unknown> | void>;

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
  /** Called at each data frame from the peer (they are read past ws's 'message': a liveness sign). */
  onDataFrame?: () => void;
  /**
   * Reads the WebSocket's socket (plain TCP only) into reused buffers of up to 256 KiB
   * (read-buffers.ts), where Node reads a fresh 64 KiB buffer each time. A channel whose reader gives
   * its chunks back (Channel `takeLeases`) is handed views of those reads, each read into again once
   * every view is given back; any other channel gets a copy.
   */
  leaseReads?: boolean;
}

/**
 * A piece of a data frame is handed on as a view of its read only when it is at least this share of
 * the read's buffer; a smaller one is copied. A view holds the whole buffer, so a peer sending small
 * frames to a reader that does not read holds at most this many times the bytes its credit allows.
 */
const LEASED_PIECE_SHARE = 4;

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
  /** Which channel's frame goes next (mux-scheduler.ts). */
  private readonly scheduler = new SendScheduler({ isClosed: () => this.closed, channels: () => this.channels.values() });
  /** Corks the socket until the end of this turn or of the loop's iteration (see coalesce), once it has one. */
  private hold?: SocketHold;
  readonly window: number;
  /** The close code, when this end closed the connection (a protocol error, a peer not reading). */
  closeCode?: number;
  /** The channel id of the data frame being read piece by piece (readPiece), and its pieces so far. */
  private readonly pieceHead = Buffer.alloc(4);
  private pieces: Buffer[] = [];
  /** The release of each piece that is a view of a reused read (leaseReads), by its index in `pieces`. */
  private pieceReleases: (((error?: unknown) => void) | undefined)[] = [];
  /** The socket's reads into reused buffers (options.leaseReads), once moved. */
  private readonly reads?: LeasedReads;

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
    // Data frames are read as the socket's reads bring them, never re-assembled (ws-tap.ts).
    const socket = (ws as unknown as { _socket?: Socket })._socket;
    const reads = options.leaseReads && LeasedReads.movable(socket) ? new LeasedReads(socket) : undefined;
    const tapped = tapBinaryFrames(
      ws,
      (piece, at, length) => {
        if (this.closed) return;
        try {
          this.readPiece(piece, at, length);
        } catch (err) {
          this.onProtocolError(err instanceof MuxProtocolError ? err : new MuxProtocolError(MuxErrorCode.unreadable, (err as Error).message));
        }
      },
      reads !== undefined,
    );
    if (tapped && reads?.start()) this.reads = reads;
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
    this.coalesce(LIFECYCLE.has(msg.t));
    this.ws.send(JSON.stringify(msg));
  }

  /**
   * Frames sent in one turn of the event loop leave in one write: the socket is corked until the
   * turn's callbacks and promise jobs are done (a group of sessions opened at once is one write
   * to the agent, not one each; a lone keystroke leaves in the same turn, with no delay). A channel's
   * open, opened and close are held to the end of the loop's iteration (`lifecycle`): sessions
   * closed by their clients, or connected to their targets, in one poll each do so in a turn of its
   * own, and their frames now share a write and wake the peer once. Any other frame sent meanwhile
   * takes them with it at the end of its turn (shared/turn-cork.ts SocketHold).
   */
  private coalesce(lifecycle = false): void {
    if (!this.hold) {
      const socket = (this.ws as unknown as { _socket?: Corkable })._socket;
      if (!socket) return;
      this.hold = new SocketHold(socket);
    }
    if (lifecycle) this.hold.iteration();
    else this.hold.turn();
  }

  /**
   * @internal from the scheduler only: one data frame, counted in flight until the socket has it.
   * The payload is framed where it lies (mux-frame.ts), not copied: it is the socket's until
   * `flushed` runs (at once when nothing is sent). An `owned` payload (mux-channel.ts handOver) is
   * masked in place from a client end; any other is only read.
   */
  sendData(ch: number, payload: FramePayload, flushed?: () => void, owned = false): void {
    if (!this.canSend()) return flushed?.();
    const n = payloadLength(payload);
    this.scheduler.sent(n);
    this.coalesce();
    // The callbacks are written inline, not held in a named const: run through tsx (esbuild's
    // keepNames, as the development broker and agent and the bench run), a closure given a name is
    // wrapped in a call that defines its `name` property, once per frame, per keystroke.
    if (!writeDataFrame(this.ws, ch, payload, () => this.frameFlushed(n, flushed), owned))
      this.ws.send(encodeData(ch, Buffer.isBuffer(payload) ? payload : Buffer.concat(payload, n)), { binary: true }, () => this.frameFlushed(n, flushed));
  }

  /** A data frame of `n` bytes left the socket: room in the scheduler, and its sender's callback. */
  private frameFlushed(n: number, flushed?: () => void): void {
    this.scheduler.flushed(n);
    flushed?.();
  }

  /** @internal a channel has data to send (a write, or new credit for its backlog). */
  schedule(channel: Channel): void {
    this.scheduler.schedule(channel);
  }

  /** @internal a quiet channel's lone small write, sent at once if nothing should go first (mux-scheduler.ts). */
  sendAtOnce(channel: Channel, chunk: Buffer): boolean {
    return this.scheduler.sendAtOnce(channel, chunk);
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
    if (channel) this.scheduler.forget(channel);
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
    this.scheduler.stop();
    for (const channel of [...this.channels.values()]) channel.onClose(reason);
    this.channels.clear();
    this.emit('close', reason);
  }

  private onBinary(frame: Buffer): void {
    const decoded = decodeData(frame);
    if (!decoded) throw new MuxProtocolError(MuxErrorCode.unreadable, 'binary frame shorter than its channel id');
    this.channels.get(decoded.ch)?.onData(decoded.payload);
  }

  /**
   * Bytes `at`… of a data frame of `length` bytes (`[channel id][bytes]`), as they arrive: the
   * channel's bytes go to it piece by piece, each checked against its credit.
   */
  private readPiece(piece: Buffer, at: number, length: number): void {
    if (at === 0) {
      this.options.onDataFrame?.();
      this.pieces = [];
      this.pieceReleases = [];
    }
    if (length < 4) {
      if (at + piece.length === length) throw new MuxProtocolError(MuxErrorCode.unreadable, 'binary frame shorter than its channel id');
      return;
    }
    let bytes = piece;
    if (at < 4) {
      const n = Math.min(4 - at, piece.length);
      piece.copy(this.pieceHead, at, 0, n);
      bytes = piece.subarray(n);
    }
    if (bytes.length > 0) this.keepPiece(bytes);
    if (at + piece.length < length) return;
    // The frame is whole: its pieces (views, not copies) go to the channel together, so that its
    // reader can write them out in one system call (a 128 KiB frame comes in two or three reads).
    const channel = this.channels.get(this.pieceHead.readUInt32BE(0));
    const pieces = this.pieces;
    const releases = this.pieceReleases;
    this.pieces = [];
    this.pieceReleases = [];
    if (length === 4) channel?.onData(piece.subarray(piece.length));
    for (let i = 0; i < pieces.length; i++) {
      if (channel) channel.onData(pieces[i], releases[i]);
      else releases[i]?.();
    }
  }

  /**
   * Keeps a piece of the frame being read (its channel id is whole) until the frame is whole. A view
   * of a reused read (leaseReads) is held from its read for a channel that takes leases, when large
   * enough; any other is copied now, as its buffer is read into again after this turn.
   */
  private keepPiece(bytes: Buffer): void {
    const index = this.pieces.length;
    if (!this.reads?.reused) {
      this.pieces.push(bytes);
      return;
    }
    const leases = this.channels.get(this.pieceHead.readUInt32BE(0))?.leasesTaken === true;
    if (leases && bytes.length * LEASED_PIECE_SHARE >= bytes.buffer.byteLength) {
      this.pieces.push(bytes);
      this.pieceReleases[index] = this.reads.hold();
      return;
    }
    this.pieces.push(Buffer.from(bytes));
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
