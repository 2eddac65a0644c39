/**
 * Keystroke round trips through several paths at once, taken in turn: one byte into each path and
 * its echo back, the paths alternating keystroke by keystroke (the order rotated every round), so
 * that every series' percentiles are taken over the same seconds of the machine. Run one series
 * after another, each for its own seconds, a hiccup of the machine in one series' window moved its
 * p99 against the others'; taken in turn, a slow second lands on every path alike.
 */

/** A path a keystroke goes through and comes back from (`cat` in raw mode at its far end). */
export interface KeystrokePath {
  send(byte: Buffer): void;
  /** Called once, before the first keystroke: `cb` gets whatever comes back. */
  onData(cb: (data: Buffer) => void): void;
}

export interface Percentiles {
  p50: number;
  p99: number;
  count: number;
}

/** The value below which `p` % of `sorted` (ascending) lie: the element at ⌊p/100 · n⌋. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/** p50 and p99 of each series (milliseconds, in any order). */
export function percentilesOf<K extends string>(series: Record<K, readonly number[]>): Record<K, Percentiles> {
  const out = {} as Record<K, Percentiles>;
  for (const name of Object.keys(series) as K[]) {
    const sorted = [...series[name]].sort((a, b) => a - b);
    out[name] = { p50: percentile(sorted, 50), p99: percentile(sorted, 99), count: sorted.length };
  }
  return out;
}

/** What each series adds over `anchor`'s: the difference of their p50s and of their p99s. */
export function addedOver<K extends string>(figures: Record<K, Percentiles>, anchor: NoInfer<K>): Record<K, { p50: number; p99: number }> {
  const out = {} as Record<K, { p50: number; p99: number }>;
  for (const name of Object.keys(figures) as K[]) {
    out[name] = { p50: figures[name].p50 - figures[anchor].p50, p99: figures[name].p99 - figures[anchor].p99 };
  }
  return out;
}

/** The order of the paths in round `round`: `names` rotated by `round`, so each path takes each place equally often. */
export function roundOrder<K>(names: readonly K[], round: number): K[] {
  const k = round % names.length;
  return [...names.slice(k), ...names.slice(0, k)];
}

/**
 * `count` round trips through each path (after `warmup` rounds not counted), one keystroke at a time:
 * a byte (a–z in turn) is sent into one path, and the next keystroke, into the next path, leaves
 * once the echo has come back. Answers each path's round-trip times in milliseconds, in the order
 * they were taken.
 */
export async function interleavedRoundTrips<K extends string>(
  paths: Record<K, KeystrokePath>,
  count: number,
  warmup = 50,
  now: () => bigint = process.hrtime.bigint,
): Promise<Record<K, number[]>> {
  const names = Object.keys(paths) as K[];
  const times = {} as Record<K, number[]>;
  const state = {} as Record<K, { expect: string; received: string; wake?: () => void }>;
  for (const name of names) {
    times[name] = [];
    const s = (state[name] = { expect: '', received: '' as string, wake: undefined as (() => void) | undefined });
    paths[name].onData((d) => {
      if (!s.wake) return; // late or stray output, between this path's keystrokes
      s.received += d.toString('latin1');
      if (s.received.includes(s.expect)) s.wake();
    });
  }
  for (let round = 0; round < count + warmup; round++) {
    const expect = String.fromCharCode(97 + (round % 26));
    for (const name of roundOrder(names, round)) {
      const s = state[name];
      s.expect = expect;
      s.received = '';
      const started = now();
      await new Promise<void>((resolve) => {
        s.wake = resolve;
        paths[name].send(Buffer.from(expect));
      });
      s.wake = undefined;
      if (round >= warmup) times[name].push(Number(now() - started) / 1e6);
    }
  }
  return times;
}
