import { type Kysely, type Migration } from 'kysely';

/**
 * SSH public keys users register for the SSH gateway (broker/ssh/keys.ts): the OpenSSH key line
 * without its comment, its SHA-256 fingerprint (unique: one key names one user), the comment apart.
 */
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('ssh_keys')
      .addColumn('id', 'text', (c) => c.primaryKey())
      .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
      .addColumn('public_key', 'text', (c) => c.notNull())
      .addColumn('fingerprint', 'text', (c) => c.notNull().unique())
      .addColumn('comment', 'text', (c) => c.notNull())
      .addColumn('created_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('ssh_keys_user').on('ssh_keys').column('user_id').execute();
  },
};
