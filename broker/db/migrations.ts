import crypto from 'node:crypto';
import { sql, type Kysely, type Migration } from 'kysely';
import { entrySha } from '../audit/chain.js';
import { REPORT_FUTURE_SKEW_S } from '../reports/validate.js';
import { explicitConfigurationReach } from './config-reach.js';
import type { Dialect } from './database.js';

/**
 * Migrations, in order. Each is written once and never edited after it has landed: a later
 * change to the schema is a new entry.
 */
export function migrations(dialect: Dialect): Record<string, Migration> {
  const autoId = dialect === 'postgres' ? 'bigserial' : 'integer';
  return {
    '0001_initial': {
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
    },
    '0002_totp_last_step': {
      // The time step of the last accepted authenticator code: a code is never accepted twice.
      async up(db: Kysely<unknown>) {
        await db.schema.alterTable('users').addColumn('totp_last_step', 'integer').execute();
      },
    },
    '0003_revoked_devices': {
      // Keys of removed or rejected devices: refused at the agent channel and at enrolment.
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('revoked_devices')
          .addColumn('device_id', 'text', (c) => c.primaryKey())
          .addColumn('reason', 'text', (c) => c.notNull())
          .addColumn('hostname', 'text', (c) => c.notNull().defaultTo(''))
          .addColumn('revoked_at', 'text', (c) => c.notNull())
          .execute();
      },
    },
    '0004_audit_chain': {
      // Each entry chained to the one before it by sha (tamper evidence); a remote session's end is an
      // entry of its own pointing at its start (ref_id), so no entry is ever updated. Existing rows are
      // chained in id order as they stand.
      async up(db: Kysely<unknown>) {
        await db.schema.alterTable('audit').addColumn('sha', 'text').execute();
        await db.schema
          .alterTable('audit')
          .addColumn('ref_id', dialect === 'postgres' ? 'bigint' : 'integer')
          .execute();
        await db.schema.createIndex('audit_ref').on('audit').column('ref_id').execute();
        const audit = db as unknown as Kysely<{ audit: { id: number; sha: string | null } }>;
        let previous = '';
        let after = -1;
        for (;;) {
          const rows = await audit.selectFrom('audit').selectAll().where('id', '>', after).orderBy('id').limit(500).execute();
          if (rows.length === 0) break;
          for (const row of rows) {
            previous = entrySha(previous, { ...row, ref_id: null });
            await audit.updateTable('audit').set({ sha: previous }).where('id', '=', row.id).execute();
            after = Number(row.id);
          }
        }
      },
    },
    '0005_role_recording': {
      // Whether consoles a role grants are recorded: 'default' (recorded), 'off' or 'required'.
      async up(db: Kysely<unknown>) {
        await db.schema
          .alterTable('roles')
          .addColumn('recording', 'text', (c) => c.notNull().defaultTo('default'))
          .execute();
      },
    },
    '0008_reports_company': {
      // Agent reports (the Logs) with who has read which; the installation's one company record.
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
    },
    '0009_inventory': {
      // The typed inventory (software, containers, users, ports, …) per device and type, and the
      // installed packages one row each, so fleet search and CVE matching query by name.
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
    },
    '0007_configuration': {
      // Configuration management (qbee's changes and commits): changes staged per user until a commit
      // applies them; each entity's own bundles as last committed; per device, what it should run and
      // what its agent last applied.
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
    },
    '0006_bootstrap_key_label': {
      // A label to tell keys apart, and an optional expiry after which the key enrols nothing.
      async up(db: Kysely<unknown>) {
        await db.schema
          .alterTable('bootstrap_keys')
          .addColumn('label', 'text', (c) => c.notNull().defaultTo(''))
          .execute();
        await db.schema.alterTable('bootstrap_keys').addColumn('expires_at', 'text').execute();
      },
    },
    '0010_metrics': {
      // Device metrics: raw samples (one row per device and sample time, the samples as compact JSON) kept for
      // a short window, and hourly roll-ups (count, sum, min, max per value) kept longer.
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
    },
    '0011_cluster': {
      // Several brokers on one database: which brokers are alive, which holds which agent, and
      // which broker holds each live remote session (so one broker's restart closes only its own).
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
    },
    '0014_shared_state': {
      // State every broker on one database must see (several brokers): fixed-window rate
      // limits, single-use remote-access tickets, device-code sign-ins waiting for approval, and the
      // database-backed file store (FILE_STORE=db). Instants are Unix milliseconds.
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
    },
    '0018_report_ts_bound': {
      // Report times are bounded by the broker clock from now on (broker/reports/validate.ts); a report
      // stored before with a time in the future (a device's clock, or a device pinning last_ts in the
      // year 5138) is brought down to the same bound: the time of this migration plus the skew.
      async up(db: Kysely<unknown>) {
        const bound = Math.floor(Date.now() / 1000) + REPORT_FUTURE_SKEW_S;
        await sql`update reports set ts = ${bound} where ts > ${bound}`.execute(db);
      },
    },
    '0019_device_code_claims': {
      // A pending device-code sign-in belongs to the signed-in user who first enters its code: from
      // then on only they can look it up, approve or decline it (broker/auth/device-auth.ts).
      async up(db: Kysely<unknown>) {
        await db.schema.alterTable('device_codes').addColumn('claimed_by', 'text').execute();
      },
    },
    '0013_cve': {
      // Vulnerability feed (OSV advisories an operator imports), what they affect, the matches
      // against installed packages (recomputed on import and when a device's packages change) and
      // the operator's decisions per CVE.
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
    },
    '0016_cluster_sessions': {
      // The live remote sessions of every broker (several brokers): one row per session,
      // written by the broker holding it at its start, refreshed (bytes, attached, watchers) every
      // cluster heartbeat and removed at its end, so GET /remote/sessions on any broker lists them
      // all. Rows of a broker that is gone are removed by the survivor that notices. Instants are
      // Unix milliseconds. UNLOGGED on PostgreSQL: nothing in it outlives the sessions.
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
    },
    '0017_configuration_reach': {
      // configuration:read and configuration:manage take resources of their own; they used to reach
      // what the holder's device:read reached. Existing roles keep no more than their holders reached
      // (see config-reach.ts). A role's updated_at moves, so sign-in reads its policies afresh.
      async up(db: Kysely<unknown>) {
        const q = db as unknown as Kysely<{
          roles: { id: string; policies: string; builtin: number; updated_at: string };
          user_roles: { user_id: string; role_id: string };
        }>;
        const roles = await q.selectFrom('roles').select(['id', 'policies', 'builtin']).execute();
        const holders = new Map<string, string[]>();
        for (const row of await q.selectFrom('user_roles').select(['user_id', 'role_id']).execute())
          holders.set(row.user_id, [...(holders.get(row.user_id) ?? []), row.role_id]);
        const changed = explicitConfigurationReach(
          roles.map((r) => ({
            id: r.id,
            builtin: Number(r.builtin) === 1,
            policies: JSON.parse(r.policies) as { permission: string; resources?: string[] }[],
          })),
          holders,
        );
        const now = new Date().toISOString();
        for (const [id, policies] of changed)
          await q
            .updateTable('roles')
            .set({ policies: JSON.stringify(policies), updated_at: now })
            .where('id', '=', id)
            .execute();
      },
    },
    '0020_recovery_codes': {
      // Recovery codes of an authenticator app (broker/auth/recovery-codes.ts): single-use, kept
      // only as sha256 of the user and the code; spent ones keep their row with used_at set.
      async up(db: Kysely<unknown>) {
        await db.schema
          .createTable('recovery_codes')
          .addColumn('user_id', 'text', (c) => c.notNull().references('users.id').onDelete('cascade'))
          .addColumn('code_hash', 'text', (c) => c.notNull())
          .addColumn('created_at', 'text', (c) => c.notNull())
          .addColumn('used_at', 'text')
          .addPrimaryKeyConstraint('recovery_codes_pk', ['user_id', 'code_hash'])
          .execute();
      },
    },
  };
}
