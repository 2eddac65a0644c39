/**
 * Short-lived read caches for the hot path of every call (who is this token, where is this device).
 *
 * Every change made through this broker's API bumps the epoch, which empties every cache at once, so
 * on one broker a revocation, a role change or a move in the tree applies to the very next call.
 * With several brokers on one database (broker/cluster), a bump is announced to the others, whose
 * caches are emptied too (`invalidate`). An entry also expires after `ttlMs`: that bounds how long a
 * broker may answer from what it read before when an announcement is lost (1 s by default).
 */
export class ChangeEpoch {
  private current = 0;
  private readonly listeners: Array<() => void> = [];

  get value(): number {
    return this.current;
  }

  /** A change made here: empties this broker's caches and tells whoever listens (the cluster). */
  bump(): void {
    this.current += 1;
    for (const listener of this.listeners) listener();
  }

  /** A change made elsewhere (another broker): empties the caches without announcing it again. */
  invalidate(): void {
    this.current += 1;
  }

  /** Called after every local bump (the cluster announces it to the other brokers). */
  onBump(listener: () => void): void {
    this.listeners.push(listener);
  }
}

export class EpochCache<K, V> {
  private readonly entries = new Map<K, { value: V; epoch: number; at: number }>();

  constructor(
    private readonly epoch: ChangeEpoch,
    private readonly ttlMs = 1000,
    private readonly maxEntries = 10_000,
  ) {}

  get(key: K): V | undefined {
    const entry = this.entries.get(key);
    if (!entry) return undefined;
    if (entry.epoch !== this.epoch.value || Date.now() - entry.at > this.ttlMs) {
      this.entries.delete(key);
      return undefined;
    }
    return entry.value;
  }

  set(key: K, value: V): void {
    if (this.entries.size >= this.maxEntries) this.entries.clear();
    this.entries.set(key, { value, epoch: this.epoch.value, at: Date.now() });
  }
}
