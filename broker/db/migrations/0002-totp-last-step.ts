import { type Kysely, type Migration } from 'kysely';

/**
 * The time step of the last accepted authenticator code: a code is never accepted twice.
 */
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema.alterTable('users').addColumn('totp_last_step', 'integer').execute();
  },
};
