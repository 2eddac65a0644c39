import type { Db } from './db/database.js';

/** Account-wide settings kept in the store (shared by every broker on the same database). */
export class SettingsStore {
  constructor(private readonly db: Db) {}

  async get<T>(key: string): Promise<T | undefined> {
    const row = await this.db.selectFrom('settings').select('value').where('key', '=', key).executeTakeFirst();
    return row ? (JSON.parse(row.value) as T) : undefined;
  }

  async set(key: string, value: unknown): Promise<void> {
    const json = JSON.stringify(value);
    await this.db
      .insertInto('settings')
      .values({ key, value: json })
      .onConflict((oc) => oc.column('key').doUpdateSet({ value: json }))
      .execute();
  }

  /** Returns the stored value, or stores and returns `make()` when absent (first writer wins). */
  async getOrCreate<T>(key: string, make: () => T): Promise<T> {
    const existing = await this.get<T>(key);
    if (existing !== undefined) return existing;
    await this.db
      .insertInto('settings')
      .values({ key, value: JSON.stringify(make()) })
      .onConflict((oc) => oc.column('key').doNothing())
      .execute();
    return (await this.get<T>(key)) as T;
  }
}
