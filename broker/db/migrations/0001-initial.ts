import { sql, type Kysely, type Migration } from 'kysely';
import type { Dialect } from '../dialect.js';

/** The first schema: accounts, roles, sign-in sessions and challenges, settings, the group tree, devices and their enrolment keys, port maps and the audit log. */
export function migration(dialect: Dialect): Migration {
  const autoId = dialect === 'postgres' ? 'bigserial' : 'integer';
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('users')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('email', 'text', (c) => c.notNull().unique())
        .addColumn('fname', 'text', (c) => c.notNull())
        .addColumn('lname', 'text', (c) => c.notNull())
        .addColumn('password_hash', 'text')
        .addColumn('disabled', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('two_factor', 'integer')
        .addColumn('totp_secret', 'text')
        .addColumn('totp_pending', 'text')
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('last_login', 'text')
        .execute();
      await db.schema
        .createTable('roles')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('name', 'text', (c) => c.notNull().unique())
        .addColumn('description', 'text', (c) => c.notNull().defaultTo(''))
        .addColumn('policies', 'text', (c) => c.notNull())
        .addColumn('builtin', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('created_by', 'text')
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .addColumn('updated_by', 'text')
        .execute();
      await db.schema
        .createTable('user_roles')
        .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
        .addColumn('role_id', 'text', (c) => c.notNull().references('roles.id'))
        .addPrimaryKeyConstraint('user_roles_pk', ['user_id', 'role_id'])
        .execute();
      await db.schema.createIndex('user_roles_role').on('user_roles').column('role_id').execute();
      await db.schema
        .createTable('sessions')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
        .addColumn('refresh_hash', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('expires_at', 'text', (c) => c.notNull())
        .addColumn('revoked_at', 'text')
        .addColumn('ip', 'text')
        .addColumn('user_agent', 'text')
        .execute();
      await db.schema.createIndex('sessions_user').on('sessions').column('user_id').execute();
      await db.schema
        .createTable('challenges')
        .addColumn('id_hash', 'text', (c) => c.primaryKey())
        .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
        .addColumn('stage', 'text', (c) => c.notNull())
        .addColumn('provider', 'text')
        .addColumn('code_hash', 'text')
        .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('expires_at', 'text', (c) => c.notNull())
        .addColumn('used_at', 'text')
        .execute();
      await db.schema
        .createTable('password_tokens')
        .addColumn('token_hash', 'text', (c) => c.primaryKey())
        .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
        .addColumn('purpose', 'text', (c) => c.notNull())
        .addColumn('expires_at', 'text', (c) => c.notNull())
        .addColumn('used_at', 'text')
        .execute();
      await db.schema
        .createTable('settings')
        .addColumn('key', 'text', (c) => c.primaryKey())
        .addColumn('value', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('nodes')
        .addColumn('node_id', 'text', (c) => c.primaryKey())
        .addColumn('parent_id', 'text')
        .addColumn('type', 'text', (c) => c.notNull())
        .addColumn('title', 'text', (c) => c.notNull())
        .addColumn('tags', 'text', (c) => c.notNull().defaultTo('[]'))
        .addColumn('created_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('nodes_parent').on('nodes').column('parent_id').execute();
      await db.schema
        .createTable('devices')
        .addColumn('device_id', 'text', (c) => c.primaryKey())
        .addColumn('public_key', 'text', (c) => c.notNull())
        .addColumn('state', 'text', (c) => c.notNull())
        .addColumn('hostname', 'text', (c) => c.notNull().defaultTo(''))
        .addColumn('bootstrap_key', 'text')
        .addColumn('attributes', 'text', (c) => c.notNull().defaultTo('{}'))
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('approved_at', 'text')
        .addColumn('last_seen', 'text')
        .addColumn('last_ip', 'text')
        .addColumn('agent_version', 'text')
        .execute();
      await db.schema
        .createTable('inventory')
        .addColumn('device_id', 'text', (c) => c.primaryKey())
        .addColumn('data', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('bootstrap_keys')
        .addColumn('key_hash', 'text', (c) => c.primaryKey())
        .addColumn('key_id', 'text', (c) => c.notNull().unique())
        .addColumn('key_secret', 'text', (c) => c.notNull())
        .addColumn('group_id', 'text', (c) => c.notNull())
        .addColumn('auto_accept', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('created_by', 'text')
        .execute();
      await db.schema
        .createTable('portmaps')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('target', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('proto', 'text', (c) => c.notNull())
        .addColumn('port', 'integer', (c) => c.notNull())
        .addColumn('dst', 'text', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('created_by', 'text')
        .execute();
      await db.schema
        .createTable('audit')
        .addColumn('id', autoId, (c) => (dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn('ts', 'text', (c) => c.notNull())
        .addColumn('event', 'text', (c) => c.notNull())
        .addColumn('user_id', 'text')
        .addColumn('user_email', 'text')
        .addColumn('device_id', 'text')
        .addColumn('action', 'text', (c) => c.notNull())
        .addColumn('options', 'text', (c) => c.notNull().defaultTo('{}'))
        .addColumn('result', 'text', (c) => c.notNull())
        .addColumn('reason', 'text')
        .addColumn('source_ip', 'text')
        .addColumn('source', 'text')
        .addColumn('session_id', 'text')
        .addColumn('ended_at', 'text')
        .addColumn('duration_ms', 'integer')
        .addColumn('bytes_in', dialect === 'postgres' ? 'bigint' : 'integer')
        .addColumn('bytes_out', dialect === 'postgres' ? 'bigint' : 'integer')
        .execute();
      await db.schema.createIndex('audit_ts').on('audit').column('ts').execute();
      await db.schema.createIndex('audit_device').on('audit').columns(['device_id', 'ts']).execute();
      await db.schema.createIndex('audit_user').on('audit').columns(['user_id', 'ts']).execute();
      void sql;
    },
  };
}
