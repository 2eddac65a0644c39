import { type Kysely, type Migration } from 'kysely';

/**
 * Vulnerability feed (OSV advisories an operator imports), what they affect, the matches
 * against installed packages (recomputed on import and when a device's packages change) and
 * the operator's decisions per CVE.
 */
export const migration: Migration = {
  async up(db: Kysely<unknown>) {
    await db.schema
      .createTable('cve_advisories')
      .addColumn('advisory_id', 'text', (c) => c.primaryKey())
      .addColumn('cve_ids', 'text', (c) => c.notNull())
      .addColumn('summary', 'text', (c) => c.notNull())
      .addColumn('score', 'double precision')
      .addColumn('severity', 'text', (c) => c.notNull())
      .addColumn('published', 'text')
      .addColumn('modified', 'text')
      .addColumn('imported_at', 'text', (c) => c.notNull())
      .execute();
    await db.schema
      .createTable('cve_affected')
      .addColumn('advisory_id', 'text', (c) => c.notNull())
      .addColumn('ecosystem', 'text', (c) => c.notNull())
      .addColumn('name', 'text', (c) => c.notNull())
      .addColumn('data', 'text', (c) => c.notNull())
      .execute();
    await db.schema.createIndex('cve_affected_advisory').on('cve_affected').column('advisory_id').execute();
    await db.schema
      .createTable('cve_matches')
      .addColumn('device_id', 'text', (c) => c.notNull())
      .addColumn('cve_id', 'text', (c) => c.notNull())
      .addColumn('advisory_id', 'text', (c) => c.notNull())
      .addColumn('package', 'text', (c) => c.notNull())
      .addColumn('version', 'text', (c) => c.notNull())
      .addColumn('fixed_version', 'text')
      .execute();
    await db.schema.createIndex('cve_matches_cve').on('cve_matches').columns(['cve_id', 'device_id']).execute();
    await db.schema.createIndex('cve_matches_device').on('cve_matches').column('device_id').execute();
    // The source package of an installed one (dpkg's `Source:`), which Debian and Ubuntu advisories name.
    await db.schema.alterTable('inventory_packages').addColumn('source', 'text').execute();
    await db.schema
      .createTable('cve_status')
      .addColumn('cve_id', 'text', (c) => c.primaryKey())
      .addColumn('status', 'text', (c) => c.notNull())
      .addColumn('reason', 'text', (c) => c.notNull())
      .addColumn('user_id', 'text', (c) => c.notNull())
      .addColumn('updated_at', 'text', (c) => c.notNull())
      .execute();
  },
};
