import crypto from 'node:crypto';
import { type Kysely, type Migration } from 'kysely';
import type { Dialect } from '../dialect.js';

/**
 * Agent reports (the Logs) with who has read which; the installation's one company record.
 */
export function migration(dialect: Dialect): Migration {
  const autoId = dialect === 'postgres' ? 'bigserial' : 'integer';
  return {
    async up(db: Kysely<unknown>) {
      await db.schema
        .createTable('reports')
        .addColumn('id', autoId, (c) => (dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement()))
        .addColumn('device_id', 'text', (c) => c.notNull())
        .addColumn('ts', dialect === 'postgres' ? 'bigint' : 'integer', (c) => c.notNull())
        .addColumn('received_at', 'text', (c) => c.notNull())
        .addColumn('sev', 'text', (c) => c.notNull())
        .addColumn('level', 'integer', (c) => c.notNull())
        .addColumn('bundle', 'text', (c) => c.notNull())
        .addColumn('bundle_commit_id', 'text', (c) => c.notNull())
        .addColumn('commit_id', 'text', (c) => c.notNull())
        .addColumn('labels', 'text', (c) => c.notNull())
        .addColumn('text', 'text', (c) => c.notNull())
        .addColumn('log', 'text')
        .execute();
      await db.schema.createIndex('reports_device').on('reports').columns(['device_id', 'id']).execute();
      await db.schema.createIndex('reports_received').on('reports').column('received_at').execute();
      await db.schema
        .createTable('report_reads')
        .addColumn('report_id', dialect === 'postgres' ? 'bigint' : 'integer', (c) => c.notNull().references('reports.id').onDelete('cascade'))
        .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
        .addColumn('read_at', 'text', (c) => c.notNull())
        .addPrimaryKeyConstraint('report_reads_pk', ['user_id', 'report_id'])
        .execute();
      await db.schema.createIndex('report_reads_report').on('report_reads').column('report_id').execute();
      await db.schema
        .createTable('company')
        .addColumn('id', 'text', (c) => c.primaryKey())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('address', 'text', (c) => c.notNull())
        .addColumn('zip', 'text', (c) => c.notNull())
        .addColumn('city', 'text', (c) => c.notNull())
        .addColumn('country', 'text', (c) => c.notNull())
        .addColumn('vat_number', 'text', (c) => c.notNull())
        .addColumn('contact_name', 'text', (c) => c.notNull())
        .addColumn('contact_email', 'text', (c) => c.notNull())
        .addColumn('contact_phone', 'text', (c) => c.notNull())
        .addColumn('agent_interval', 'integer', (c) => c.notNull())
        .addColumn('created_at', 'text', (c) => c.notNull())
        .addColumn('updated_at', 'text', (c) => c.notNull())
        .execute();
      // One company per installation, with a stable id made here once.
      const now = new Date().toISOString();
      await (db as unknown as Kysely<{ company: Record<string, unknown> }>)
        .insertInto('company')
        .values({
          id: crypto.randomUUID(),
          name: '',
          address: '',
          zip: '',
          city: '',
          country: '',
          vat_number: '',
          contact_name: '',
          contact_email: '',
          contact_phone: '',
          agent_interval: 5,
          created_at: now,
          updated_at: now,
        })
        .execute();
    },
  };
}
