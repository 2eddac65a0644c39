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
});
