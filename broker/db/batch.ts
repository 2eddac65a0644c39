/**
 * Small writes of many connections at once, committed together: those queued during one turn of the
 * event loop (at most BATCH_MAX) run one after the other in one transaction when the turn ends. A
 * reconnect storm brings thousands of agents' connect-time writes (last contact, the "Agent
 * connected" event); a commit each cost more than the write itself (SQLite writes the pages a commit
 * touched to its log, PostgreSQL flushes its log at every commit). A queued write waits no timer:
 * only for the connections served in the same turn.
 *
 * A batch that fails (one write refused) is rolled back and its writes run again one at a time, each
 * on its own, so a failing write fails alone and the others are kept. A write may thus run twice: the
 * writes queued here are ones that may (they set a value, or record an event once more at worst).
 */
import type { Store } from './database.js';

/** Writes one transaction holds at most (what it holds up other queries stays short). */
export const BATCH_MAX = 256;

/** What a domain queues its writes through. */
export interface WriteQueue {
  /** Runs `write` with the other writes queued in this turn, in one transaction; resolves or rejects as it did. */
  run<T>(write: () => Promise<T>): Promise<T>;
}

/** Each write at once, on its own: for a domain given no batch. */
export const immediateWrites: WriteQueue = { run: (write) => write() };

interface Queued {
  write: () => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (err: unknown) => void;
}

export class WriteBatch implements WriteQueue {
  private queue: Queued[] = [];
  private scheduled = false;

  constructor(
    private readonly store: Pick<Store, 'transaction' | 'inTransaction'>,
    private readonly max = BATCH_MAX,
  ) {}

  run<T>(write: () => Promise<T>): Promise<T> {
    // Inside a transaction already: joined at once (a queued write would wait for the connection that transaction holds).
    if (this.store.inTransaction()) return write();
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ write, resolve: resolve as (value: unknown) => void, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      void this.flush();
    });
  }

  private async flush(): Promise<void> {
    const batch = this.queue.splice(0, this.max);
    if (this.queue.length > 0) this.schedule();
    if (batch.length === 0) return;
    if (batch.length > 1) {
      let results: unknown[] | undefined;
      try {
        results = await this.store.transaction(async () => {
          const out: unknown[] = [];
          for (const q of batch) out.push(await q.write());
          return out;
        });
      } catch {
        // One write was refused: the batch rolled back; each is run again on its own below.
      }
      if (results) {
        batch.forEach((q, i) => q.resolve(results[i]));
        return;
      }
    }
    for (const q of batch) await q.write().then(q.resolve, q.reject);
  }
}
