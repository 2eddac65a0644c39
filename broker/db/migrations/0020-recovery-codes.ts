import { type Kysely, type Migration } from 'kysely';

/**
 * Recovery codes of an authenticator app (broker/auth/recovery-codes.ts): single-use, kept
 * only as sha256 of the user and the code; spent ones keep their row with used_at set.
 */
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('recovery_codes')
      .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
      .addColumn('code_hash', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .addColumn('used_at', 'text')
      .addPrimaryKeyConstraint('recovery_codes_pk', ['user_id', 'code_hash'])
      .execute();
  },
};
