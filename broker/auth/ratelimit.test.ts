import { describe, expect, it } from 'vitest';
import { ApiError } from '../http/errors.js';
import { RateLimiter } from './ratelimit.js';

function refusal(f: () => void): ApiError | undefined {
  try {
    f();
  } catch (err) {
    return err as ApiError;
  }
  return undefined;
}

describe('RateLimiter', () => {
  it('refuses the attempt past the limit with 429 and Retry-After until the window ends', () => {
    const limiter = new RateLimiter(3, 60_000);
    for (let i = 0; i < 3; i++) limiter.hit('k', 1000);
    const err = refusal(() => limiter.hit('k', 11_000));
    expect(err?.status).toBe(429);
    expect(err?.error).toBe('rate_limited');
    expect(err?.headers['Retry-After']).toBe('50');
    expect(refusal(() => limiter.hit('other', 11_000))).toBeUndefined();
    expect(refusal(() => limiter.hit('k', 61_000))).toBeUndefined();
  });

  it('gives back released attempts, but not into a later window', () => {
    const limiter = new RateLimiter(2, 60_000);
    limiter.hit('k', 0);
    limiter.hit('k', 0);
    limiter.release('k', 0);
    expect(refusal(() => limiter.hit('k', 0))).toBeUndefined();
    expect(refusal(() => limiter.hit('k', 0))?.status).toBe(429);
    limiter.release('k', 70_000); // window over: nothing to give back
    limiter.hit('k', 70_000);
    limiter.hit('k', 70_000);
    expect(refusal(() => limiter.hit('k', 70_000))?.status).toBe(429);
  });

  it('tells people the wait in whole minutes, and machines in seconds', () => {
    const limiter = new RateLimiter(1, 15 * 60_000);
    limiter.hit('k', 0);
    const long = refusal(() => limiter.hit('k', 3_000));
    expect(long?.message).toBe('Too many attempts; try again in 15 minutes.');
    expect(long?.headers['Retry-After']).toBe('897');
    expect(long?.details.retry_after).toBe(897);
    const short = refusal(() => limiter.hit('k', 15 * 60_000 - 30_000));
    expect(short?.message).toBe('Too many attempts; try again in 1 minute.');
  });

  it('reset clears the count', () => {
    const limiter = new RateLimiter(1, 60_000);
    limiter.hit('k', 0);
    limiter.reset('k');
    expect(refusal(() => limiter.hit('k', 0))).toBeUndefined();
  });
});
