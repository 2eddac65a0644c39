import { EventEmitter } from 'node:events';
import { PassThrough } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { tcpPair } from '../../test/support/tcp-pair.js';
import { bridge, type BridgedSession } from './connect.js';

/** A tunnel session as the bridge sees it: the test emits the broker's bytes. */
class FakeSession extends EventEmitter {
  sendOwned = () => true;
  control = () => {};
  pause = () => {};
  resume = () => {};
  readPieces = () => ({ start: () => this });
}

let cleanup: (() => void) | undefined;
afterEach(() => cleanup?.());

describe('fleet connect bridging a tunnel to a local socket', () => {
  it('writes the pieces that arrive in one turn (one read from the broker) in one system call', async () => {
    const p = await tcpPair();
    cleanup = p.close;
    const session = new FakeSession();
    bridge(session as unknown as BridgedSession, new PassThrough(), p.client, () => {});
    // The end of one frame and two whole ones, as one 64 KiB read from the broker brings them.
    const pieces = [Buffer.alloc(1000, 1), Buffer.alloc(30_000, 2), Buffer.alloc(20_000, 3)];
    for (const piece of pieces) session.emit('data', piece);
    await p.receivedBytes(51_000);
    expect(p.calls).toEqual([3]);
    expect(Buffer.concat(p.received).equals(Buffer.concat(pieces))).toBe(true);
  });
});
