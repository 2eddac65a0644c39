import { type Kysely, type Migration } from 'kysely';
import type { Dialect } from '../dialect.js';

/**
 * Several brokers on one database: which brokers are alive, which holds which agent, and
 * which broker holds each live remote session (so one broker's restart closes only its own).
 */
export function migration(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<unknown>) {
      const ms = dialect === 'postgres' ? 'bigint' : 'integer';
      await db.schema
        .createTable('cluster_brokers')
        .addColumn('broker_id', 'text', (c) => c.primaryKey())
        .addColumn('peer_url', 'text', (c) => c.notNull())
        .addColumn('started_at', 'text', (c) => c.notNull())
        .addColumn('heartbeat_at', ms, (c) => c.notNull())
        .execute();
      await db.schema
        .createTable('agent_presence')
        .addColumn('device_id', 'text', (c) => c.primaryKey())
        .addColumn('broker_id', 'text', (c) => c.notNull())
        .addColumn('connected_at', 'text', (c) => c.notNull())
        .addColumn('seen_at', ms, (c) => c.notNull())
        .execute();
      await db.schema.createIndex('agent_presence_broker').on('agent_presence').column('broker_id').execute();
      await db.schema
        .createTable('remote_session_owners')
        .addColumn('audit_id', ms, (c) => c.primaryKey())
        .addColumn('broker_id', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('remote_session_owners_broker').on('remote_session_owners').column('broker_id').execute();
    },
  };
}
