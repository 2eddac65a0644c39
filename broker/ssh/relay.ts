import type { ServerChannel } from 'ssh2';
import type { Channel } from '../../shared/mux.js';
import type { ChannelControl } from '../../shared/protocol.js';
import type { ErrorFrame } from '../remote/relay.js';
import type { LiveRelay } from '../remote/sessions.js';

/**
 * What a command without a terminal (`ssh host cmd`, rsync, scp -O) runs through: the agent's
 * console is a pty, so the command puts it in raw mode first (no echo, no CR/LF translation, no
 * signals from bytes: 8-bit clean) and then writes RAW_MARKER. The relay holds the client's bytes
 * until the marker came, so none is echoed or translated, and drops the marker from the output.
 */
export const RAW_MARKER = '\u0001fleet-raw\u0002';
export const RAW_SCRIPT = `stty raw -echo 2>/dev/null; printf '\\001fleet-raw\\002'; exec /bin/sh -c "$1"`;
/** Output looked through for the marker at most; past it the output goes on as it is. */
const RAW_MARKER_WINDOW = 64 * 1024;

export interface SshRelayOptions {
  kind: 'console' | 'tunnel';
  /** console: the size told to the agent (which then knows the broker listens) */
  size?: { cols: number; rows: number };
  /** console of a command without a terminal: wait for RAW_MARKER before sending input */
  raw?: boolean;
  /** console: where its output is recorded (never its input) */
  recorder?: { output(chunk: Buffer): void; resize?(cols: number, rows: number): void };
}

/**
 * Moves one SSH channel's bytes to and from its agent channel. Both sides are flow-controlled (the
 * SSH window one way, the channel's credit the other): a side that cannot take more pauses the
 * other, so a client that floods or never reads holds at most a window's worth here. A console's
 * exit status goes to the client as SSH's `exit-status` before the channel closes.
 */
export class SshRelay implements LiveRelay {
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

  constructor(
    private readonly stream: ServerChannel,
    private readonly channel: Channel,
    private readonly options: SshRelayOptions,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    if (options.raw) this.pending = Buffer.alloc(0);
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
      // A terminal hears the end of its input as ^D; a tunnel passes it on; a raw console cannot tell it.
      if (options.kind === 'tunnel') channel.end();
      else if (!options.raw && !channel.destroyed && !channel.writableEnded) channel.write(Buffer.from([4]));
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

  private deliver(chunk: Buffer): void {
    const { stream, channel } = this;
    this.output += chunk.length;
    this.options.recorder?.output(chunk);
    if (stream.destroyed || stream.writableEnded) return;
    if (!stream.write(chunk) && !channel.isPaused()) {
      channel.pause();
      stream.once('drain', () => channel.resume());
    }
  }

  abort(frame: ErrorFrame, _code: number, reason: string): void {
    this.reason ??= reason;
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
    this.resolveDone({ bytesIn: this.input, bytesOut: this.output, reason: this.reason ?? 'ended' });
  }
}
