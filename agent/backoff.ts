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

  reset(): void {
    this.attempt = 0;
  }
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
