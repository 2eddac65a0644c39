import { describe, expect, it } from 'vitest';
import { Backoff, sleep } from './backoff.js';

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
