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
    let w = this.windows.get(key);
    if (!w || now - w.start >= this.windowMs) {
      w = { start: now, count: 0 };
      this.windows.set(key, w);
      if (this.windows.size > 100_000) this.sweep(now);
    }
    w.count += 1;
    if (w.count > this.limit) {
      const retry = Math.max(1, Math.ceil((w.start + this.windowMs - now) / 1000));
      throw new ApiError(429, 'rate_limited', `Too many attempts; try again in ${retry} s.`, { retry_after: retry }, { 'Retry-After': String(retry) });
    }
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
