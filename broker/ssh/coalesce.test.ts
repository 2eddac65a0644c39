import { afterEach, describe, expect, it } from 'vitest';
import { tcpPair } from '../../test/support/tcp-pair.js';
import { coalesceWrites } from './coalesce.js';

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('coalesceWrites', () => {
  let close: (() => void) | undefined;
  afterEach(() => close?.());

  it('sends the packets written in one turn in one write, in order', async () => {
    const p = await tcpPair();
    close = p.close;
    coalesceWrites(p.client);
    // As ssh2 sends a 128 KiB frame from the device: four 32 KiB packets, each written on its own.
    const packets = [1, 2, 3, 4].map((n) => Buffer.alloc(32 * 1024, n));
    for (const packet of packets) p.client.write(packet);
    await turn();
    expect(p.calls).toEqual([4]);
    const total = 4 * 32 * 1024;
    while (p.received.reduce((n, b) => n + b.length, 0) < total) await new Promise((resolve) => setTimeout(resolve, 5));
    expect(Buffer.concat(p.received).equals(Buffer.concat(packets))).toBe(true);
  });

  it("does not hold a lone write past its turn (a keystroke leaves at once), and each turn's writes leave on their own", async () => {
    const p = await tcpPair();
    close = p.close;
    coalesceWrites(p.client);
    p.client.write(Buffer.from('a'));
    // Handed to the kernel before any timer or I/O of the next turn runs.
    await turn();
    expect(p.calls).toEqual([1]);
    p.client.write(Buffer.from('b'));
    p.client.write(Buffer.from('c'));
    await turn();
    expect(p.calls).toEqual([1, 2]);
    expect(p.client.writableCorked).toBe(0);
  });

  it('an uncoalesced socket (ssh2 as it was) makes a write per packet', async () => {
    const p = await tcpPair();
    close = p.close;
    for (const n of [1, 2, 3, 4]) p.client.write(Buffer.alloc(32 * 1024, n));
    await turn();
    expect(p.calls.length).toBeGreaterThan(1);
  });

  it('a socket destroyed mid-turn is not corked again and throws nothing', async () => {
    const p = await tcpPair();
    close = p.close;
    coalesceWrites(p.client);
    p.client.write(Buffer.from('x'));
    p.client.destroy();
    expect(() => p.client.write(Buffer.from('y'))).not.toThrow();
    await turn();
  });
});
