import type { Channel } from '../../shared/mux.js';
import type { ChannelControl, ChannelKind } from '../../shared/protocol.js';
import { encodeQbeeMessage, QbeeMessage } from '../../shared/qbee.js';
import type { SmuxStream } from '../../shared/smux.js';
import type { ErrorFrame } from '../remote/relay.js';
import type { LiveRelay } from '../remote/sessions.js';

export interface StreamRelayOptions {
  kind: ChannelKind;
  /** console: the size it was opened with, told to the agent (which then knows we listen) */
  size?: { cols: number; rows: number };
  direction?: 'upload' | 'download';
  /** UDP: the stream carries PORT(2) | LENGTH(2) | DATA frames, the channel one datagram per write */
  datagramPort?: number;
  /** console: where its output is recorded (never its input) */
  recorder?: { output(chunk: Buffer): void };
  /** How long a client that stopped reading may hold the stream's last output once the device ended (default 30 s). */
  endGraceMs?: number;
}

/** Largest UDP frame body, and so the most held while one arrives. */
const MAX_DATAGRAM = 0xffff;
/** A client that does not take the last output of an ended session in this long is cut. */
const END_GRACE_MS = 30_000;

/**
 * Moves one qbee stream's bytes to and from its agent channel. Both are flow-controlled streams
 * (smux windows one side, channel credit the other), so `pipe` keeps memory bounded: a slow
 * reader on either end stops the reads on the other. A qbee peer's FIN means it neither reads nor
 * writes any more: the channel is ended, then torn down once the agent had its chance to answer.
 * The same holds the other way: when the device ends (a shell exits), the stream gets its last
 * bytes and our FIN, and is then closed on our side without waiting for the client's FIN, as
 * qbee's device side closes its stream: the session ends, is recorded and audited as ended.
 */
export class StreamRelay implements LiveRelay {
  readonly done: Promise<{ bytesIn: number; bytesOut: number; reason: string }>;
  private resolveDone!: (end: { bytesIn: number; bytesOut: number; reason: string }) => void;
  private reason?: string;
  private streamClosed = false;
  private channelClosed = false;
  private ending = false;
  /** The stream's count when this relay took it over (the handshake came before). */
  private bytesBefore = 0;

  constructor(
    private readonly stream: SmuxStream,
    private readonly channel: Channel,
    private readonly options: StreamRelayOptions,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  start(): void {
    const { stream, channel, options } = this;
    this.bytesBefore = stream.stats.bytesIn;
    const bytesBefore = this.bytesBefore;
    channel.on('control', (msg: ChannelControl) => {
      if (msg.type === 'exit') this.reason ??= `exit ${msg.code ?? 'none'}${msg.signal ? ` signal ${msg.signal}` : ''}`;
      if (msg.type === 'result') {
        this.reason ??= msg.ok ? `copied ${msg.bytes} bytes` : `copy failed: ${msg.error ?? 'unknown error'}`;
        if (options.direction === 'upload') {
          // The end of an upload is answered on the stream, as qbee's device side does.
          if (!stream.writableEnded)
            stream.write(msg.ok ? encodeQbeeMessage(QbeeMessage.ok) : encodeQbeeMessage(QbeeMessage.error, (msg.error ?? 'copy failed').slice(0, 1000)));
        } else if (!msg.ok) {
          // A download has no room for a failure once its bytes started: cut the stream, the client sees an error.
          stream.destroy(new Error(msg.error ?? 'copy failed'));
        }
      }
    });
    const acceptsInput = !(options.kind === 'copy' && options.direction === 'download');
    if (options.datagramPort !== undefined) this.relayDatagrams(options.datagramPort);
    else if (acceptsInput) {
      channel.pipe(stream);
      stream.pipe(channel);
    } else {
      channel.pipe(stream);
      // Nothing goes to the device in a download; our end is the agent's signal to start.
      stream.resume();
      channel.end();
    }
    // The device's last byte (a shell exited, a download sent, a tunnel's far end closed): as on
    // qbee's device side, that ends the stream both ways, after the pipe wrote what came before.
    channel.once('end', () => this.endStream());
    // Listened to after the pipe: an echo is written to the stream before the recording takes it.
    const { recorder } = options;
    if (recorder) channel.on('data', (chunk: Buffer) => recorder.output(chunk));
    stream.on('end', () => {
      this.reason ??= 'closed by the client';
      // An upload's end is the end of the archive: the agent answers, and the channel ends itself.
      // Otherwise the peer reads no more: once what it sent reached the agent, the channel goes.
      if (options.kind !== 'copy' && !channel.destroyed) {
        if (channel.writableFinished) channel.destroy();
        else channel.once('finish', () => channel.destroy());
      }
    });
    stream.on('close', () => {
      this.streamClosed = true;
      this.reason ??= 'client connection lost';
      if (!channel.destroyed) channel.destroy();
      this.maybeDone(bytesBefore);
    });
    channel.on('close', () => {
      this.channelClosed = true;
      if (channel.errored) {
        this.reason ??= `failed on the device: ${channel.errored.message}`;
        stream.destroy();
      } else {
        this.reason ??= 'ended by the device';
        this.endStream();
      }
      this.maybeDone(bytesBefore);
    });
    if (options.size) channel.control({ type: 'resize', ...options.size });
  }

  /**
   * The device is done: the client gets what is left then FIN (smux: we neither read nor write any
   * more), and the stream is closed here without waiting for the client's FIN. A client that
   * stopped reading cannot hold it open: past the grace period it is cut.
   */
  private endStream(): void {
    const { stream } = this;
    if (stream.destroyed || this.ending) return;
    this.ending = true;
    this.reason ??= 'ended by the device';
    const grace = setTimeout(() => stream.destroy(), this.options.endGraceMs ?? END_GRACE_MS);
    grace.unref();
    const close = () => {
      clearTimeout(grace);
      if (!stream.destroyed) stream.destroy();
    };
    stream.once('close', () => clearTimeout(grace));
    if (stream.writableFinished) return close();
    stream.once('finish', close);
    if (!stream.writableEnded) stream.end();
  }

  /**
   * UDP: qbee frames each datagram with its port and length on the stream; the agent's channel
   * keeps one datagram per write. Each side pauses the other while it cannot take more.
   */
  private relayDatagrams(port: number): void {
    const { stream, channel } = this;
    let held: Buffer = Buffer.alloc(0);
    stream.on('data', (chunk: Buffer) => {
      held = held.length ? Buffer.concat([held, chunk]) : chunk;
      while (held.length >= 4) {
        const length = held.readUInt16BE(2);
        if (held.length < 4 + length) break;
        const datagram = Buffer.from(held.subarray(4, 4 + length));
        held = held.subarray(4 + length);
        if (channel.destroyed || channel.writableEnded) continue;
        if (!channel.write(datagram) && !stream.isPaused()) {
          stream.pause();
          channel.once('drain', () => stream.resume());
        }
      }
      if (held.length > 4 + MAX_DATAGRAM) stream.destroy(new Error('UDP frame too large'));
    });
    stream.on('end', () => channel.end());
    channel.on('data', (datagram: Buffer) => {
      // A UDP datagram never exceeds the frame's 16-bit length; anything larger is not one.
      if (datagram.length > MAX_DATAGRAM || stream.writableEnded || stream.destroyed) return;
      const header = Buffer.allocUnsafe(4);
      header.writeUInt16BE(port, 0);
      header.writeUInt16BE(datagram.length, 2);
      if (!stream.write(Buffer.concat([header, datagram])) && !channel.isPaused()) {
        channel.pause();
        stream.once('drain', () => channel.resume());
      }
    });
    channel.on('end', () => {
      if (!stream.writableEnded) stream.end();
    });
    stream.resume();
  }

  /** Bytes so far from the qbee client to the device, for the operator's list of live sessions. */
  get bytesIn(): number {
    return this.stream.stats.bytesIn - this.bytesBefore;
  }

  get bytesOut(): number {
    return this.stream.stats.bytesOut;
  }

  abort(_frame: ErrorFrame, _code: number, reason: string): void {
    this.reason ??= reason;
    this.stream.destroy();
    if (!this.channel.destroyed) this.channel.destroy();
  }

  private maybeDone(bytesBefore: number): void {
    if (!this.streamClosed || !this.channelClosed) return;
    this.resolveDone({ bytesIn: this.stream.stats.bytesIn - bytesBefore, bytesOut: this.stream.stats.bytesOut, reason: this.reason ?? 'ended' });
  }
}
