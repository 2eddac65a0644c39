import type { Database } from './schema.js';

/**
 * Which domain owns each table: SQL on a table (a query, a join, a raw fragment naming it) is written
 * only in its owner's folder under broker/; every other domain asks the owner through a function it
 * exports. Migrations (broker/db/migrations) are the exception: they shape every table and import no
 * domain. The unit test beside this file reads the sources and holds them to it.
 */
export const TABLE_OWNERS: Record<keyof Database, string> = {
  users: 'users',
  user_roles: 'users',
  roles: 'roles',
  sessions: 'auth',
  challenges: 'auth',
  recovery_codes: 'auth',
  password_tokens: 'auth',
  device_codes: 'auth',
  rate_limits: 'auth',
  settings: 'settings.ts',
  nodes: 'devices',
  devices: 'devices',
  inventory: 'inventory',
  inventory_items: 'inventory',
  inventory_packages: 'inventory',
  cve_advisories: 'cve',
  cve_affected: 'cve',
  cve_matches: 'cve',
  cve_status: 'cve',
  revoked_devices: 'enrol',
  bootstrap_keys: 'enrol',
  portmaps: 'remote',
  remote_tickets: 'remote',
  audit: 'audit',
  reports: 'reports',
  report_reads: 'reports',
  company: 'company',
  config_changes: 'config',
  config_commits: 'config',
  config_entities: 'config',
  device_config: 'config',
  metric_samples: 'metrics',
  metric_rollups: 'metrics',
  cluster_brokers: 'cluster',
  agent_presence: 'cluster',
  remote_session_owners: 'cluster',
  live_sessions: 'cluster',
  file_nodes: 'files',
  file_chunks: 'files',
  ssh_keys: 'ssh',
};
