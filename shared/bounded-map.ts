/**
 * A Map that holds at most `max` keys: adding a new key when full first drops the oldest, by the
 * order keys were added (a Map iterates in that order). Setting a key already held replaces its value
 * and drops nothing. `touch` moves a key to the newest end, for a least-recently-used order where a
 * cache wants one.
 *
 * The broker's caches and per-address tables keyed by what a peer sends (a query's text, an
 * address, a file's identity, SQL text) are bounded this way, so no flood of new keys grows them.
 */
export class BoundedMap<K, V> extends Map<K, V> {
  constructor(readonly max: number) {
    super();
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`a BoundedMap holds at least one key (max ${max})`);
  }

  override set(key: K, value: V): this {
    if (this.size >= this.max && !this.has(key)) {
      const oldest = this.keys().next();
      if (!oldest.done) this.delete(oldest.value);
    }
    return super.set(key, value);
  }

  /** The key's value, moved to the newest end (dropped last); undefined if not held. */
  touch(key: K): V | undefined {
    const value = this.get(key);
    if (value === undefined && !this.has(key)) return undefined;
    this.delete(key);
    super.set(key, value as V);
    return value;
  }
}
