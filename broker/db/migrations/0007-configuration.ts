import { type Kysely, type Migration } from 'kysely';
import type { Dialect } from '../dialect.js';

/**
 * Configuration management (qbee's changes and commits): changes staged per user until a commit
 * applies them; each entity's own bundles as last committed; per device, what it should run and
 * what its agent last applied.
 */
export function migration(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('config_changes')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('sha', 'text', (c) => c.notNull().unique())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('status', 'text', (c) => c.notNull())
        .addColumn('entity_type', 'text', (c) => c.notNull())
        .addColumn('entity_id', 'text', (c) => c.notNull())
        .addColumn('bundle', 'text', (c) => c.notNull())
        .addColumn('extend', 'integer', (c) => c.notNull())
        .addColumn('content', 'text', (c) => c.notNull())
        .addColumn('commit_sha', 'text')
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .addColumn('seq', dialect === 'postgres' ? 'bigint' : 'integer', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('config_changes_user').on('config_changes').columns(['user_id', 'status']).execute();
      await db.schema.createIndex('config_changes_commit').on('config_changes').column('commit_sha').execute();
      await db.schema
        .createTable('config_commits')
        .addColumn('sha', 'text', (c) => c.primaryKey())
        .addColumn('audit_id', dialect === 'postgres' ? 'bigint' : 'integer', (c) => c.notNull())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('message', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('config_entities')
        .addColumn('entity_type', 'text', (c) => c.notNull())
        .addColumn('entity_id', 'text', (c) => c.notNull())
        .addColumn('bundle', 'text', (c) => c.notNull())
        .addColumn('extend', 'integer', (c) => c.notNull())
        .addColumn('data', 'text', (c) => c.notNull())
        .addColumn('commit_sha', 'text', (c) => c.notNull())
        .addColumn('commit_created', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('config_entities_pk', ['entity_type', 'entity_id', 'bundle'])
        .execute();
      await db.schema
        .createTable('device_config')
        .addColumn('device_id', 'text', (c) => c.primaryKey())
        .addColumn('commit_sha', 'text')
        .addColumn('digest', 'text')
        .addColumn('device_commit_sha', 'text')
        .addColumn('applied_at', 'text')
        .execute();
    },
  };
}
