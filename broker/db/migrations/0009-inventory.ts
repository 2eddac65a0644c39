import { type Kysely, type Migration } from 'kysely';

/**
 * The typed inventory (software, containers, users, ports, …) per device and type, and the
 * installed packages one row each, so fleet search and CVE matching query by name.
 */
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('inventory_items')
      .addColumn('device_id', 'text', (c) => c.notNull())
      .addColumn('item_type', 'text', (c) => c.notNull())
      .addColumn('data', 'text', (c) => c.notNull())
      .addColumn('digest', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .addPrimaryKeyConstraint('inventory_items_pk', ['device_id', 'item_type'])
      .execute();
    await db.schema
      .createTable('inventory_packages')
      .addColumn('device_id', 'text', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('version', 'text', (c) => c.notNull())
      .addColumn('arch', 'text', (c) => c.notNull().defaultTo(''))
      .addColumn('pkg_manager', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('inventory_packages_name').on('inventory_packages').columns(['name', 'device_id']).execute();
    await db.schema.createIndex('inventory_packages_device').on('inventory_packages').column('device_id').execute();
  },
};
