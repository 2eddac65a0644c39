import { sql, type Kysely, type Migration } from 'kysely';
import type { Dialect } from '../dialect.js';

/**
 * Device metrics: raw samples (one row per device and sample time, the samples as compact JSON) kept for
 * a short window, and hourly roll-ups (count, sum, min, max per value) kept longer.
 */
export function migration(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<unknown>) {
      const bigint = dialect === 'postgres' ? 'bigint' : 'integer';
      await db.schema
        .createTable('metric_samples')
        .addColumn('device_id', 'text', (c) => c.notNull())
        .addColumn('ts', bigint, (c) => c.notNull())
        .addColumn('data', 'text', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('metric_samples_device_ts').on('metric_samples').columns(['device_id', 'ts']).execute();
      await db.schema.createIndex('metric_samples_ts').on('metric_samples').column('ts').execute();
      // The key leads with what the analysis reads (one value over a time range for many devices);
      // on SQLite the table is clustered on it (WITHOUT ROWID), so that read is one range scan.
      let rollups = db.schema
        .createTable('metric_rollups')
        .addColumn('label', 'text', (c) => c.notNull())
        .addColumn('field', 'text', (c) => c.notNull())
        .addColumn('bucket', bigint, (c) => c.notNull())
        .addColumn('device_id', 'text', (c) => c.notNull())
        .addColumn('mid', 'text', (c) => c.notNull())
        .addColumn('n', bigint, (c) => c.notNull())
        .addColumn('v_sum', 'double precision', (c) => c.notNull())
        .addColumn('v_min', 'double precision', (c) => c.notNull())
        .addColumn('v_max', 'double precision', (c) => c.notNull())
        .addPrimaryKeyConstraint('metric_rollups_pk', ['label', 'field', 'bucket', 'device_id', 'mid']);
      if (dialect === 'sqlite') rollups = rollups.modifyEnd(sql`without rowid`);
      await rollups.execute();
      await db.schema.createIndex('metric_rollups_device').on('metric_rollups').columns(['device_id', 'bucket']).execute();
      await db.schema.createIndex('metric_rollups_bucket').on('metric_rollups').column('bucket').execute();
    },
  };
}
