import type { Logger } from 'pino';
import type { Db } from './database.js';

/** How often expired shared state is deleted. */
export const EXPIRY_SWEEP_MS = 60_000;

/**
 * Deletes what has expired from the state brokers share in the database: rate-limit windows,
 * remote-access tickets and device-code sign-ins. Readers never trust an expired row (each checks
 * `expires_at`), so the sweep only bounds the tables: they hold at most what a minute adds beyond
 * the rows still valid. Every broker sweeps; the deletes are idempotent.
 */
export class ExpirySweep {
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;

  constructor(
    private readonly db: Db,
    private readonly logger: Pick<Logger, 'warn'>,
    private readonly intervalMs = EXPIRY_SWEEP_MS,
  ) {}

  start(): void {
    this.timer = setInterval(() => {
      this.running ??= this.sweep()
        .then(() => undefined)
        .catch((err) => this.logger.warn({ err }, 'expired shared state not deleted'))
        .finally(() => (this.running = undefined));
    }, this.intervalMs);
    this.timer.unref();
  }

  /** One pass; answers how many rows went. */
  async sweep(now = Date.now()): Promise<number> {
    let gone = 0;
    for (const table of ['rate_limits', 'remote_tickets', 'device_codes'] as const) {
      const r = await this.db.deleteFrom(table).where('expires_at', '<=', now).executeTakeFirst();
      gone += Number(r.numDeletedRows);
    }
    return gone;
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.running;
  }
}
