import { Duplex, PassThrough } from 'node:stream';
import { describe, expect, it } from 'vitest';
import type { Channel } from '../../shared/mux.js';
import type { SmuxStream } from '../../shared/smux.js';
import { StreamRelay } from './relay.js';

/** The agent's side: a stream that also takes control messages. */
class FakeChannel extends PassThrough {
  control(): void {}
}

/** The qbee client's stream: what was written to it, as it came. */
class FakeStream extends Duplex {
  readonly stats = { bytesIn: 0, bytesOut: 0 };
  written = '';
  override _write(chunk: Buffer, _enc: BufferEncoding, done: () => void): void {
    this.written += chunk.toString();
    done();
  }
  override _read(): void {}
}

/** A client that stopped reading: nothing written to it is ever taken. */
class StalledStream extends FakeStream {
  override _write(): void {}
}

describe('StreamRelay', () => {
  it("writes a console's output to the client before recording it", async () => {
    const channel = new FakeChannel();
    const stream = new FakeStream();
    const events: string[] = [];
    const recorder = { output: (chunk: Buffer) => events.push(`o:${chunk.toString()}:${stream.written.length}`) };
    const relay = new StreamRelay(stream as unknown as SmuxStream, channel as unknown as Channel, { kind: 'console', size: { cols: 80, rows: 24 }, recorder });
    relay.start();
    channel.write(Buffer.from('a'));
    channel.write(Buffer.from('b'));
    await expect.poll(() => events).toEqual(['o:a:1', 'o:b:2']);
  });

  it('closes the stream once the device ended, without waiting for the client to end its side', async () => {
    const channel = new FakeChannel();
    const stream = new FakeStream();
    const relay = new StreamRelay(stream as unknown as SmuxStream, channel as unknown as Channel, { kind: 'console', size: { cols: 80, rows: 24 } });
    relay.start();
    channel.end(Buffer.from('logout\r\n'));
    const end = await relay.done;
    expect(end.reason).toBe('ended by the device');
    expect(stream.written).toBe('logout\r\n');
    expect(stream.writableFinished).toBe(true); // its last bytes, then FIN
    expect(stream.destroyed).toBe(true);
    expect(stream.readableEnded).toBe(false); // the client never ended its side
  });

  it('cuts a client that stopped reading once the device ended, after the grace period', async () => {
    const channel = new FakeChannel();
    const stream = new StalledStream();
    const relay = new StreamRelay(stream as unknown as SmuxStream, channel as unknown as Channel, { kind: 'console', endGraceMs: 10 });
    relay.start();
    channel.end(Buffer.alloc(256 * 1024, 'x'));
    const end = await relay.done;
    expect(end.reason).toBe('ended by the device');
    expect(stream.writableFinished).toBe(false);
    expect(stream.destroyed).toBe(true);
  });
});
