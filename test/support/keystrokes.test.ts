import { describe, expect, it } from 'vitest';
import { addedOver, interleavedRoundTrips, percentile, percentilesOf, roundOrder, type KeystrokePath } from './keystrokes.js';

/**
 * A fake clock and paths that echo each byte in a later turn, moving the clock by the path's own
 * round trip (plus `slow(n)` for the n-th keystroke of the whole run, whatever path it went into).
 */
function fakePaths(ms: Record<string, number>, slow: (n: number) => number = () => 0) {
  let clock = 0n;
  let sent = 0;
  const order: string[] = [];
  const paths: Record<string, KeystrokePath> = {};
  for (const [name, rtt] of Object.entries(ms)) {
    let cb: (d: Buffer) => void = () => {};
    paths[name] = {
      onData: (f) => (cb = f),
      send: (byte) => {
        order.push(`${name}:${byte.toString()}`);
        const extra = slow(sent++);
        setImmediate(() => {
          clock += BigInt(Math.round((rtt + extra) * 1e6));
          cb(Buffer.from(byte));
        });
      },
    };
  }
  return { paths, order, now: () => clock };
}

describe('keystroke percentiles', () => {
  it('takes the element at ⌊p/100 · n⌋ of the sorted times', () => {
    const sorted = Array.from({ length: 200 }, (_, i) => i + 1);
    expect(percentile(sorted, 50)).toBe(101);
    expect(percentile(sorted, 99)).toBe(199);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([], 50)).toBeNaN();
  });

  it('sorts each series on its own and subtracts the anchor percentile by percentile', () => {
    const figures = percentilesOf({ pty: [3, 1, 2, 4], console: [10, 40, 20, 30] });
    expect(figures).toEqual({ pty: { p50: 3, p99: 4, count: 4 }, console: { p50: 30, p99: 40, count: 4 } });
    expect(addedOver(figures, 'pty')).toEqual({ pty: { p50: 0, p99: 0 }, console: { p50: 27, p99: 36 } });
  });

  it('rotates the order of the paths every round', () => {
    expect([0, 1, 2, 3].map((r) => roundOrder(['a', 'b', 'c'], r).join(''))).toEqual(['abc', 'bca', 'cab', 'abc']);
  });
});

describe('interleavedRoundTrips', () => {
  it('takes one keystroke into each path in turn, waiting for each echo, and keeps each path its own times', async () => {
    const { paths, order, now } = fakePaths({ pty: 0.02, console: 0.3, ssh: 0.1 });
    const times = await interleavedRoundTrips(paths, 6, 2, now);
    // Two warm-up rounds, then six counted, per path; a–z in turn, the order rotated each round.
    expect(order.slice(0, 9)).toEqual(['pty:a', 'console:a', 'ssh:a', 'console:b', 'ssh:b', 'pty:b', 'ssh:c', 'pty:c', 'console:c']);
    expect(order).toHaveLength(24);
    expect(times.pty.map((t) => t.toFixed(3))).toEqual(Array(6).fill('0.020'));
    expect(times.console.map((t) => t.toFixed(3))).toEqual(Array(6).fill('0.300'));
    expect(times.ssh.map((t) => t.toFixed(3))).toEqual(Array(6).fill('0.100'));
  });

  it('spreads a slow stretch of the machine over every series alike', async () => {
    // 30 keystrokes in a row (ten rounds) each take 50 ms longer, whichever path they went into: run
    // one series after another, that stretch fell into one series alone and moved its p99 by 50 ms
    // against the others'.
    const { paths, now } = fakePaths({ pty: 0.02, console: 0.3, ssh: 0.1 }, (n) => (n >= 300 && n < 330 ? 50 : 0));
    const figures = percentilesOf(await interleavedRoundTrips(paths, 200, 0, now));
    const slowest = (k: 'pty' | 'console' | 'ssh') => figures[k].p99;
    expect([slowest('pty'), slowest('console'), slowest('ssh')].map((t) => Math.round(t))).toEqual([50, 50, 50]);
    expect(addedOver(figures, 'pty').console.p99).toBeCloseTo(0.28, 6);
  });

  it('waits for the byte it sent, not for any output', async () => {
    let cb: (d: Buffer) => void = () => {};
    let clock = 0n;
    const path: KeystrokePath = {
      onData: (f) => (cb = f),
      send: (byte) => {
        cb(Buffer.from('noise')); // before the echo: not the byte sent, so not an echo
        setImmediate(() => {
          clock += 1_000_000n;
          cb(Buffer.from('x'));
          setImmediate(() => {
            clock += 1_000_000n;
            cb(byte);
          });
        });
      },
    };
    const times = await interleavedRoundTrips({ one: path }, 3, 0, () => clock);
    expect(times.one.map((t) => t.toFixed(3))).toEqual(['2.000', '2.000', '2.000']);
  });
});
