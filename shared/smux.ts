/**
 * smux protocol version 2 (the stream multiplexer qbee's remote-access clients speak), both ends.
 *
 * Wire format, every integer little-endian:
 *   VERSION(1) | CMD(1) | LENGTH(2) | STREAM ID(4) | DATA(LENGTH)
 * CMD: SYN(0) opens a stream, FIN(1) closes it (the sender neither reads nor writes it any more),
 * PSH(2) carries data, NOP(3) keeps the connection alive, UPD(4) carries `CONSUMED(4) | WINDOW(4)`:
 * how many bytes of the stream the receiver has consumed, and how many it accepts beyond that.
 * A sender assumes a window of INITIAL_PEER_WINDOW until the first UPD. Clients number their
 * streams odd from 1, servers even.
 *
 * Memory stays bounded whatever the peer sends: a stream that receives beyond the window it was
 * granted, a frame larger than `maxFrame`, a malformed frame or a stream id reused ends the whole
 * session (a protocol error); streams beyond `maxStreams` are refused with FIN without being set up.
 * Our own writes wait for the peer's window and for the socket to drain.
 */
import { EventEmitter } from 'node:events';
import { Duplex } from 'node:stream';

export const SMUX_VERSION = 2;
export const SmuxCmd = { SYN: 0, FIN: 1, PSH: 2, NOP: 3, UPD: 4 } as const;
export const SMUX_HEADER = 8;
/** The window a version-2 sender assumes before the receiver's first UPD. */
export const INITIAL_PEER_WINDOW = 256 * 1024;
/** What qbee's clients send at most per frame (their MaxFrameSize). */
export const DEFAULT_MAX_FRAME = 32 * 1024;
export const DEFAULT_MAX_STREAMS = 32;
const KEEPALIVE_MS = 30_000;
/** qbee's clients send a NOP every 45 s: silence beyond this means the peer is gone. */
const IDLE_TIMEOUT_MS = 150_000;
/** Above this many bytes queued on the socket, stream writes wait for it to drain. */
const SOCKET_HIGH_WATER = 512 * 1024;

export class SmuxProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SmuxProtocolError';
  }
}

export interface SmuxOptions {
  /** a client opens odd stream ids, a server even ones */
  side: 'client' | 'server';
  /** streams open at once; further SYNs are answered with FIN */
  maxStreams?: number;
  /** largest frame payload accepted (and sent) */
  maxFrame?: number;
  /** what each stream accepts unconsumed; never below INITIAL_PEER_WINDOW, which peers assume */
  window?: number;
  keepAliveMs?: number;
  idleTimeoutMs?: number;
}

export function encodeFrame(cmd: number, sid: number, data: Buffer = Buffer.alloc(0), version = SMUX_VERSION): Buffer {
  const frame = Buffer.allocUnsafe(SMUX_HEADER + data.length);
  frame.writeUInt8(version, 0);
  frame.writeUInt8(cmd, 1);
  frame.writeUInt16LE(data.length, 2);
  frame.writeUInt32LE(sid >>> 0, 4);
  data.copy(frame, SMUX_HEADER);
  return frame;
}

export function encodeUpdate(sid: number, consumed: number, window: number): Buffer {
  const body = Buffer.allocUnsafe(8);
  body.writeUInt32LE(consumed >>> 0, 0);
  body.writeUInt32LE(window >>> 0, 4);
  return encodeFrame(SmuxCmd.UPD, sid, body);
}

interface PendingWrite {
  chunk: Buffer;
  offset: number;
  callback: (error?: Error | null) => void;
}

/** One smux stream: a Duplex whose writes respect the peer's window and whose reads grant window back. */
export class SmuxStream extends Duplex {
  /** bytes received (mod 2^32) and the consumed count last advertised to the peer */
  private received = 0;
  private advertised = 0;
  private pushed = 0;
  /** bytes written (mod 2^32), and what the peer says it consumed and accepts beyond that */
  private written = 0;
  private peerConsumed = 0;
  private peerWindow = INITIAL_PEER_WINDOW;
  private pending?: PendingWrite;
  private finSent = false;
  private finReceived = false;
  readonly stats = { bytesIn: 0, bytesOut: 0 };

  constructor(
    private readonly session: SmuxSession,
    readonly id: number,
  ) {
    super({ allowHalfOpen: true, readableHighWaterMark: 64 * 1024 });
    // A stream's failure shows in 'close' and `errored`; it must never crash the process.
    this.on('error', () => {});
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    if (this.finReceived || this.finSent) return callback(new Error('stream closed'));
    this.pending = { chunk, offset: 0, callback };
    this.flush();
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.sendFin();
    callback();
  }

  override _read(): void {
    this.grant();
  }

  // Every consumption, flowing or paused, goes through read(): the place to grant window back.
  override read(size?: number): Buffer | string | null {
    const chunk = super.read(size);
    if (chunk !== null) this.grant();
    return chunk;
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.sendFin();
    this.session.forget(this.id);
    const p = this.pending;
    this.pending = undefined;
    p?.callback(error ?? new Error('stream closed'));
    callback(error);
  }

  private sendFin(): void {
    if (this.finSent) return;
    this.finSent = true;
    this.session.sendFrame(encodeFrame(SmuxCmd.FIN, this.id));
    if (this.finReceived) this.session.forget(this.id);
  }

  /** @internal sends what the peer's window and the socket allow */
  flush(): void {
    const p = this.pending;
    if (!p) return;
    while (p.offset < p.chunk.length) {
      const inflight = (this.written - this.peerConsumed) >>> 0;
      const room = this.peerWindow - inflight;
      if (room <= 0 || !this.session.writable) return;
      const n = Math.min(room, this.session.maxFrame, p.chunk.length - p.offset);
      this.session.sendFrame(encodeFrame(SmuxCmd.PSH, this.id, p.chunk.subarray(p.offset, p.offset + n)));
      p.offset += n;
      this.written = (this.written + n) >>> 0;
      this.stats.bytesOut += n;
    }
    this.pending = undefined;
    p.callback();
  }

  /** Tells the peer what our reader consumed, once a quarter of the window or everything buffered. */
  private grant(): void {
    if (this.finSent || this.destroyed) return;
    const consumed = (this.pushed - this.readableLength) >>> 0;
    const fresh = (consumed - this.advertised) >>> 0;
    if (fresh === 0) return;
    if (fresh >= this.session.window / 4 || this.readableLength === 0) {
      this.advertised = consumed;
      this.session.sendFrame(encodeUpdate(this.id, consumed, this.session.window));
    }
  }

  /** @internal */
  onData(data: Buffer): void {
    if (this.finReceived) throw new SmuxProtocolError(`data after FIN on stream ${this.id}`);
    const unconsumed = (this.received - this.advertised) >>> 0;
    if (unconsumed + data.length > this.session.window) {
      throw new SmuxProtocolError(`stream ${this.id} sent beyond its window (${unconsumed + data.length} > ${this.session.window})`);
    }
    this.received = (this.received + data.length) >>> 0;
    this.stats.bytesIn += data.length;
    if (this.destroyed || this.readableEnded) {
      // Nobody reads any more: count it consumed so an honest peer is not stalled.
      this.pushed = (this.pushed + data.length) >>> 0;
      return;
    }
    this.pushed = (this.pushed + data.length) >>> 0;
    this.push(data);
    this.grant();
  }

  /** @internal */
  onUpdate(consumed: number, window: number): void {
    if (((this.written - consumed) | 0) < 0) throw new SmuxProtocolError(`stream ${this.id} acknowledged bytes never sent`);
    this.peerConsumed = consumed;
    this.peerWindow = window;
    this.flush();
  }

  /** @internal the peer closed the stream: it reads and writes no more. */
  onFin(): void {
    if (this.finReceived) return;
    this.finReceived = true;
    if (!this.readableEnded) this.push(null);
    const p = this.pending;
    this.pending = undefined;
    p?.callback(new Error('stream closed by peer'));
    if (this.finSent) this.session.forget(this.id);
  }

  /** @internal the session is gone */
  onSessionClose(reason: string): void {
    this.finSent = true;
    this.finReceived = true;
    if (!this.readableEnded) this.push(null);
    if (!this.destroyed) this.destroy(this.readableLength > 0 || this.pending ? new Error(reason) : undefined);
  }
}

/**
 * One smux session over a byte stream (a socket after the HTTP upgrade). Emits `stream` for each
 * stream the peer opens, `protocol-error` with the error before closing, and `close` with a reason.
 */
export class SmuxSession extends EventEmitter {
  private readonly streams = new Map<number, SmuxStream>();
  private buffer: Buffer = Buffer.alloc(0);
  private nextId: number;
  private closedReason?: string;
  private lastHeard = Date.now();
  private readonly timer: NodeJS.Timeout;
  readonly maxStreams: number;
  readonly maxFrame: number;
  readonly window: number;
  /** streams refused because too many were open */
  refused = 0;

  constructor(
    private readonly socket: Duplex,
    options: SmuxOptions,
  ) {
    super();
    this.nextId = options.side === 'client' ? 1 : 2;
    this.maxStreams = options.maxStreams ?? DEFAULT_MAX_STREAMS;
    this.maxFrame = Math.min(options.maxFrame ?? DEFAULT_MAX_FRAME, 0xffff);
    this.window = Math.max(options.window ?? INITIAL_PEER_WINDOW, INITIAL_PEER_WINDOW);
    const keepAlive = options.keepAliveMs ?? KEEPALIVE_MS;
    const idle = options.idleTimeoutMs ?? IDLE_TIMEOUT_MS;
    this.timer = setInterval(() => {
      if (Date.now() - this.lastHeard > idle) return this.close('peer silent too long');
      this.sendFrame(encodeFrame(SmuxCmd.NOP, 0));
    }, keepAlive);
    this.timer.unref();
    socket.on('data', (chunk: Buffer) => this.onBytes(chunk));
    socket.on('drain', () => {
      for (const stream of [...this.streams.values()]) stream.flush();
    });
    socket.on('error', () => {});
    socket.on('close', () => this.close('connection closed'));
    socket.on('end', () => this.close('connection closed'));
  }

  get openStreams(): number {
    return this.streams.size;
  }

  get closed(): boolean {
    return this.closedReason !== undefined;
  }

  /** @internal whether stream data may go out now (the socket is not backed up) */
  get writable(): boolean {
    return !this.closed && this.socket.writableLength < SOCKET_HIGH_WATER;
  }

  /** Feeds bytes read before the session took the socket over (the rest of an upgrade request). */
  feed(bytes: Buffer): void {
    if (bytes.length) this.onBytes(bytes);
  }

  /** Opens a stream towards the peer. */
  openStream(): SmuxStream {
    if (this.closed) throw new Error('session closed');
    const id = this.nextId;
    this.nextId = (this.nextId + 2) >>> 0;
    const stream = new SmuxStream(this, id);
    this.streams.set(id, stream);
    this.sendFrame(encodeFrame(SmuxCmd.SYN, id));
    return stream;
  }

  /** @internal */
  sendFrame(frame: Buffer): void {
    if (this.closed || this.socket.destroyed) return;
    this.socket.write(frame);
  }

  /** @internal */
  forget(id: number): void {
    this.streams.delete(id);
  }

  close(reason = 'closed'): void {
    if (this.closed) return;
    this.closedReason = reason;
    clearInterval(this.timer);
    for (const stream of [...this.streams.values()]) stream.onSessionClose(reason);
    this.streams.clear();
    this.buffer = Buffer.alloc(0);
    this.socket.end();
    // A peer that does not read its socket must not hold it open.
    setTimeout(() => this.socket.destroy(), 2000).unref();
    this.emit('close', reason);
  }

  private onBytes(chunk: Buffer): void {
    if (this.closed) return;
    this.lastHeard = Date.now();
    // At most one frame header and body are ever held: both are bounded by maxFrame.
    this.buffer = this.buffer.length ? Buffer.concat([this.buffer, chunk]) : chunk;
    try {
      while (!this.closed && this.buffer.length >= SMUX_HEADER) {
        const version = this.buffer.readUInt8(0);
        const cmd = this.buffer.readUInt8(1);
        const length = this.buffer.readUInt16LE(2);
        const sid = this.buffer.readUInt32LE(4);
        if (version !== SMUX_VERSION) throw new SmuxProtocolError(`unsupported smux version ${version}`);
        if (length > this.maxFrame) {
          throw new SmuxProtocolError(`frame of ${length} bytes exceeds the ${this.maxFrame}-byte limit`);
        }
        if (this.buffer.length < SMUX_HEADER + length) return;
        const data = this.buffer.subarray(SMUX_HEADER, SMUX_HEADER + length);
        this.buffer = this.buffer.subarray(SMUX_HEADER + length);
        this.onFrame(cmd, sid, data);
      }
    } catch (err) {
      this.emit('protocol-error', err);
      this.close(`protocol error: ${(err as Error).message}`);
    }
  }

  private onFrame(cmd: number, sid: number, data: Buffer): void {
    switch (cmd) {
      case SmuxCmd.NOP:
        return;
      case SmuxCmd.SYN: {
        if (data.length) throw new SmuxProtocolError('SYN with a payload');
        const peerParity = this.nextId % 2 === 0 ? 1 : 0;
        if (sid % 2 !== peerParity) throw new SmuxProtocolError(`stream id ${sid} is not the peer's to open`);
        if (this.streams.has(sid)) throw new SmuxProtocolError(`stream id ${sid} reused while open`);
        if (this.streams.size >= this.maxStreams) {
          this.refused++;
          this.sendFrame(encodeFrame(SmuxCmd.FIN, sid));
          return;
        }
        const stream = new SmuxStream(this, sid);
        this.streams.set(sid, stream);
        this.emit('stream', stream);
        return;
      }
      case SmuxCmd.FIN:
        if (data.length) throw new SmuxProtocolError('FIN with a payload');
        this.streams.get(sid)?.onFin();
        return;
      case SmuxCmd.PSH:
        // Data for a stream already gone (closed on our side, or refused) is dropped, as smux does.
        this.streams.get(sid)?.onData(Buffer.from(data));
        return;
      case SmuxCmd.UPD:
        if (data.length !== 8) throw new SmuxProtocolError('UPD must carry 8 bytes');
        this.streams.get(sid)?.onUpdate(data.readUInt32LE(0), data.readUInt32LE(4));
        return;
      default:
        throw new SmuxProtocolError(`unknown command ${cmd}`);
    }
  }
}
