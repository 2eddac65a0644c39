/** The slots refused agents are told to come back at (Retry-After), on a clock of the test's own. */
import { describe, expect, it } from 'vitest';
import { FLOOR_PER_SECOND, MAX_RETRY_AFTER_S, ReturnSchedule } from './returns.js';

function clock() {
  let t = 10_000;
  return { now: () => t, advance: (ms: number) => (t += ms) };
}

describe('return schedule', () => {
  it('spreads a wave of refused agents over the time the broker needs for them, never all told the same second', () => {
    const c = clock();
    const s = new ReturnSchedule(FLOOR_PER_SECOND, c.now);
    const told = Array.from({ length: 10 * FLOOR_PER_SECOND }, () => s.retryAfterSeconds());
    // Later agents are told later, one slot (1/FLOOR_PER_SECOND s) after another: 10 s for 10 s of slots.
    expect(told.every((v, i) => i === 0 || v >= told[i - 1])).toBe(true);
    expect(told[0]).toBe(1);
    expect(told.at(-1)).toBeGreaterThanOrEqual(10);
    expect(new Set(told).size).toBeGreaterThanOrEqual(10);
    // No second is told to more agents than the broker lets in in a second (and a little rounding).
    const perSecond = new Map<number, number>();
    for (const v of told) perSecond.set(v, (perSecond.get(v) ?? 0) + 1);
    expect(Math.max(...perSecond.values())).toBeLessThanOrEqual(FLOOR_PER_SECOND + 1);
  });

  it('spreads over less time when the broker finishes handshakes faster', () => {
    const c = clock();
    const s = new ReturnSchedule(FLOOR_PER_SECOND, c.now);
    // 500 handshakes finished in the last second.
    for (let i = 0; i < 500; i++) s.finished();
    c.advance(1000);
    const told = Array.from({ length: 1000 }, () => s.retryAfterSeconds());
    expect(told.at(-1)).toBeLessThanOrEqual(3);
    // At the floor's pace the same wave would have been spread over 20 s.
    const slow = new ReturnSchedule(FLOOR_PER_SECOND, clock().now);
    expect(Array.from({ length: 1000 }, () => slow.retryAfterSeconds()).at(-1)).toBeGreaterThanOrEqual(19);
  });

  it('frees the slots as time passes, and never tells more than the cap however many are refused', () => {
    const c = clock();
    const s = new ReturnSchedule(FLOOR_PER_SECOND, c.now);
    const flood = Array.from({ length: 100_000 }, () => s.retryAfterSeconds());
    expect(Math.max(...flood)).toBe(MAX_RETRY_AFTER_S);
    expect(Math.min(...flood)).toBeGreaterThanOrEqual(1);
    // Once the slots given are past, a refused agent is told the earliest again.
    c.advance((MAX_RETRY_AFTER_S + 1) * 1000);
    expect(s.retryAfterSeconds()).toBe(1);
  });
});
