/**
 * The socket of an inner SSH connection (`ssh -J`'s hop to a device): a forwarded channel of the
 * gateway's own connection, handed to ssh2's server as if it were TCP.
 */
import { Duplex } from 'node:stream';
import type { ServerChannel } from 'ssh2';
import { corkForTurn } from '../../shared/turn-cork.js';

/**
 * An inner connection's socket over a forwarded channel of the gateway. What the inner connection
 * writes in one turn leaves as one write to the channel: ssh2 writes each packet on its own, and an
 * inner packet carrying a full 32 KiB of data is a few bytes more than the outer channel's packet
 * (OpenSSH's 32 KiB), so packet by packet each would cost two outer packets (two encryptions, two
 * socket writes); joined, the outer packets are full. Flow control is the channel's: a write waits
 * for it to drain, and what waits meanwhile is bounded by the inner connection's SSH windows.
 */
export class DeviceSocket extends Duplex {
  readonly remotePort = 0;
  /** Holds what is written in this turn, to leave together once the turn's work is done. */
  private readonly holdTurn = corkForTurn(this);

  constructor(
    private readonly channel: ServerChannel,
    readonly remoteAddress: string,
  ) {
    super();
    channel.on('data', (chunk: Buffer) => {
      if (!this.push(chunk)) channel.pause();
    });
    channel.on('end', () => this.push(null));
    channel.on('close', () => this.destroy());
    channel.on('error', () => this.destroy());
  }

  override write(chunk: unknown, encoding?: unknown, cb?: unknown): boolean {
    this.holdTurn();
    return super.write(chunk, encoding as BufferEncoding, cb as (error: Error | null | undefined) => void);
  }

  /** What this turn wrote is still held when the inner connection is destroyed in it: it leaves first, as it would have without the hold. */
  override destroy(error?: Error): this {
    if (this.writableCorked > 0 && !this.destroyed && !this.channel.destroyed) this.uncork();
    return super.destroy(error);
  }

  override _read(): void {
    this.channel.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    this.send(chunk, done);
  }

  override _writev(chunks: { chunk: Buffer }[], done: (err?: Error | null) => void): void {
    this.send(chunks.length === 1 ? chunks[0].chunk : Buffer.concat(chunks.map((c) => c.chunk)), done);
  }

  override _final(done: () => void): void {
    this.channel.end();
    done();
  }

  override _destroy(err: Error | null, done: (err: Error | null) => void): void {
    if (!this.channel.destroyed) this.channel.close();
    done(err);
  }

  private send(data: Buffer, done: (err?: Error | null) => void): void {
    if (this.channel.write(data)) done();
    else this.channel.once('drain', () => done());
  }
}
