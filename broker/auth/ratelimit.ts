import { ApiError } from '../http/errors.js';

/**
 * A fixed-window counter per key (account, address). In memory: with several brokers each keeps
 * its own count, which bounds guessing per broker; the shared-store version comes with that issue.
 */
export class RateLimiter {
  private readonly windows = new Map<string, { start: number; count: number }>();

  constructor(
    private readonly limit: number,
    private readonly windowMs: number,
  ) {}

  /** Counts one attempt; throws 429 with Retry-After once the key is over its limit. */
  hit(key: string, now = Date.now()): void {
    const retry = this.count(key, now);
    if (retry > 0) throw rateLimited(retry);
  }

  /** Counts one attempt; answers the seconds until the window ends once the key is over its limit, else 0. */
  count(key: string, now = Date.now()): number {
    let w = this.windows.get(key);
    if (!w || now - w.start >= this.windowMs) {
      w = { start: now, count: 0 };
      this.windows.set(key, w);
      if (this.windows.size > 100_000) this.sweep(now);
    }
    w.count += 1;
    return w.count > this.limit ? Math.max(1, Math.ceil((w.start + this.windowMs - now) / 1000)) : 0;
  }

  /**
   * Gives back one attempt counted by `hit` (a successful sign-in does not use up the address's
   * budget). Counting first and giving back afterwards keeps parallel attempts within the limit.
   */
  release(key: string, now = Date.now()): void {
    const w = this.windows.get(key);
    if (w && now - w.start < this.windowMs && w.count > 0) w.count -= 1;
  }

  reset(key: string): void {
    this.windows.delete(key);
  }

  private sweep(now: number): void {
    for (const [k, w] of this.windows) if (now - w.start >= this.windowMs) this.windows.delete(k);
  }
}

/** 429 with Retry-After in seconds (header and `retry_after`) and the wait in minutes for people. */
export function rateLimited(retryAfterSeconds: number): ApiError {
  const minutes = Math.max(1, Math.ceil(retryAfterSeconds / 60));
  return new ApiError(
    429,
    'rate_limited',
    `Too many attempts; try again in ${minutes} minute${minutes === 1 ? '' : 's'}.`,
    { retry_after: retryAfterSeconds },
    { 'Retry-After': String(retryAfterSeconds) },
  );
}
