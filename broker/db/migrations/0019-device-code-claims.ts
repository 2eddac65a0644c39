import { type Kysely, type Migration } from 'kysely';

/**
 * A pending device-code sign-in belongs to the signed-in user who first enters its code: from
 * then on only they can look it up, approve or decline it (broker/auth/device-auth.ts).
 */
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('device_codes').addColumn('claimed_by', 'text').execute();
  },
};
