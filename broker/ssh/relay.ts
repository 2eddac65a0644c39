import type { ServerChannel } from 'ssh2';
import type { Channel } from '../../shared/mux.js';
import type { ChannelControl } from '../../shared/protocol.js';
import type WebSocket from 'ws';
import { encodeFrame } from '../../shared/remote-frames.js';
import { CONSOLE_HISTORY_BYTES, MAX_WATCHERS, OutputHistory, WATCHER_MAX_UNREAD } from '../remote/console-relay.js';
import { errorFrame, refuse, SessionClose, type ErrorFrame } from '../remote/relay.js';
import type { WatchableRelay } from '../remote/sessions.js';

/**
 * What a command without a terminal (`ssh host cmd`, rsync, scp -O) runs through: the agent's
 * console is a pty, so the command puts it in raw mode first (no echo, no CR/LF translation, no
 * signals from bytes: 8-bit clean) and then writes RAW_MARKER. The relay holds the client's bytes
 * until the marker came, so none is echoed or translated, and drops the marker from the output.
 */
export const RAW_MARKER = '\u0001fleet-raw\u0002';
// `[ -t 0 ]`: with pipes (an agent with ConsoleParams.pipes) there is no terminal to make raw, and no `stty` to start.
export const RAW_SCRIPT = `[ -t 0 ] && stty raw -echo 2>/dev/null; printf '\\001fleet-raw\\002'; exec /bin/sh -c "$1"`;
/** Output looked through for the marker at most; past it the output goes on as it is. */
const RAW_MARKER_WINDOW = 64 * 1024;

export interface SshRelayOptions {
  kind: 'console' | 'tunnel';
  /** console: the size told to the agent (which then knows the broker listens) */
  size?: { cols: number; rows: number };
  /** console of a command without a terminal: the end of the client's input is passed on */
  raw?: boolean;
  /** with raw: wait for RAW_MARKER before sending input (RAW_SCRIPT runs); raw's value when absent */
  marker?: boolean;
  /** console: where its output is recorded (never its input) */
  recorder?: { output(chunk: Buffer): void; resize?(cols: number, rows: number): void };
  /** console: its live session id (what watchers join) */
  sessionId?: string;
}

interface Watcher {
  ws: WebSocket;
  user: { id: string; email: string };
  since: number;
}

/**
 * Moves one SSH channel's bytes to and from its agent channel. Both sides are flow-controlled (the
 * SSH window one way, the channel's credit the other): a side that cannot take more pauses the
 * other, so a client that floods or never reads holds at most a window's worth here. A console's
 * exit status goes to the client as SSH's `exit-status` before the channel closes.
 */
export class SshRelay implements WatchableRelay {
  readonly done: Promise<{ bytesIn: number; bytesOut: number; reason: string }>;
  private resolveDone!: (end: { bytesIn: number; bytesOut: number; reason: string }) => void;
  private reason?: string;
  private exitCode?: number;
  private streamClosed = false;
  private channelClosed = false;
  private input = 0;
  private output = 0;
  /** raw console: output before the marker, while it is looked for */
  private pending: Buffer | undefined;
  /** console: read-only watchers over the console WebSocket (`?watch=`), and what they get first */
  private readonly watchers = new Set<Watcher>();
  private readonly history = new OutputHistory(CONSOLE_HISTORY_BYTES);
  private finished = false;

  constructor(
    private readonly stream: ServerChannel,
    private readonly channel: Channel,
    private readonly options: SshRelayOptions,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    if (options.marker ?? options.raw) this.pending = Buffer.alloc(0);
  }

  get bytesIn(): number {
    return this.input;
  }

  get bytesOut(): number {
    return this.output;
  }

  start(): void {
    const { stream, channel, options } = this;
    channel.on('control', (msg: ChannelControl) => {
      if (msg.type === 'exit') {
        this.exitCode = msg.code ?? (msg.signal ? 128 + msg.signal : 255);
        this.reason ??= `exit ${msg.code ?? 'none'}${msg.signal ? ` signal ${msg.signal}` : ''}`;
      }
    });
    channel.on('data', (chunk: Buffer) => this.fromDevice(chunk));
    channel.on('end', () => {
      if (this.pending?.length) this.deliver(this.pending);
      this.pending = undefined;
      if (this.exitCode !== undefined && options.kind === 'console' && !stream.destroyed) stream.exit(this.exitCode);
      if (!stream.writableEnded) stream.end();
    });
    if (this.pending) stream.pause();
    stream.on('data', (chunk: Buffer) => {
      this.input += chunk.length;
      if (channel.destroyed || channel.writableEnded) return;
      if (!channel.write(chunk) && !stream.isPaused()) {
        stream.pause();
        channel.once('drain', () => stream.resume());
      }
    });
    stream.on('end', () => {
      this.reason ??= 'closed by the client';
      // A terminal hears the end of its input as ^D; a tunnel passes it on, and so does a command
      // without a terminal (its agent closes the command's input when it runs it with pipes; an
      // agent that runs it in a raw pty cannot tell it and ignores it).
      if (options.kind === 'tunnel' || options.raw) {
        if (!channel.destroyed && !channel.writableEnded) channel.end();
      } else if (!channel.destroyed && !channel.writableEnded) channel.write(Buffer.from([4]));
    });
    stream.on('close', () => {
      this.streamClosed = true;
      this.reason ??= 'client connection lost';
      if (!channel.destroyed) channel.destroy();
      this.maybeDone();
    });
    stream.on('error', () => {});
    channel.on('close', () => {
      this.channelClosed = true;
      if (channel.errored) {
        this.reason ??= `failed on the device: ${channel.errored.message}`;
        if (options.kind === 'console' && !stream.destroyed) stream.stderr.write(`\r\nfleet: ${channel.errored.message}\r\n`);
      } else this.reason ??= 'ended by the device';
      if (!stream.destroyed) {
        if (!stream.writableEnded) stream.end();
        stream.close();
      }
      this.maybeDone();
    });
    if (options.size) channel.control({ type: 'resize', ...options.size });
  }

  /** The client's terminal changed size. */
  resize(cols: number, rows: number): void {
    if (this.channel.destroyed) return;
    this.channel.control({ type: 'resize', cols, rows });
    this.options.recorder?.resize?.(cols, rows);
  }

  private fromDevice(chunk: Buffer): void {
    if (this.pending) {
      const seen = Buffer.concat([this.pending, chunk]);
      const at = seen.indexOf(RAW_MARKER);
      if (at < 0 && seen.length < RAW_MARKER_WINDOW) {
        this.pending = seen;
        return;
      }
      this.pending = undefined;
      // What the login shell printed before the marker (a profile's message) goes through as sshd's would.
      chunk = at < 0 ? seen : Buffer.concat([seen.subarray(0, at), seen.subarray(at + RAW_MARKER.length)]);
      this.stream.resume();
      if (chunk.length === 0) return;
    }
    this.deliver(chunk);
  }

  get ending(): boolean {
    return this.finished || this.reason !== undefined;
  }

  get watching(): { user: { id: string; email: string }; since: number }[] {
    return [...this.watchers].map((w) => ({ user: w.user, since: w.since }));
  }

  /**
   * A read-only watcher of this console (decided and audited by RemoteSessions): the recent output,
   * then live output; what it sends never reaches the device, and one that does not read is cut
   * off at WATCHER_MAX_UNREAD rather than slowing the SSH client.
   */
  watch(ws: WebSocket, who: { id: string; email: string }): boolean {
    if (this.ending || this.options.kind !== 'console') return false;
    if (this.watchers.size >= MAX_WATCHERS) {
      refuse(ws, errorFrame(429, 'too_many_watchers', `This console has ${MAX_WATCHERS} watchers already.`), 4429);
      return true;
    }
    const watcher: Watcher = { ws, user: { id: who.id, email: who.email }, since: Date.now() };
    this.watchers.add(watcher);
    ws.on('error', () => {});
    ws.on('close', () => this.watchers.delete(watcher));
    ws.send(encodeFrame({ type: 'ready', session: this.options.sessionId ?? '', mode: 'watch', detach_grace: 0 }));
    const replay = this.history.contents();
    if (replay.length) ws.send(replay, { binary: true });
    return true;
  }

  dropWatcher(userId: string, frame: ErrorFrame, code: number): void {
    for (const w of this.watchers) {
      if (w.user.id !== userId) continue;
      this.watchers.delete(w);
      refuse(w.ws, frame, code);
    }
  }

  private toWatchers(chunk: Buffer): void {
    for (const w of this.watchers) {
      if (w.ws.readyState !== w.ws.OPEN) continue;
      if (w.ws.bufferedAmount > WATCHER_MAX_UNREAD) {
        this.watchers.delete(w);
        w.ws.terminate();
        continue;
      }
      w.ws.send(chunk, { binary: true });
    }
  }

  private deliver(chunk: Buffer): void {
    const { stream, channel } = this;
    this.output += chunk.length;
    if (this.options.kind === 'console') {
      this.history.push(chunk);
      this.toWatchers(chunk);
    }
    if (!stream.destroyed && !stream.writableEnded && !stream.write(chunk) && !channel.isPaused()) {
      channel.pause();
      stream.once('drain', () => channel.resume());
    }
    // After the write: an echo is on its way to the client before the recording takes it.
    this.options.recorder?.output(chunk);
  }

  abort(frame: ErrorFrame, code: number, reason: string): void {
    this.reason ??= reason;
    for (const w of this.watchers) refuse(w.ws, frame, code);
    this.watchers.clear();
    const { stream } = this;
    if (!stream.destroyed) {
      if (this.options.kind === 'console') {
        stream.stderr.write(`\r\nfleet: ${frame.message}\r\n`);
        stream.exit(255);
      }
      stream.close();
    }
    if (!this.channel.destroyed) this.channel.destroy();
  }

  private maybeDone(): void {
    if (!this.streamClosed || !this.channelClosed) return;
    this.finished = true;
    for (const w of this.watchers) if (w.ws.readyState === w.ws.OPEN) w.ws.close(SessionClose.normal, 'session ended');
    this.watchers.clear();
    this.resolveDone({ bytesIn: this.input, bytesOut: this.output, reason: this.reason ?? 'ended' });
  }
}
