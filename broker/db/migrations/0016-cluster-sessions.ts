import { sql, type Kysely, type Migration } from 'kysely';
import type { Dialect } from '../dialect.js';

/**
 * The live remote sessions of every broker (several brokers): one row per session,
 * written by the broker holding it at its start, refreshed (bytes, attached, watchers) every
 * cluster heartbeat and removed at its end, so GET /remote/sessions on any broker lists them
 * all. Rows of a broker that is gone are removed by the survivor that notices. Instants are
 * Unix milliseconds. UNLOGGED on PostgreSQL: nothing in it outlives the sessions.
 */
export function migration(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<unknown>) {
      const ms = dialect === 'postgres' ? 'bigint' : 'integer';
      const table = db.schema.createTable('live_sessions');
      await (dialect === 'postgres' ? table.modifyFront(sql`unlogged`) : table)
        .addColumn('session_id', 'text', (c) => c.primaryKey())
        .addColumn('broker_id', 'text', (c) => c.notNull())
        .addColumn('user_id', 'text', (c) => c.notNull())
        .addColumn('user_email', 'text', (c) => c.notNull())
        .addColumn('device_id', 'text', (c) => c.notNull())
        .addColumn('kind', 'text', (c) => c.notNull())
        .addColumn('source', 'text', (c) => c.notNull())
        .addColumn('ip', 'text', (c) => c.notNull())
        .addColumn('started_at', ms, (c) => c.notNull())
        .addColumn('bytes_in', ms, (c) => c.notNull())
        .addColumn('bytes_out', ms, (c) => c.notNull())
        .addColumn('attached', 'integer')
        .addColumn('watchers', 'text', (c) => c.notNull())
        .addColumn('request', 'text', (c) => c.notNull())
        .addColumn('updated_at', ms, (c) => c.notNull())
        .execute();
      await db.schema.createIndex('live_sessions_broker').on('live_sessions').column('broker_id').execute();
    },
  };
}
