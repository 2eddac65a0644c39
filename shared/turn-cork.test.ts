import { afterEach, describe, expect, it } from 'vitest';
import { tcpPair } from '../test/support/tcp-pair.js';
import { corkForTurn, SocketHold } from './turn-cork.js';

const turn = () => new Promise((resolve) => setImmediate(resolve));
/** Resolves after the ticks queued so far: the turn that queued them is done, the loop's check phase not reached. */
const ticks = () => new Promise((resolve) => process.nextTick(resolve));

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

describe('SocketHold', () => {
  let close: (() => void) | undefined;
  afterEach(() => close?.());

  it('holds the writes of several turns of one iteration until its check phase: one writev', async () => {
    const p = await tcpPair();
    close = p.close;
    const hold = new SocketHold(p.client);
    // Three turns of one iteration (each over once its ticks have run), as three sessions' closes
    // read from three sockets in one poll; corkForTurn wrote each at the end of its turn: [1, 1, 1].
    for (const piece of ['one', 'two', 'six']) {
      hold.iteration();
      p.client.write(piece);
      await ticks();
    }
    expect(p.calls).toEqual([]);
    expect(p.client.writableCorked).toBe(1);
    await turn();
    expect(p.calls).toEqual([3]);
    expect(p.client.writableCorked).toBe(0);
    await p.receivedBytes(9);
    expect(Buffer.concat(p.received).toString()).toBe('onetwosix');
  });

  it('a turn hold while held for the iteration ends the hold with its turn: a keystroke does not wait for the check phase', async () => {
    const p = await tcpPair();
    close = p.close;
    const hold = new SocketHold(p.client);
    let checkPhase = false;
    setImmediate(() => (checkPhase = true));
    hold.iteration();
    p.client.write('close');
    await ticks();
    hold.turn();
    p.client.write('k');
    await ticks();
    // Both left at the end of the keystroke's turn, in order, before the loop's check phase.
    expect(p.calls).toEqual([2]);
    expect(checkPhase).toBe(false);
    expect(p.client.writableCorked).toBe(0);
    // The iteration's release, when it comes, does not uncork a later hold.
    hold.turn();
    p.client.write('x');
    await turn();
    expect(p.calls).toEqual([2, 1]);
    expect(p.client.writableCorked).toBe(0);
    await p.receivedBytes(7);
    expect(Buffer.concat(p.received).toString()).toBe('closekx');
  });

  it('an iteration hold inside a turn hold leaves with the turn', async () => {
    const p = await tcpPair();
    close = p.close;
    const hold = new SocketHold(p.client);
    hold.turn();
    p.client.write('a');
    hold.iteration();
    p.client.write('b');
    expect(p.client.writableCorked).toBe(1);
    await ticks();
    expect(p.calls).toEqual([2]);
    expect(p.client.writableCorked).toBe(0);
  });

  it('a socket destroyed while held is not uncorked into an error, nor corked again', async () => {
    const p = await tcpPair();
    close = p.close;
    const errors: Error[] = [];
    p.client.on('error', (err) => errors.push(err));
    const hold = new SocketHold(p.client);
    hold.iteration();
    p.client.write('x');
    p.client.destroy();
    expect(() => {
      hold.iteration();
      hold.turn();
    }).not.toThrow();
    await turn();
    expect(p.client.writableCorked).toBe(1);
    expect(errors).toEqual([]);
  });
});
