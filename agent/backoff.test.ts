import { describe, expect, it } from 'vitest';
import { Backoff, DOWN_CAP_MS, Reconnect, retryAfterMs, sleep } from './backoff.js';

describe('reconnect backoff', () => {
  it('doubles its ceiling from the base up to the cap', () => {
    const b = new Backoff(1000, 60_000, () => 0.999999);
    const waits = Array.from({ length: 9 }, () => b.next());
    expect(waits).toEqual([999, 1999, 3999, 7999, 15999, 31999, 59999, 59999, 59999]);
  });

  it('jitters fully: any wait from 0 up to the ceiling', () => {
    const low = new Backoff(1000, 60_000, () => 0);
    expect([low.next(), low.next(), low.next()]).toEqual([0, 0, 0]);
    const b = new Backoff(1000, 60_000);
    const waits = Array.from({ length: 200 }, () => {
      b.reset();
      b.next();
      b.next();
      return b.next(); // ceiling 4000
    });
    expect(Math.min(...waits)).toBeGreaterThanOrEqual(0);
    expect(Math.max(...waits)).toBeLessThan(4000);
    expect(new Set(waits).size).toBeGreaterThan(50);
  });

  it('starts over after reset', () => {
    const b = new Backoff(100, 1000, () => 0.5);
    b.next();
    b.next();
    b.next();
    expect(b.ceiling).toBe(800);
    b.reset();
    expect(b.ceiling).toBe(100);
  });

  it('sleep ends early when aborted', async () => {
    const controller = new AbortController();
    const started = Date.now();
    const done = sleep(60_000, controller.signal);
    controller.abort();
    await done;
    expect(Date.now() - started).toBeLessThan(5000);
  });
});

describe("the broker's Retry-After", () => {
  it('guides the wait: half to one and a half times its delay, however far the backoff had grown', () => {
    const low = new Backoff(1000, 60_000, () => 0);
    const high = new Backoff(1000, 60_000, () => 0.999999);
    for (let i = 0; i < 8; i++) {
      low.next();
      high.next();
    }
    // The exponential ceiling is at its cap (60 s); the broker asked for 10 s.
    expect(low.after(10_000)).toBe(5000);
    expect(high.after(10_000)).toBe(14_999);
    // It does not count as another failure: the ceiling is where it was.
    expect(high.ceiling).toBe(60_000);
  });

  it('is bounded by the cap, and a hostile or broken header cannot make the agent wait longer', () => {
    expect(new Backoff(1000, 60_000, () => 0.999999).after(86_400_000)).toBeLessThan(90_000);
    expect(new Backoff(1000, 60_000, () => 0.5).after(-5)).toBe(0);
  });

  it('reads delay-seconds and HTTP dates, and nothing else', () => {
    expect(retryAfterMs('10')).toBe(10_000);
    expect(retryAfterMs(' 3 ')).toBe(3000);
    expect(retryAfterMs(['7'])).toBe(7000);
    expect(retryAfterMs('Thu, 26 Nov 2026 12:00:10 GMT', Date.parse('2026-11-26T12:00:00Z'))).toBe(10_000);
    expect(retryAfterMs('Thu, 26 Nov 2026 11:00:00 GMT', Date.parse('2026-11-26T12:00:00Z'))).toBe(0);
    expect(retryAfterMs(undefined)).toBeUndefined();
    expect(retryAfterMs('soon')).toBeUndefined();
    expect(retryAfterMs('1e9')).toBeUndefined();
  });
});

describe('reconnecting: nothing listening and failed attempts kept apart', () => {
  const top = () => 0.999999;

  it('waits for a broker that is not listening with a smaller cap, full jitter below it', () => {
    const r = new Reconnect(1000, 60_000, DOWN_CAP_MS, top);
    const waits = Array.from({ length: 8 }, () => r.afterDown());
    expect(waits).toEqual([999, 1999, 3999, 7999, 9999, 9999, 9999, 9999]);
    expect(new Reconnect(1000, 60_000, DOWN_CAP_MS, () => 0).afterDown()).toBe(0);
  });

  it('does not make the first failed handshake after a long downtime wait out the full cap', () => {
    const r = new Reconnect(1000, 60_000, DOWN_CAP_MS, top);
    r.afterFailure(); // the connection was lost: the broker stops
    for (let i = 0; i < 30; i++) r.afterDown(); // minutes of refusals
    // The broker listens again; the handshake times out: the failed count goes on from where it was.
    expect(r.afterFailure()).toBe(1999);
    expect(r.afterFailure()).toBe(3999);
  });

  it('still grows failed attempts up to the full cap (a broker that answers and fails)', () => {
    const r = new Reconnect(1000, 60_000, DOWN_CAP_MS, top);
    const waits = Array.from({ length: 8 }, () => r.afterFailure());
    expect(waits).toEqual([999, 1999, 3999, 7999, 15999, 31999, 59999, 59999]);
  });

  it('starts the down count over once the broker answered, and both over at a welcome', () => {
    const r = new Reconnect(1000, 60_000, DOWN_CAP_MS, top);
    for (let i = 0; i < 5; i++) r.afterDown();
    r.afterFailure();
    expect(r.afterDown()).toBe(999);
    r.afterFailure();
    r.connected();
    expect(r.afterFailure()).toBe(999);
    expect(r.afterDown()).toBe(999);
  });

  it("follows the broker's Retry-After without counting it as a failure", () => {
    const r = new Reconnect(1000, 60_000, DOWN_CAP_MS, top);
    expect(r.afterFailure(10_000)).toBe(14_999);
    expect(r.afterFailure()).toBe(999);
  });

  it("keeps the down cap within the operator's bounds: below a smaller cap, not below a larger first ceiling", () => {
    const r = new Reconnect(100, 2000, DOWN_CAP_MS, top);
    const waits = Array.from({ length: 6 }, () => r.afterDown());
    expect(Math.max(...waits)).toBe(1999);
    const slow = new Reconnect(30_000, 600_000, DOWN_CAP_MS, top);
    expect([slow.afterDown(), slow.afterDown()]).toEqual([29_999, 29_999]);
  });
});
