import { type Kysely, type Migration } from 'kysely';

/**
 * A label to tell keys apart, and an optional expiry after which the key enrols nothing.
 */
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .alterTable('bootstrap_keys')
      .addColumn('label', 'text', (c) => c.notNull().defaultTo(''))
      .execute();
    await db.schema.alterTable('bootstrap_keys').addColumn('expires_at', 'text').execute();
  },
};
