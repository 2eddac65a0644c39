import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import WebSocket, { type ClientOptions } from 'ws';
import { encodeFrame, REMOTE_PATH, serverFrameOf, type ClientFrame, type ErrorFrame, type RemoteKind, type ServerFrame } from '../shared/remote-frames.js';
import type { ApiClient } from './api.js';
import { CliError } from './errors.js';
import { binaryHeaderLength, maskInPlace, writeBinaryHeader } from '../shared/ws-frame.js';
import { LeasedReads } from '../shared/read-buffers.js';
import { tapBinaryFrames } from '../shared/ws-tap.js';
import { quietRepeatedEnds } from '../shared/ws-ends.js';

export type { ErrorFrame, ServerFrame };
export type SessionKind = RemoteKind;

/** A session the broker or the device refused before it was ready, with the error frame that said why. */
export class SessionRefused extends CliError {
  constructor(
    message: string,
    readonly frame?: ErrorFrame,
  ) {
    super(message);
  }
}

/** What a session needs of the sign-in: the broker's URL and a fresh token. */
export type SessionAuth = Pick<ApiClient, 'url' | 'token'>;

/** Above this many un-sent bytes a sender should wait for 'drain'. */
const SEND_HIGH_WATER = 1024 * 1024;
const SEND_LOW_WATER = 256 * 1024;

export function wsUrl(httpUrl: string, kind: SessionKind, query: Record<string, string | number | undefined>): string {
  const url = new URL(`${httpUrl.replace(/^http/, 'ws')}${REMOTE_PATH}/${kind}`);
  for (const [k, v] of Object.entries(query)) if (v !== undefined) url.searchParams.set(k, String(v));
  return url.toString();
}

/**
 * One remote-access session over its WebSocket (remote-api: console, tunnel, copy). Resolves
 * `open` once the broker says ready; emits 'data' (Buffer), 'frame' (the server's JSON frames),
 * 'drain' (room to send again) and 'close' (code, reason, last error frame if any).
 */
export class RemoteSession extends EventEmitter {
  private queue: [string, unknown, (() => void) | undefined][] | undefined = [];
  private draining = false;
  lastError?: ErrorFrame;

  private constructor(readonly ws: WebSocket) {
    super();
  }

  /** The socket options: every frame masked with a fresh random key (RFC 6455 §5.3), as ws does by default. */
  static socketOptions(token: string): ClientOptions {
    return { headers: { authorization: `Bearer ${token}` }, perMessageDeflate: false };
  }

  static async open(
    client: SessionAuth,
    kind: SessionKind,
    query: Record<string, string | number | undefined>,
    source: 'cli' | 'api' = 'cli',
  ): Promise<RemoteSession> {
    const ws = new WebSocket(wsUrl(client.url, kind, { ...query, source }), RemoteSession.socketOptions(await client.token()));
    const session = new RemoteSession(ws);
    ws.once('open', () => quietRepeatedEnds(ws));
    await new Promise<void>((resolve, reject) => {
      let ready = false;
      ws.on('message', (data, isBinary) => {
        if (isBinary) return session.deliver('data', data as Buffer);
        const frame = serverFrameOf(String(data));
        if (!frame) return; // unknown to this version, or malformed
        if (frame.type === 'error') session.lastError = frame;
        if (!ready && frame.type === 'ready') {
          ready = true;
          return resolve();
        }
        session.deliver('frame', frame);
      });
      ws.on('error', (err) => {
        if (!ready) reject(new CliError(`Cannot open the ${kind} session: ${(err as Error).message}.`));
      });
      ws.on('close', (code, reason) => {
        if (!ready) {
          const why = session.lastError?.message ?? (reason.toString() || `closed with code ${code}`);
          return reject(new SessionRefused(why, session.lastError));
        }
        session.deliver('close', [code, reason.toString()]);
      });
    });
    return session;
  }

  /**
   * Emits 'data' for the bytes of the broker's binary frames as the socket's reads bring them, each a
   * view of the read, instead of once per frame (ws copies a frame that spans several reads into a
   * new buffer: most frames of a transfer do). For a stream of bytes (a tunnel), not for callers that
   * count frames. Frames the tap does not take (text, control, malformed, oversized) are ws's as before.
   *
   * The socket's reads land in reused buffers (shared/read-buffers.ts; Node's own are a fresh 64 KiB
   * buffer each, whose garbage collection was a quarter of `fleet connect`'s CPU on downloads): each
   * 'data' comes with a `done` to call once the view is no longer used (its write flushed), and the
   * buffer is read into again only when every view of it is done. A listener that never calls it
   * leaves its buffers to the garbage collector, as before.
   */
  readPieces(): this {
    const socket = (this.ws as unknown as { _socket?: Socket })._socket;
    // Over TLS the socket's reads are its own (ciphertext to decrypt): they stay Node's.
    const reads = LeasedReads.movable(socket) ? new LeasedReads(socket) : undefined;
    const tapped = tapBinaryFrames(
      this.ws,
      (piece) => {
        if (piece.length > 0) this.deliver('data', piece, reads?.hold());
      },
      reads !== undefined,
    );
    if (tapped) reads?.start();
    return this;
  }

  /** Events are held until the caller has attached its handlers and calls start(). */
  start(): this {
    const queued = this.queue ?? [];
    this.queue = undefined;
    for (const [event, value, done] of queued) this.dispatch(event, value, done);
    return this;
  }

  /** `done`: for a view of a reused read buffer (readPieces), to call once it is no longer used. */
  private deliver(event: string, value: unknown, done?: () => void): void {
    if (this.queue) this.queue.push([event, value, done]);
    else this.dispatch(event, value, done);
  }

  private dispatch(event: string, value: unknown, done?: () => void): void {
    if (event === 'close') {
      const [code, reason] = value as [number, string];
      this.emit('close', code, reason, this.lastError);
    } else if (done) this.emit(event, value, done);
    else this.emit(event, value);
  }

  /** Sends bytes; false when the caller should wait for 'drain' before sending more. */
  send(data: Buffer, done?: () => void): boolean {
    if (this.ws.readyState !== WebSocket.OPEN) return false;
    this.ws.send(data, { binary: true }, () => {
      done?.();
      this.checkDrain();
    });
    if (this.ws.bufferedAmount > SEND_HIGH_WATER) {
      this.draining = true;
      return false;
    }
    return true;
  }

  /**
   * Sends bytes the caller hands over and never touches again (a fresh read from a local socket):
   * masked in place with a fresh random key, the native way on all but tiny frames, and written
   * after a header of its own, with no copy of the payload (ws masks a copy, as it cannot know the
   * buffer is not used again). Falls back to `send` whenever ws itself has frames waiting. `done`
   * runs once the socket is done with `data` (flushed, or copied by ws): it may be reused then.
   */
  sendOwned(data: Buffer, done?: () => void): boolean {
    if (this.ws.readyState !== WebSocket.OPEN) return false;
    const internals = this.ws as unknown as { _socket?: Socket; _sender?: { _state?: number; _queue?: unknown[] } };
    const socket = internals._socket;
    const sender = internals._sender;
    // ws writes its frames at once while it has nothing queued (no compression here): then ours keep their order.
    if (!socket || !sender || sender._state !== 0 || (sender._queue?.length ?? 0) > 0 || data.length === 0) return this.send(data, done);
    const header = Buffer.allocUnsafe(binaryHeaderLength(data.length, true));
    maskInPlace(data, writeBinaryHeader(header, data.length, true)!);
    socket.cork();
    socket.write(header);
    socket.write(data, () => {
      done?.();
      this.checkDrain();
    });
    socket.uncork();
    if (this.ws.bufferedAmount > SEND_HIGH_WATER) {
      this.draining = true;
      return false;
    }
    return true;
  }

  private checkDrain(): void {
    if (this.draining && this.ws.bufferedAmount <= SEND_LOW_WATER) {
      this.draining = false;
      this.emit('drain');
    }
  }

  control(frame: ClientFrame): void {
    if (this.ws.readyState === WebSocket.OPEN) this.ws.send(encodeFrame(frame));
  }

  /** Stops reading from the broker (the local side cannot keep up); the broker then slows the device. */
  pause(): void {
    this.ws.pause();
  }

  resume(): void {
    this.ws.resume();
  }

  close(code = 1000): void {
    // Reading must go on for the close handshake to complete.
    if (this.ws.isPaused) this.ws.resume();
    if (this.ws.readyState === WebSocket.OPEN || this.ws.readyState === WebSocket.CONNECTING) this.ws.close(code);
  }
}
