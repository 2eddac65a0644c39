import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { corkForTurn } from './turn-cork.js';

const turn = () => new Promise((resolve) => setImmediate(resolve));

/** A connected TCP pair: what `client` writes is read at `server`; the writes handed to the kernel are counted. */
async function pair() {
  const listener = net.createServer();
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  const accepted = new Promise<net.Socket>((resolve) => listener.once('connection', resolve));
  const client = net.connect((listener.address() as net.AddressInfo).port, '127.0.0.1');
  await new Promise((resolve) => client.once('connect', resolve));
  const server = await accepted;
  const received: Buffer[] = [];
  server.on('data', (d: Buffer) => received.push(d));
  // One entry per write handed to the kernel: 1 for a single write, n for a writev of n pieces.
  const calls: number[] = [];
  const raw = client as unknown as { _write: (...a: unknown[]) => void; _writev: (chunks: unknown[], cb: unknown) => void };
  const write = raw._write.bind(client);
  const writev = raw._writev.bind(client);
  raw._write = (...a: unknown[]) => (calls.push(1), write(...a));
  raw._writev = (chunks: unknown[], cb: unknown) => (calls.push(chunks.length), writev(chunks, cb));
  const receivedBytes = async (n: number) => {
    while (received.reduce((sum, b) => sum + b.length, 0) < n) await new Promise((resolve) => server.once('data', resolve));
  };
  const close = () => {
    client.destroy();
    server.destroy();
    listener.close();
  };
  return { client, received, receivedBytes, calls, close };
}

describe('corkForTurn', () => {
  let close: (() => void) | undefined;
  afterEach(() => close?.());

  it('sends the writes of one turn in one writev, in order, and they arrive together', async () => {
    const p = await pair();
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
    const p = await pair();
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
    const p = await pair();
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
