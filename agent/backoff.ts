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

/** The cap of the waits while nothing listens at the broker's address (see Reconnect). */
export const DOWN_CAP_MS = 10_000;

/**
 * The waits of an agent's reconnect loop: two backoffs with full jitter, kept apart.
 * - **Down**: nothing listened (connection refused, or a proxy saying the broker behind it is away:
 *   502, 504, a 503 without Retry-After). Such an attempt costs the broker nothing, and a broker that
 *   is restarting listens again within seconds: these waits are capped at DOWN_CAP_MS, so an agent
 *   finds a restarted broker within seconds, and the fleet comes back spread over that cap, not in one wave.
 * - **Failed**: the broker answered and the attempt failed anyway (a lost connection, a timed-out or
 *   reset handshake, a refusal): these grow up to the full cap, and the broker's Retry-After guides them.
 * Neither counts the other's attempts: minutes of refusals while the broker was down do not make the
 * first timed-out handshake after it is back wait a minute. The broker answering again starts the
 * down count over; a welcome starts both over.
 */
export class Reconnect {
  private readonly down: Backoff;
  private readonly failed: Backoff;

  constructor(baseMs = 1000, capMs = 60_000, downCapMs = DOWN_CAP_MS, random: () => number = Math.random) {
    // Never below the first ceiling an operator chose, nor above the cap.
    this.down = new Backoff(baseMs, Math.min(capMs, Math.max(baseMs, downCapMs)), random);
    this.failed = new Backoff(baseMs, capMs, random);
  }

  /** The wait after an attempt that found nothing listening. */
  afterDown(): number {
    return this.down.next();
  }

  /** The wait after any other failure; `retryAfterMs` when the broker said when to come back. */
  afterFailure(retryAfterMs?: number): number {
    this.down.reset();
    return retryAfterMs !== undefined ? this.failed.after(retryAfterMs) : this.failed.next();
  }

  /** The broker let the agent in. */
  connected(): void {
    this.down.reset();
    this.failed.reset();
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
