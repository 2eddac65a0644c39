import { afterEach, describe, expect, it } from 'vitest';
import { tcpPair } from '../test/support/tcp-pair.js';
import { corkForTurn } from './turn-cork.js';

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('corkForTurn', () => {
  let close: (() => void) | undefined;
  afterEach(() => close?.());

  it('sends the writes of one turn in one writev, in order, and they arrive together', async () => {
    const p = await tcpPair();
    close = p.close;
    const hold = corkForTurn(p.client);
    for (const piece of ['head', 'er', 'payload']) {
      hold();
      p.client.write(piece);
    }
    // Corked once however often it is held in the turn.
    expect(p.client.writableCorked).toBe(1);
    expect(p.calls).toEqual([]);
    await turn();
    expect(p.calls).toEqual([3]);
    expect(p.client.writableCorked).toBe(0);
    await p.receivedBytes(13);
    expect(p.received.map(String)).toEqual(['headerpayload']);
  });

  it('does not hold a write past its turn, and holds a later turn on its own', async () => {
    const p = await tcpPair();
    close = p.close;
    const hold = corkForTurn(p.client);
    hold();
    p.client.write('a');
    // Handed to the kernel before the next turn's timers or I/O run.
    await turn();
    expect(p.calls).toEqual([1]);
    // A write of a later turn without a hold is not held by the earlier one.
    p.client.write('b');
    expect(p.calls).toEqual([1, 1]);
    hold();
    p.client.write('c');
    p.client.write('d');
    expect(p.calls).toEqual([1, 1]);
    await turn();
    expect(p.calls).toEqual([1, 1, 2]);
    expect(p.client.writableCorked).toBe(0);
    await p.receivedBytes(4);
    expect(Buffer.concat(p.received).toString()).toBe('abcd');
  });

  it('a socket destroyed in the turn is not uncorked into an error, nor corked again', async () => {
    const p = await tcpPair();
    close = p.close;
    const errors: Error[] = [];
    p.client.on('error', (err) => errors.push(err));
    const uncorks: number[] = [];
    const uncork = p.client.uncork.bind(p.client);
    p.client.uncork = () => (uncorks.push(1), uncork());
    const hold = corkForTurn(p.client);
    hold();
    p.client.write('x');
    p.client.destroy();
    expect(() => {
      hold();
      p.client.write('y');
    }).not.toThrow();
    await turn();
    hold();
    expect(uncorks).toEqual([]);
    expect(p.client.writableCorked).toBe(1);
    expect(errors).toEqual([]);
  });
});
