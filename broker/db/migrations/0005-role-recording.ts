import { type Kysely, type Migration } from 'kysely';

/**
 * Whether consoles a role grants are recorded: 'default' (recorded), 'off' or 'required'.
 */
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .alterTable('roles')
      .addColumn('recording', 'text', (c) => c.notNull().defaultTo('default'))
      .execute();
  },
};
