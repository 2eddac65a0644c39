import { sql, type Kysely, type Migration } from 'kysely';
import type { Dialect } from '../dialect.js';

/**
 * State every broker on one database must see (several brokers): fixed-window rate
 * limits, single-use remote-access tickets, device-code sign-ins waiting for approval, and the
 * database-backed file store (FILE_STORE=db). Instants are Unix milliseconds.
 */
export function migration(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<unknown>) {
      const ms = dialect === 'postgres' ? 'bigint' : 'integer';
      // Short-lived state on PostgreSQL is UNLOGGED: no write-ahead log, so its commits wait for no
      // disk flush (a sign-in makes six such writes). A database crash or a fail-over to a replica
      // empties these tables: counts start afresh, open tickets and device codes must be asked again.
      const shortLived = (name: string) => {
        const table = db.schema.createTable(name);
        return dialect === 'postgres' ? table.modifyFront(sql`unlogged`) : table;
      };
      await shortLived('rate_limits')
        .addColumn('key', 'text', (c) => c.primaryKey())
        .addColumn('window_start', ms, (c) => c.notNull())
        .addColumn('count', 'integer', (c) => c.notNull())
        .addColumn('expires_at', ms, (c) => c.notNull())
        .execute();
      await db.schema.createIndex('rate_limits_expiry').on('rate_limits').column('expires_at').execute();
      await shortLived('remote_tickets')
        .addColumn('ticket_hash', 'text', (c) => c.primaryKey())
        .addColumn('token', 'text', (c) => c.notNull())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('issued_at', ms, (c) => c.notNull())
        .addColumn('expires_at', ms, (c) => c.notNull())
        .execute();
      await db.schema.createIndex('remote_tickets_user').on('remote_tickets').columns(['user_id', 'issued_at']).execute();
      await db.schema.createIndex('remote_tickets_expiry').on('remote_tickets').column('expires_at').execute();
      await shortLived('device_codes')
        .addColumn('device_code_hash', 'text', (c) => c.primaryKey())
        .addColumn('user_code', 'text', (c) => c.notNull().unique())
        .addColumn('client_ip', 'text', (c) => c.notNull())
        .addColumn('user_agent', 'text', (c) => c.notNull())
        .addColumn('expires_at', ms, (c) => c.notNull())
        .addColumn('decision', 'text')
        .addColumn('user_id', 'text')
        .execute();
      await db.schema.createIndex('device_codes_ip').on('device_codes').column('client_ip').execute();
      await db.schema.createIndex('device_codes_expiry').on('device_codes').column('expires_at').execute();
      await db.schema
        .createTable('file_nodes')
        .addColumn('path', 'text', (c) => c.primaryKey())
        .addColumn('parent', 'text', (c) => c.notNull())
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('is_dir', 'integer', (c) => c.notNull())
        .addColumn('size', ms, (c) => c.notNull())
        .addColumn('sha256', 'text')
        .addColumn('blob_id', 'text')
        .addColumn('mtime', 'text', (c) => c.notNull())
        .addColumn('created', ms, (c) => c.notNull())
        .execute();
      await db.schema.createIndex('file_nodes_parent').on('file_nodes').column('parent').execute();
      await db.schema
        .createTable('file_chunks')
        .addColumn('blob_id', 'text', (c) => c.notNull())
        .addColumn('seq', 'integer', (c) => c.notNull())
        .addColumn('data', dialect === 'postgres' ? 'bytea' : 'blob', (c) => c.notNull())
        .addPrimaryKeyConstraint('file_chunks_pk', ['blob_id', 'seq'])
        .execute();
    },
  };
}
