import { type Kysely, type Migration } from 'kysely';

/**
 * Keys of removed or rejected devices: refused at the agent channel and at enrolment.
 */
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('revoked_devices')
      .addColumn('device_id', 'text', (c) => c.primaryKey())
      .addColumn('reason', 'text', (c) => c.notNull())
      .addColumn('hostname', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('revoked_at', 'text', (c) => c.notNull())
      .execute();
  },
};
