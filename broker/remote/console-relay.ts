/**
 * The WebSocket console: a console that outlives its owner's dropped connection to be re-attached,
 * and may be watched read-only (ConsoleRelay below says how). Its output ring is output-history.ts.
 */
import type WebSocket from 'ws';
import type { Channel } from '../../shared/mux.js';
import type { ChannelControl } from '../../shared/protocol.js';
import { encodeFrame, errorFrame, parseClientFrame, type ErrorFrame, type ServerFrame } from '../../shared/remote-frames.js';
import {
  canSend,
  CHANNEL_BACKLOG,
  CONSOLE_UNACKED_MAX,
  MAX_INVALID_FRAMES,
  refuse,
  SessionClose,
  SOCKET_HIGH_WATER,
  type RelayEnd,
  type RelayOptions,
} from './relay.js';
import { OutputHistory } from './output-history.js';

export { OutputHistory } from './output-history.js';

/**
 * The console's recent output, kept for a re-attach or a watcher joining (their screen is drawn
 * from it). While no one is attached, output stops once this much is unseen: the channel's credit
 * stops and the shell blocks on the device, so nothing is lost and memory stays bounded.
 */
export const CONSOLE_HISTORY_BYTES = 64 * 1024;
/** Output queued to a watcher and not yet taken by it, at most: beyond this the watcher is cut off. */
export const WATCHER_MAX_UNREAD = 256 * 1024;
/** Watchers of one console, at most. */
export const MAX_WATCHERS = 10;
const SOCKET_LOW_WATER = 128 * 1024;
const PING_INTERVAL_MS = 30_000;

/** Close codes a client uses to say "I am done" (ends the console); any other drop detaches it. */
const DELIBERATE_CLOSE = new Set([1000, 1005]);

export interface Person {
  id: string;
  email: string;
}

/** One socket on the console: its owner's (in control) or a watcher's (read-only). */
interface Link {
  ws: WebSocket;
  who: Person;
  since: number;
  alive: boolean;
  invalidFrames: number;
  closed: boolean;
  /** owner only: output handed to the socket and not flushed, and not acknowledged */
  unflushed: number;
  unacked: number;
  inputPaused: boolean;
}

export interface ConsoleRelayOptions {
  sessionId: string;
  /** How long the console outlives its owner's dropped connection; 0 ends it with the connection. */
  graceMs: number;
  size: { cols: number; rows: number };
  recorder?: RelayOptions['recorder'];
  /** Called when the watchers change (the operator's list shows them). */
  onChange?: () => void;
}

/**
 * A console that outlives its owner's connection: the agent channel (the pty) stays while the
 * owner's WebSocket is gone for up to `graceMs`, keeping CONSOLE_HISTORY_BYTES of output; the
 * owner re-attaches with a new socket and gets that output, then live output. Watchers get the
 * same output read-only: what they send never reaches the device, and one that does not read is
 * cut off at WATCHER_MAX_UNREAD rather than slowing the owner. Flow control follows the owner
 * alone: un-flushed and un-acknowledged output pauses the channel, as in the Relay.
 */
export class ConsoleRelay {
  bytesIn = 0;
  bytesOut = 0;
  readonly done: Promise<RelayEnd>;
  private resolveDone!: (end: RelayEnd) => void;
  private owner?: Link;
  private readonly watchers = new Set<Link>();
  private readonly history = new OutputHistory(CONSOLE_HISTORY_BYTES);
  /** output produced while no owner was attached */
  private unseen = 0;
  private paused = false;
  private terminal?: ChannelControl;
  private reason?: string;
  private failed = false;
  private channelClosed = false;
  private graceTimer?: NodeJS.Timeout;
  private ping?: NodeJS.Timeout;

  constructor(
    private readonly channel: Channel,
    private readonly options: ConsoleRelayOptions,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  /** Whether the owner's socket is connected (false while detached). */
  get attached(): boolean {
    return this.owner !== undefined;
  }

  get watching(): { user: Person; since: number }[] {
    return [...this.watchers].map((w) => ({ user: w.who, since: w.since }));
  }

  get ending(): boolean {
    return this.reason !== undefined || this.channelClosed;
  }

  /** Starts the console with its first owner socket. */
  start(ws: WebSocket, who: Person): void {
    const { channel } = this;
    channel.on('data', (chunk: Buffer) => this.output(chunk));
    channel.on('control', (msg: ChannelControl) => {
      if (msg.type === 'exit') this.terminal = msg;
    });
    channel.on('end', () => this.deviceEnded());
    channel.on('close', () => {
      this.channelClosed = true;
      this.deviceClosed();
      this.maybeDone();
    });
    this.ping = setInterval(() => this.keepAlive(), PING_INTERVAL_MS);
    this.ping.unref();
    this.attachOwner(ws, who, false);
    if (channel.destroyed) {
      this.channelClosed = true;
      this.deviceClosed();
      return;
    }
    // Also tells the agent we listen: it holds back the exit status until it hears from us.
    channel.control({ type: 'resize', cols: this.options.size.cols, rows: this.options.size.rows });
  }

  /**
   * The owner is back on a new socket (after a reload or a dropped connection; the caller checked
   * it is the same user, re-authorized). A socket still attached is replaced: told and closed.
   */
  reattach(ws: WebSocket, who: Person, size: { cols: number; rows: number }): boolean {
    if (this.ending) return false;
    const previous = this.owner;
    if (previous) {
      this.owner = undefined;
      refuse(previous.ws, errorFrame(409, 'session_taken_over', 'This console was re-attached from another connection.'), 4409);
    }
    clearTimeout(this.graceTimer);
    this.graceTimer = undefined;
    this.attachOwner(ws, who, true);
    this.channel.control({ type: 'resize', cols: size.cols, rows: size.rows });
    this.options.recorder?.resize(size.cols, size.rows);
    return true;
  }

  /** Adds a read-only watcher: it gets the recent output, then live output. */
  watch(ws: WebSocket, who: Person): boolean {
    if (this.ending) return false;
    if (this.watchers.size >= MAX_WATCHERS) {
      refuse(ws, errorFrame(429, 'too_many_watchers', `This console has ${MAX_WATCHERS} watchers already.`), 4429);
      return true;
    }
    const link = this.link(ws, who);
    this.watchers.add(link);
    ws.on('message', (data, isBinary) => {
      // Nothing a watcher sends reaches the device: keystrokes and resizes are dropped. Once it is
      // cut (or dropped), the rest of what its socket had read is not even parsed.
      if (isBinary || !this.watchers.has(link)) return;
      const parsed = parseClientFrame(String(data));
      if (parsed.kind === 'invalid') this.invalidFrame(link, errorFrame(400, 'invalid_request', parsed.message));
    });
    ws.on('close', () => {
      link.closed = true;
      if (this.watchers.delete(link)) this.watchersChanged();
    });
    this.send(link, { type: 'ready', session: this.options.sessionId, mode: 'watch', detach_grace: this.options.graceMs / 1000 });
    const replay = this.history.contents();
    if (replay.length) this.sendBytes(link, replay);
    this.watchersChanged();
    return true;
  }

  /** Ends the console from the broker's side (access withdrawn, an operator, shutdown) with an error frame. */
  abort(frame: ErrorFrame, code: number, reason: string): void {
    this.reason ??= reason;
    clearTimeout(this.graceTimer);
    if (this.owner) {
      this.resumeInput(this.owner);
      refuse(this.owner.ws, frame, code);
    }
    for (const w of this.watchers) refuse(w.ws, frame, code);
    if (!this.channel.destroyed) this.channel.destroy();
    this.maybeDone();
  }

  /** Ends one watcher (its access withdrawn). */
  dropWatcher(userId: string, frame: ErrorFrame, code: number): void {
    for (const w of this.watchers) {
      if (w.who.id !== userId) continue;
      this.watchers.delete(w);
      refuse(w.ws, frame, code);
    }
    this.watchersChanged();
  }

  private link(ws: WebSocket, who: Person): Link {
    const link: Link = {
      ws,
      who: { id: who.id, email: who.email },
      since: Date.now(),
      alive: true,
      invalidFrames: 0,
      closed: false,
      unflushed: 0,
      unacked: 0,
      inputPaused: false,
    };
    ws.on('pong', () => (link.alive = true));
    ws.on('error', () => {});
    return link;
  }

  private attachOwner(ws: WebSocket, who: Person, reattached: boolean): void {
    const link = this.link(ws, who);
    this.owner = link;
    ws.on('message', (data, isBinary) => {
      // Ending (a flood of invalid frames among them): the rest of what the socket had read is dropped unparsed.
      if (this.owner !== link || this.ending) return;
      if (isBinary) this.input(link, data as Buffer);
      else this.ownerText(link, String(data));
    });
    ws.on('close', (code) => {
      link.closed = true;
      if (this.owner !== link) return this.maybeDone();
      this.resumeInput(link);
      if (!this.ending && this.options.graceMs > 0 && !DELIBERATE_CLOSE.has(code)) return this.detach();
      this.reason ??= DELIBERATE_CLOSE.has(code) || code === 1001 ? 'closed by the client' : `client connection lost (${code})`;
      if (!this.channel.destroyed) this.channel.destroy();
      this.maybeDone();
    });
    this.send(link, {
      type: 'ready',
      session: this.options.sessionId,
      mode: 'control',
      detach_grace: this.options.graceMs / 1000,
      ...(reattached ? { reattached: true } : {}),
    });
    if (reattached) {
      const replay = this.history.contents();
      if (replay.length) this.sendBytes(link, replay);
    }
    this.unseen = 0;
    this.sendWatchers();
    this.updateFlow();
  }

  /** The owner's connection dropped: the console waits for a re-attach, up to the grace period. */
  private detach(): void {
    this.owner = undefined;
    this.unseen = 0;
    this.updateFlow();
    const seconds = this.options.graceMs / 1000;
    this.graceTimer = setTimeout(() => {
      this.reason ??= `detached: not re-attached within ${seconds} s`;
      for (const w of this.watchers) refuse(w.ws, errorFrame(410, 'session_expired', 'The console was not re-attached in time and has ended.'), 4410);
      if (!this.channel.destroyed) this.channel.destroy();
      this.maybeDone();
    }, this.options.graceMs);
    this.graceTimer.unref();
  }

  private input(link: Link, data: Buffer): void {
    const { channel } = this;
    if (channel.destroyed || channel.writableEnded) return;
    this.bytesIn += data.length;
    if (!channel.write(data) && channel.writableLength >= CHANNEL_BACKLOG && !link.inputPaused) {
      link.inputPaused = true;
      link.ws.pause();
      channel.once('drain', () => this.resumeInput(link));
    }
  }

  private resumeInput(link: Link): void {
    if (!link.inputPaused) return;
    link.inputPaused = false;
    link.ws.resume();
  }

  private ownerText(link: Link, text: string): void {
    const parsed = parseClientFrame(text);
    if (parsed.kind === 'unknown') return;
    if (parsed.kind === 'invalid')
      return this.invalidFrame(link, errorFrame(400, 'invalid_request', parsed.message, parsed.field ? { field: parsed.field } : {}));
    const msg = parsed.frame;
    if (msg.type === 'resize') {
      this.channel.control({ type: 'resize', cols: msg.cols, rows: msg.rows });
      this.options.recorder?.resize(msg.cols, msg.rows);
    } else if (msg.type === 'ack') {
      link.unacked = Math.max(0, link.unacked - msg.bytes);
      this.updateFlow();
    } else if (msg.type === 'eof' && !this.channel.destroyed && !this.channel.writableEnded) {
      this.channel.end();
    }
  }

  private invalidFrame(link: Link, frame: ErrorFrame): void {
    link.invalidFrames += 1;
    if (link.invalidFrames <= MAX_INVALID_FRAMES) return this.send(link, frame);
    const closing = errorFrame(400, 'too_many_invalid_frames', `More than ${MAX_INVALID_FRAMES} invalid frames: the session is closed.`);
    if (link !== this.owner) {
      this.watchers.delete(link);
      refuse(link.ws, closing, SessionClose.badRequest);
      link.ws.terminate();
      return this.watchersChanged();
    }
    this.abort(closing, SessionClose.badRequest, 'too many invalid frames from the client');
    link.ws.terminate();
  }

  private output(chunk: Buffer): void {
    this.bytesOut += chunk.length;
    // The owner's socket first: an echo leaves before the recording, the ring and the watchers.
    const owner = this.owner;
    if (owner) this.sendBytes(owner, chunk);
    else this.unseen += chunk.length;
    this.options.recorder?.output(chunk);
    this.history.push(chunk);
    for (const w of this.watchers) this.sendBytes(w, chunk);
    this.updateFlow();
  }

  private sendBytes(link: Link, chunk: Buffer): void {
    if (link !== this.owner) {
      // A watcher that does not keep up is cut off: it never holds the owner's console back.
      if (link.ws.readyState !== link.ws.OPEN) return;
      if (link.ws.bufferedAmount > WATCHER_MAX_UNREAD) return this.cutWatcher(link);
      link.ws.send(chunk, { binary: true });
      return;
    }
    if (!canSend(link.ws)) return;
    const n = chunk.length;
    link.unflushed += n;
    link.unacked += n;
    link.ws.send(chunk, { binary: true }, () => {
      link.unflushed -= n;
      if (this.owner === link) this.updateFlow();
    });
  }

  private cutWatcher(link: Link): void {
    this.watchers.delete(link);
    link.ws.terminate();
    this.watchersChanged();
  }

  /** The channel is paused while the owner has too much un-flushed or un-acknowledged, or, detached, too much unseen. */
  private updateFlow(): void {
    if (this.channel.destroyed) return;
    const o = this.owner;
    const hold = o
      ? o.unacked >= CONSOLE_UNACKED_MAX || o.unflushed > SOCKET_HIGH_WATER || (this.paused && o.unflushed > SOCKET_LOW_WATER)
      : this.unseen >= CONSOLE_HISTORY_BYTES;
    if (hold && !this.paused) {
      this.paused = true;
      this.channel.pause();
    } else if (!hold && this.paused) {
      this.paused = false;
      this.channel.resume();
    }
  }

  private watchersChanged(): void {
    this.sendWatchers();
    this.options.onChange?.();
  }

  private sendWatchers(): void {
    if (this.owner) this.send(this.owner, { type: 'watchers', watchers: [...this.watchers].map((w) => w.who) });
  }

  private keepAlive(): void {
    for (const link of [this.owner, ...this.watchers]) {
      if (!link) continue;
      if (!link.alive) {
        link.ws.terminate();
        continue;
      }
      link.alive = false;
      if (link.ws.readyState === link.ws.OPEN) link.ws.ping();
    }
  }

  /** The device sent its last byte: the shell's exit goes to everyone, then the sockets close. */
  private deviceEnded(): void {
    const t = this.terminal;
    if (t?.type !== 'exit') return;
    this.reason ??= `exit ${t.code ?? 'none'}${t.signal ? ` signal ${t.signal}` : ''}${this.owner ? '' : ' while detached'}`;
    for (const link of [this.owner, ...this.watchers]) {
      if (!link) continue;
      this.send(link, { type: 'exit', code: t.code, signal: t.signal });
      if (link.ws.readyState === link.ws.OPEN) link.ws.close(SessionClose.normal, 'session ended');
    }
  }

  /** The channel is gone: the console is over for its owner and its watchers. */
  private deviceClosed(): void {
    clearTimeout(this.graceTimer);
    const error = this.channel.errored;
    const message = error ? `The session failed on the device: ${error.message}` : 'The device ended the session unexpectedly.';
    if (!this.reason) {
      this.reason = message;
      this.failed = true;
    }
    for (const link of [this.owner, ...this.watchers]) {
      if (link && link.ws.readyState === link.ws.OPEN) refuse(link.ws, errorFrame(502, 'session_failed', message), SessionClose.deviceFailed);
    }
  }

  private send(link: Link, frame: ServerFrame): void {
    if (canSend(link.ws)) link.ws.send(encodeFrame(frame));
  }

  private maybeDone(): void {
    if (!this.channelClosed) return;
    if (this.owner && !this.owner.closed) return;
    clearInterval(this.ping);
    clearTimeout(this.graceTimer);
    this.resolveDone({ bytesIn: this.bytesIn, bytesOut: this.bytesOut, reason: this.reason ?? 'ended', failed: this.failed });
  }
}
