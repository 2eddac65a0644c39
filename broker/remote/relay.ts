import type { Socket } from 'node:net';
import type WebSocket from 'ws';
import type { Channel } from '../../shared/mux.js';
import type { ChannelControl, ChannelKind } from '../../shared/protocol.js';
import { encodeFrame, errorFrame, parseClientFrame, type ErrorFrame, type ServerFrame } from '../../shared/remote-frames.js';
import { LeasedReads } from '../../shared/read-buffers.js';
import { corkForTurn } from '../../shared/turn-cork.js';
import { tapBinaryFrames } from '../../shared/ws-tap.js';

export { errorFrame, type ErrorFrame };

/** Console output the client has not acknowledged yet, at most (remote-api: 1 MiB). */
export const CONSOLE_UNACKED_MAX = 1024 * 1024;
/** Bytes handed to the user's socket but not yet flushed: above this the channel is paused. */
export const SOCKET_HIGH_WATER = 512 * 1024;
const SOCKET_LOW_WATER = 128 * 1024;
/** Bytes from the user queued for the channel (waiting for credit) before the socket is paused. */
export const CHANNEL_BACKLOG = 1024 * 1024;
const PING_INTERVAL_MS = 30_000;
/**
 * Unflushed bytes on the user's socket, at most, before anything more is sent: output pauses at
 * SOCKET_HIGH_WATER, so beyond this the client has stopped reading and is cut, not queued to.
 */
export const SOCKET_MAX_UNREAD = 2 * 1024 * 1024;
/** Invalid frames (error replies) tolerated from one client; the next one ends the session. */
export const MAX_INVALID_FRAMES = 8;
/** A client closed for invalid frames that does not answer the close is cut after this. */
const CLOSE_GRACE_MS = 2000;

/** Close codes of the user's WebSocket: 4000 + the HTTP status that would say the same. */
export const SessionClose = {
  normal: 1000,
  goingAway: 1001,
  badRequest: 4400,
  unauthorized: 4401,
  forbidden: 4403,
  notFound: 4404,
  internal: 4500,
  deviceFailed: 4502,
} as const;

/** A close reason must fit in a control frame (123 bytes). */
function closeReason(text: string): string {
  const buf = Buffer.from(text);
  return buf.length <= 123
    ? text
    : `${buf
        .subarray(0, 120)
        .toString()
        .replace(/\uFFFD$/, '')}…`;
}

/** Checked before every send: false (and the socket cut) when the client left too much unread. */
export function canSend(ws: WebSocket): boolean {
  if (ws.readyState !== ws.OPEN) return false;
  if (ws.bufferedAmount <= SOCKET_MAX_UNREAD) return true;
  ws.terminate();
  return false;
}

/** Sends an error frame and closes with `code`. */
export function refuse(ws: WebSocket, frame: ErrorFrame, code: number): void {
  if (!canSend(ws)) return;
  ws.send(encodeFrame(frame));
  ws.close(code, closeReason(frame.message));
}

export interface RelayOptions {
  kind: ChannelKind;
  /** copy only */
  direction?: 'upload' | 'download';
  /** console only: the size the session was opened with */
  size?: { cols: number; rows: number };
  /** what the agent answered to the open (a download's size and mode) */
  info: Record<string, unknown>;
  /** console only: where its output and resizes are recorded (never its input) */
  recorder?: { output(chunk: Buffer): void; resize(cols: number, rows: number): void };
}

export interface RelayEnd {
  /** from the user to the device */
  bytesIn: number;
  /** from the device to the user */
  bytesOut: number;
  reason: string;
  /** The device reported the session failed (a copy that did not complete, a channel error): audited as `error`. */
  failed?: boolean;
}

/**
 * Moves one session's bytes between the user's WebSocket and the agent channel, with bounded
 * buffers both ways: when the user's socket has more than SOCKET_HIGH_WATER un-flushed (a slow
 * browser), or a console client has CONSOLE_UNACKED_MAX un-acknowledged, the channel is paused and
 * its credit stops, which pauses the source on the device. When the channel pushes back, the
 * user's socket stops being read. Broker memory per session stays bounded whatever the peers do.
 */
export class Relay {
  bytesIn = 0;
  bytesOut = 0;
  readonly done: Promise<RelayEnd>;
  private resolveDone!: (end: RelayEnd) => void;
  private unflushed = 0;
  private unacked = 0;
  private outputPaused = false;
  private inputPaused = false;
  private inputEnded = false;
  private terminal?: ChannelControl;
  private reason?: string;
  private failed = false;
  private wsClosed = false;
  private channelClosed = false;
  private alive = true;
  private ping?: NodeJS.Timeout;
  private invalidFrames = 0;
  /** The channel is corked while a binary frame from the user arrives piece by piece (fromUserPiece). */
  private frameCorked = false;
  /** The user's socket read into reused buffers (plain TCP only). */
  private reads?: LeasedReads;
  /** Corks the user's socket for the turn of a send (see toUser). */
  private holdTurn?: () => void;

  constructor(
    private readonly ws: WebSocket,
    private readonly channel: Channel,
    private readonly options: RelayOptions,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  private get isConsole(): boolean {
    return this.options.kind === 'console';
  }

  private get acceptsInput(): boolean {
    return !(this.options.kind === 'copy' && this.options.direction === 'download');
  }

  start(): void {
    const { ws, channel } = this;
    ws.on('message', (data, isBinary) => (isBinary ? this.fromUserBytes(data as Buffer) : this.fromUserText(String(data))));
    // The user's binary frames are read piece by piece as the socket's reads bring them (ws-tap.ts),
    // not re-assembled into a copy of each; every other frame still comes through 'message'.
    // The pieces of a frame, written corked, are then framed to the device together. The socket's
    // reads land in reused buffers of up to 256 KiB (Node's own are a fresh 64 KiB buffer each, all
    // to be collected): each piece's buffer is read into again once the channel's write of it is
    // done (framed and flushed to the device, or copied).
    const socket = (ws as unknown as { _socket?: Socket })._socket;
    this.holdTurn = socket ? corkForTurn(socket) : undefined;
    this.reads = LeasedReads.movable(socket) ? new LeasedReads(socket) : undefined;
    if (tapBinaryFrames(ws, (piece, at, length) => this.fromUserPiece(piece, at, length), this.reads !== undefined)) this.reads?.start();
    ws.on('pong', () => (this.alive = true));
    ws.on('error', () => {});
    ws.on('close', (code) => {
      this.wsClosed = true;
      this.reason ??= code === 1000 || code === 1001 || code === 1005 ? 'closed by the client' : `client connection lost (${code})`;
      if (!channel.destroyed) channel.destroy();
      this.maybeDone();
    });

    channel.on('data', (chunk: Buffer) => this.toUser(chunk));
    channel.on('control', (msg: ChannelControl) => {
      // Exit and result wait for the end of the stream: bytes still buffered go out first.
      if (msg.type === 'exit' || msg.type === 'result') this.terminal = msg;
      else if (msg.type === 'meta') this.sendJson(msg);
    });
    channel.on('end', () => this.deviceEnded());
    channel.on('close', () => {
      this.channelClosed = true;
      // Input may be paused waiting for a drain that will not come: read on, or the client's
      // close frame would sit unread and its close handshake time out.
      this.resumeInput();
      this.deviceClosed();
      this.maybeDone();
    });

    // The agent may have closed the channel before the relay started (cut for a protocol error
    // meanwhile): 'close' has passed, so end the session now rather than never.
    if (channel.destroyed) {
      this.channelClosed = true;
      this.deviceClosed();
      return;
    }

    this.ping = setInterval(() => {
      if (!this.alive) return void ws.terminate();
      this.alive = false;
      if (ws.readyState === ws.OPEN) ws.ping();
    }, PING_INTERVAL_MS);
    this.ping.unref();

    this.sendJson({ type: 'ready' });
    if (this.isConsole && this.options.size) {
      // Also tells the agent we listen: it holds back the exit status until it hears from us.
      channel.control({ type: 'resize', cols: this.options.size.cols, rows: this.options.size.rows });
    }
    if (this.options.kind === 'copy' && this.options.direction === 'download') {
      const size = Number(this.options.info.size ?? 0);
      const mode = Number(this.options.info.mode ?? 0o644);
      this.sendJson({ type: 'meta', size, mode });
      // Nothing goes to the device in a download; our end is the agent's signal to start.
      channel.end();
    }
  }

  /** Ends the session from the broker's side (access withdrawn, shutdown) with an error frame. */
  abort(frame: ErrorFrame, code: number, reason: string): void {
    this.reason ??= reason;
    this.resumeInput();
    refuse(this.ws, frame, code);
    if (!this.channel.destroyed) this.channel.destroy();
    // A client that does not answer the close is cut after a grace period by ws itself.
  }

  private fromUserBytes(data: Buffer): void {
    if (!this.acceptsInput || this.inputEnded || this.channel.destroyed || this.channel.writableEnded) return;
    this.bytesIn += data.length;
    // The channel says "enough" at its own high-water mark; reading on up to CHANNEL_BACKLOG
    // keeps the pipe full without pausing the socket for every frame. Still bounded.
    if (!this.channel.write(data) && this.channel.writableLength >= CHANNEL_BACKLOG && !this.inputPaused) {
      this.inputPaused = true;
      this.ws.pause();
      this.channel.once('drain', () => this.resumeInput());
    }
  }

  /**
   * Bytes `at`… of a binary frame of `length` bytes from the user (a view of the socket's read). The
   * pieces of one frame are written to the channel corked, so that it sends them on together in
   * frames that span them (Channel `_writev`), as large as the frame was, rather than one smaller
   * frame to the device per read. The backlog is checked once the frame is whole: the socket is not
   * paused in the middle of one, which would leave its pieces corked. Held at most: one frame
   * (the server's maxPayload, as ws held it whole before) and the rest of one read (up to BULK_READ_SIZE,
   * 256 KiB) beyond CHANNEL_BACKLOG.
   */
  private fromUserPiece(piece: Buffer, at: number, length: number): void {
    const last = at + piece.length >= length;
    const open = this.acceptsInput && !this.inputEnded && !this.channel.destroyed && !this.channel.writableEnded;
    if (open && piece.length > 0) {
      // Not once the socket is paused: the rest of the read that paused it is still handed on, and
      // a frame begun in it would stay corked, its end unread, with no drain to resume reading.
      if (!last && !this.frameCorked && !this.inputPaused) {
        this.frameCorked = true;
        this.channel.cork();
      }
      this.bytesIn += piece.length;
      // The write's callback gives the read's buffer back: the channel frames the piece itself (or a copy) until then.
      this.channel.write(piece, this.reads?.hold());
    }
    if (!last) return;
    if (this.frameCorked) {
      this.frameCorked = false;
      this.channel.uncork();
    }
    if (open && this.channel.writableLength >= CHANNEL_BACKLOG && !this.inputPaused) {
      this.inputPaused = true;
      this.ws.pause();
      this.channel.once('drain', () => this.resumeInput());
    }
  }

  private resumeInput(): void {
    if (!this.inputPaused) return;
    this.inputPaused = false;
    this.ws.resume();
  }

  private fromUserText(text: string): void {
    // Ending (a flood of invalid frames among them): the rest of what the socket had read is dropped unparsed.
    if (this.reason !== undefined) return;
    const parsed = parseClientFrame(text);
    if (parsed.kind === 'unknown') return; // newer clients may send more
    if (parsed.kind === 'invalid') {
      return this.invalidFrame(errorFrame(400, 'invalid_request', parsed.message, parsed.field ? { field: parsed.field } : {}));
    }
    const msg = parsed.frame;
    switch (msg.type) {
      case 'resize':
        if (!this.isConsole) return;
        this.channel.control({ type: 'resize', cols: msg.cols, rows: msg.rows });
        this.options.recorder?.resize(msg.cols, msg.rows);
        return;
      case 'ack':
        if (!this.isConsole) return;
        this.unacked = Math.max(0, this.unacked - msg.bytes);
        this.updateFlow();
        return;
      case 'eof':
        if (this.acceptsInput && !this.inputEnded) {
          this.inputEnded = true;
          if (!this.channel.destroyed) this.channel.end();
        }
        return;
    }
  }

  /** Answers an invalid frame with its error, up to MAX_INVALID_FRAMES; the next one ends the session. */
  private invalidFrame(frame: ErrorFrame): void {
    this.invalidFrames += 1;
    if (this.invalidFrames <= MAX_INVALID_FRAMES) return this.sendJson(frame);
    if (this.reason) return; // already ending
    this.abort(
      errorFrame(400, 'too_many_invalid_frames', `More than ${MAX_INVALID_FRAMES} invalid frames: the session is closed.`),
      SessionClose.badRequest,
      'too many invalid frames from the client',
    );
    // Nothing it sends is read any more; a client that does not read does not answer the close either.
    this.ws.pause();
    setTimeout(() => this.ws.terminate(), CLOSE_GRACE_MS).unref();
  }

  private toUser(chunk: Buffer): void {
    const n = chunk.length;
    this.bytesOut += n;
    if (canSend(this.ws)) {
      this.unflushed += n;
      if (this.isConsole) this.unacked += n;
      // The pieces of the device's frames that one read from the agent brings (the mux hands them on
      // together) go out in one writev, where each send was a write of its own (header and piece).
      this.holdTurn?.();
      this.ws.send(chunk, { binary: true }, () => {
        this.unflushed -= n;
        this.updateFlow();
      });
      this.updateFlow();
    }
    // After the send: an echo is on its way before the recording takes it.
    this.options.recorder?.output(chunk);
  }

  private updateFlow(): void {
    const ackFull = this.isConsole && this.unacked >= CONSOLE_UNACKED_MAX;
    if (!this.outputPaused && (this.unflushed > SOCKET_HIGH_WATER || ackFull)) {
      this.outputPaused = true;
      this.channel.pause();
    } else if (this.outputPaused && this.unflushed <= SOCKET_LOW_WATER && !ackFull) {
      this.outputPaused = false;
      this.channel.resume();
    }
  }

  /** The device sent its last byte. */
  private deviceEnded(): void {
    if (this.options.kind === 'tunnel') {
      this.sendJson({ type: 'eof' });
      return;
    }
    const t = this.terminal;
    if (t?.type === 'exit') {
      this.reason ??= `exit ${t.code ?? 'none'}${t.signal ? ` signal ${t.signal}` : ''}`;
      this.sendJson({ type: 'exit', code: t.code, signal: t.signal });
      this.close(SessionClose.normal, 'session ended');
    } else if (t?.type === 'result' && t.ok) {
      this.reason ??= `copied ${t.bytes} bytes`;
      this.sendJson({ type: 'result', ok: true, bytes: t.bytes, sha256: t.sha256 });
      this.close(SessionClose.normal, 'copy complete');
    } else if (t?.type === 'result') {
      this.reason ??= `copy failed: ${t.error ?? 'unknown error'}`;
      this.failed = true;
      refuse(this.ws, errorFrame(502, 'copy_failed', t.error ?? 'The copy failed on the device.', { bytes: t.bytes }), SessionClose.deviceFailed);
    }
    // Without a final message the session is not complete; the channel's close reports it.
  }

  /** The channel is gone: both directions done, or torn down (agent error, agent gone, aborted). */
  private deviceClosed(): void {
    if (this.ws.readyState !== this.ws.OPEN) return;
    const error = this.channel.errored;
    if (this.options.kind === 'tunnel' && !error && this.channel.readableEnded) {
      this.reason ??= 'closed both ways';
      return this.close(SessionClose.normal, 'tunnel closed');
    }
    const message = error ? `The session failed on the device: ${error.message}` : 'The device ended the session unexpectedly.';
    this.reason ??= message;
    this.failed = true;
    refuse(this.ws, errorFrame(502, 'session_failed', message), SessionClose.deviceFailed);
  }

  private close(code: number, reason: string): void {
    if (this.ws.readyState === this.ws.OPEN) this.ws.close(code, reason);
  }

  private sendJson(frame: ServerFrame): void {
    if (canSend(this.ws)) this.ws.send(encodeFrame(frame));
  }

  private maybeDone(): void {
    if (!this.wsClosed || !this.channelClosed) return;
    clearInterval(this.ping);
    this.resolveDone({ bytesIn: this.bytesIn, bytesOut: this.bytesOut, reason: this.reason ?? 'ended', failed: this.failed });
  }
}
