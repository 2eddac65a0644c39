/**
 * When an agent refused at its handshake (the caps are full: 503) is told to come back. Each refused
 * agent is given the next free slot, one slot later than the agent refused before it, a slot being as
 * long as the broker took per handshake lately: a thousand agents refused at once are told to come
 * back over the seconds the broker needs to let a thousand in, not all at the same second (a fixed
 * Retry-After sent them back in one wave, to be refused again). The agent spreads its wait over half
 * to one and a half times what it is told (agent/backoff.ts).
 */

/** The earliest a refused agent is told to come back. */
const MIN_WAIT_MS = 1000;
/** The latest (the agent caps its wait at its own backoff cap too). */
export const MAX_RETRY_AFTER_S = 60;
/** Handshakes a second assumed at least, before the broker has finished any or when it finished few. */
export const FLOOR_PER_SECOND = 50;
/** The window over which finished handshakes are counted. */
const WINDOW_MS = 1000;

export class ReturnSchedule {
  /** When the next refused agent is told to come back (ms, on `now`'s clock). */
  private nextSlot = 0;
  private windowStart: number;
  private inWindow = 0;
  /** Handshakes finished a second in the last full window. */
  private lastRate = 0;

  constructor(
    private readonly floorPerSecond = FLOOR_PER_SECOND,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.windowStart = now();
  }

  /** A handshake finished (the agent let in, or refused after its check): the pace agents get in at. */
  finished(): void {
    this.roll(this.now());
    this.inWindow += 1;
  }

  /** What a refused agent is told: the seconds until its slot (Retry-After), from 1 to MAX_RETRY_AFTER_S. */
  retryAfterSeconds(): number {
    const now = this.now();
    this.roll(now);
    const rate = Math.max(this.floorPerSecond, this.lastRate);
    const slot = Math.max(this.nextSlot, now + MIN_WAIT_MS);
    // Past the latest an agent is told, the slots are not pushed further (they would never be used).
    this.nextSlot = Math.min(slot + 1000 / rate, now + MAX_RETRY_AFTER_S * 1000);
    return Math.min(MAX_RETRY_AFTER_S, Math.max(1, Math.round((slot - now) / 1000)));
  }

  private roll(now: number): void {
    const elapsed = now - this.windowStart;
    if (elapsed < WINDOW_MS) return;
    // A window with no handshake, or one long past, counts as none.
    this.lastRate = elapsed < 2 * WINDOW_MS ? (this.inWindow * 1000) / elapsed : 0;
    this.inWindow = 0;
    this.windowStart = now;
  }
}
