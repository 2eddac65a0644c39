/**
 * Exponential backoff with full jitter: the n-th wait is uniform in [0, min(cap, base·2ⁿ)]. Spread
 * this way, a fleet whose broker restarts does not come back in one wave.
 */
export class Backoff {
  private attempt = 0;

  constructor(
    readonly baseMs = 1000,
    readonly capMs = 60_000,
    private readonly random: () => number = Math.random,
  ) {}

  /** The ceiling of the next wait (without jitter). */
  get ceiling(): number {
    return Math.min(this.capMs, this.baseMs * 2 ** Math.min(this.attempt, 30));
  }

  next(): number {
    const ceiling = this.ceiling;
    this.attempt += 1;
    return Math.floor(this.random() * ceiling);
  }

  /**
   * The wait when the broker said when to come back (`Retry-After` on a refused handshake): spread
   * over half to one and a half times its delay, whatever the refusals so far. A fleet refused in a
   * reconnect storm comes back when the broker expects to have room, not after a backoff grown to
   * its cap; the attempt count is left as it was.
   */
  after(retryAfterMs: number): number {
    const ms = Math.min(this.capMs, Math.max(0, retryAfterMs));
    return Math.floor(ms / 2 + this.random() * ms);
  }

  reset(): void {
    this.attempt = 0;
  }
}

/** `Retry-After` as milliseconds: delay-seconds or an HTTP date (RFC 9110 §10.2.3); undefined when absent or unreadable. */
export function retryAfterMs(header: string | string[] | undefined, now = Date.now()): number | undefined {
  const value = Array.isArray(header) ? header[0] : header;
  if (!value) return undefined;
  if (/^\d{1,9}$/.test(value.trim())) return Number(value.trim()) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, at - now);
}

/** Waits `ms`, or less when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });
}
