// Stays whole: the one place the database's shape is declared (Kysely's Database type, a row type per table), read together and changed with each migration.
import type { Generated } from 'kysely';
import type { AuditEntry } from '../../shared/api-types.js';

/**
 * The store's tables. Portable between SQLite and PostgreSQL: timestamps are ISO-8601 text
 * (sortable), booleans are 0/1 integers, structured values are JSON text.
 */
export interface UsersTable {
  id: string;
  email: string; // lower-cased, unique
  fname: string;
  lname: string;
  password_hash: string | null; // null: must set a password through the welcome link first
  disabled: number;
  /** null: follows the account's 2FA policy; 0/1: per-user override */
  two_factor: number | null;
  totp_secret: string | null; // base32, set once enrolment is confirmed
  totp_pending: string | null; // base32, awaiting confirmation
  /**
   * RFC 6238 time step of the last accepted authenticator code (no code is accepted twice).
   * Added by migration 0002; optional here so inserts need not name it (it starts null).
   */
  totp_last_step?: number | null;
  created_at: string;
  last_login: string | null;
}

export interface RolesTable {
  id: string;
  name: string;
  description: string;
  /** JSON: [{permission, resources}] */
  policies: string;
  /** Console recording for sessions this role grants: 'default' | 'off' | 'required' (see broker/access/recording.ts). */
  recording?: string;
  builtin: number;
  created_at: string;
  created_by: string | null;
  updated_at: string;
  updated_by: string | null;
}

export interface UserRolesTable {
  user_id: string;
  role_id: string;
}

export interface SessionsTable {
  id: string;
  user_id: string;
  refresh_hash: string;
  created_at: string;
  expires_at: string;
  revoked_at: string | null;
  ip: string | null;
  user_agent: string | null;
}

/** A recovery code of a user's authenticator app; only its hash is kept (broker/auth/recovery-codes.ts). */
export interface RecoveryCodesTable {
  user_id: string;
  /** sha256 hex of `recovery:<user id>:<normalized code>` */
  code_hash: string;
  created_at: string;
  /** set when the code was used to sign in; a used code never works again */
  used_at: string | null;
}

/** An SSH public key a user registered for the SSH gateway (broker/ssh/keys.ts). */
export interface SshKeysTable {
  id: string;
  user_id: string;
  /** `<type> <base64 blob>`, the OpenSSH public key line without its comment */
  public_key: string;
  /** `SHA256:…` as ssh-keygen -l prints it; unique */
  fingerprint: string;
  comment: string;
  created_at: string;
}

export interface ChallengesTable {
  /** sha256 of the opaque challenge handed to the client */
  id_hash: string;
  user_id: string;
  /** 'login' (password checked, no provider yet) or 'code' (a provider was chosen) */
  stage: string;
  provider: string | null;
  code_hash: string | null;
  attempts: number;
  expires_at: string;
  used_at: string | null;
}

export interface PasswordTokensTable {
  token_hash: string;
  user_id: string;
  purpose: string; // 'welcome' | 'reset'
  expires_at: string;
  used_at: string | null;
}

export interface SettingsTable {
  key: string;
  value: string; // JSON
}

/** The group tree: groups and approved devices. */
export interface NodesTable {
  node_id: string;
  parent_id: string | null;
  type: string; // 'group' | 'device'
  title: string;
  tags: string; // JSON string[]
  created_at: string;
}

/** Every device the broker has heard of: pending, approved or rejected. */
export interface DevicesTable {
  device_id: string; // 64 lowercase hex: sha256 of the public key
  public_key: string; // PEM (SPKI)
  state: string; // 'pending' | 'approved'
  hostname: string;
  bootstrap_key: string | null;
  /** JSON: legacy attributes and `custom` */
  attributes: string;
  created_at: string;
  approved_at: string | null;
  last_seen: string | null;
  last_ip: string | null;
  agent_version: string | null;
}

/**
 * Device keys the broker will not let back in: removed approved devices and rejected pending
 * hosts. Their device row is gone; this keeps their old key from reconnecting or re-enrolling.
 */
export interface RevokedDevicesTable {
  device_id: string; // sha256 of the revoked public key
  reason: string; // 'removed' | 'rejected'
  hostname: string;
  revoked_at: string;
}

export interface InventoryTable {
  device_id: string;
  data: string; // JSON
  updated_at: string;
}

/** One typed inventory payload of a device (shared/inventory.ts), as validated JSON. */
export interface InventoryItemsTable {
  device_id: string;
  item_type: string;
  data: string; // JSON
  /** sha256 the agent sent with it */
  digest: string;
  updated_at: string;
}

/** One installed package of a device: what fleet search and CVE matching query. */
/** One imported OSV advisory (broker/cve). */
export interface CveAdvisoriesTable {
  advisory_id: string;
  /** JSON array of the CVE ids it is listed by */
  cve_ids: string;
  summary: string;
  score: number | null;
  /** critical, high, medium, low, none, unknown */
  severity: string;
  published: string | null;
  modified: string | null;
  imported_at: string;
}

/** One affected OS package of an advisory: its OSV ecosystem and name; data is JSON {ranges, versions}. */
export interface CveAffectedTable {
  advisory_id: string;
  ecosystem: string;
  name: string;
  data: string;
}

/** An installed package a CVE affects, per device. */
export interface CveMatchesTable {
  device_id: string;
  cve_id: string;
  advisory_id: string;
  package: string;
  version: string;
  fixed_version: string | null;
}

/** An operator's decision on a CVE: accepted or ignored, with the reason. */
export interface CveStatusTable {
  cve_id: string;
  status: string;
  reason: string;
  user_id: string;
  updated_at: string;
}

export interface InventoryPackagesTable {
  device_id: string;
  name: string;
  version: string;
  arch: string;
  /** dpkg, rpm, opkg, apk: which version ordering applies */
  pkg_manager: string;
  /** dpkg's source package when named otherwise (CVE advisories name source packages); null when the same or unknown */
  source: string | null;
}

export interface BootstrapKeysTable {
  key_hash: string;
  key_id: string; // public id (prefix) shown in lists
  key_secret: string; // the key itself, shown to holders of bootstrap-keys:read
  group_id: string;
  auto_accept: number;
  created_at: string;
  created_by: string | null;
  /** what people call the key (0006); '' when none was given */
  label: string;
  /** ISO 8601; from then on the key enrols nothing (0006). null: it never expires */
  expires_at: string | null;
}

export interface PortmapsTable {
  id: string;
  /** resource string the preset applies to: *, tag:<t>, node:<id> */
  target: string;
  name: string;
  proto: string;
  port: number;
  dst: string;
  created_at: string;
  created_by: string | null;
}

/**
 * The audit trail: each row is the API's AuditEntry with its options as JSON text, less the fields
 * derived when listing. Rows are never updated: `sha` chains each to the one before it.
 */
export interface AuditTable extends Omit<AuditEntry, 'options' | 'message' | 'type' | 'created' | 'changes' | 'labels'> {
  /** JSON of the options / request detail */
  options: string;
}

/** Raw metric samples of one device at one time: `data` is their compact JSON (broker/metrics/store.ts encodeSamples). */
export interface MetricSamplesTable {
  device_id: string;
  /** Unix seconds (bigint on PostgreSQL: read it through Number()) */
  ts: number | string;
  data: string;
}

/** Hourly roll-up of one value (label, id, field) of one device: count, sum, min and max. */
export interface MetricRollupsTable {
  device_id: string;
  label: string;
  /** the sample id (mount point, interface), '' for none */
  mid: string;
  field: string;
  /** start of the hour, Unix seconds */
  bucket: number | string;
  n: number | string;
  v_sum: number;
  v_min: number;
  v_max: number;
}

export interface Database {
  users: UsersTable;
  roles: RolesTable;
  user_roles: UserRolesTable;
  sessions: SessionsTable;
  challenges: ChallengesTable;
  recovery_codes: RecoveryCodesTable;
  ssh_keys: SshKeysTable;
  password_tokens: PasswordTokensTable;
  settings: SettingsTable;
  nodes: NodesTable;
  devices: DevicesTable;
  inventory: InventoryTable;
  inventory_items: InventoryItemsTable;
  inventory_packages: InventoryPackagesTable;
  cve_advisories: CveAdvisoriesTable;
  cve_affected: CveAffectedTable;
  cve_matches: CveMatchesTable;
  cve_status: CveStatusTable;
  revoked_devices: RevokedDevicesTable;
  bootstrap_keys: BootstrapKeysTable;
  portmaps: PortmapsTable;
  audit: AuditTable;
  reports: ReportsTable;
  report_reads: ReportReadsTable;
  company: CompanyTable;
  config_changes: ConfigChangesTable;
  config_commits: ConfigCommitsTable;
  config_entities: ConfigEntitiesTable;
  device_config: DeviceConfigTable;
  metric_samples: MetricSamplesTable;
  metric_rollups: MetricRollupsTable;
  cluster_brokers: ClusterBrokersTable;
  agent_presence: AgentPresenceTable;
  remote_session_owners: RemoteSessionOwnersTable;
  live_sessions: LiveSessionsTable;
  rate_limits: RateLimitsTable;
  remote_tickets: RemoteTicketsTable;
  device_codes: DeviceCodesTable;
  file_nodes: FileNodesTable;
  file_chunks: FileChunksTable;
}

/** A broker of the cluster (several brokers on one database), alive while its heartbeat is fresh. */
export interface ClusterBrokersTable {
  broker_id: string;
  /** where the other brokers open their peer link to it */
  peer_url: string;
  started_at: string;
  /** epoch milliseconds of its last heartbeat (bigint: a string from PostgreSQL) */
  heartbeat_at: number | string;
}

/** Which broker holds a device's agent connection; stale once `seen_at` is older than the expiry. */
export interface AgentPresenceTable {
  device_id: string;
  broker_id: string;
  connected_at: string;
  /** epoch milliseconds, refreshed for all of a broker's agents in one UPDATE per heartbeat */
  seen_at: number | string;
}

/** A live remote session of some broker (migration 0016), as GET /remote/sessions lists it. */
export interface LiveSessionsTable {
  session_id: string;
  broker_id: string;
  user_id: string;
  user_email: string;
  device_id: string;
  kind: string;
  source: string;
  ip: string;
  started_at: number | string;
  /** as of updated_at (refreshed every cluster heartbeat) */
  bytes_in: number | string;
  bytes_out: number | string;
  /** consoles: 1 attached, 0 waiting for a re-attach; null for other kinds */
  attached: number | null;
  /** JSON: [{user:{id,email},since}] */
  watchers: string;
  /** JSON: the RemoteRequest it was opened with (who may watch it is decided from it) */
  request: string;
  updated_at: number | string;
}

/** The broker holding a live remote session, by the audit id of its start (removed at its end). */
export interface RemoteSessionOwnersTable {
  audit_id: number | string;
  broker_id: string;
}

/*
 * Shared between brokers (migration 0014). Instants are Unix milliseconds: PostgreSQL's bigint
 * arrives as a string, so readers convert with Number().
 */

/** One fixed window of a rate limit: `<limiter>:<key>`. */
export interface RateLimitsTable {
  key: string;
  window_start: number | string;
  count: number;
  /** window_start + the window: the row can be deleted from then on */
  expires_at: number | string;
}

/** A single-use remote-access ticket: only its sha256 is kept, with the bearer it stands for. */
export interface RemoteTicketsTable {
  ticket_hash: string;
  token: string;
  user_id: string;
  issued_at: number | string;
  expires_at: number | string;
}

/** An RFC 8628 device-code sign-in waiting for (or decided by) a user. */
export interface DeviceCodesTable {
  device_code_hash: string;
  /** "BCDF-GHJK" */
  user_code: string;
  client_ip: string;
  user_agent: string;
  expires_at: number | string;
  /** null while pending; 'approved' or 'declined' */
  decision: string | null;
  /** the approving user */
  user_id: string | null;
  /** the signed-in user who first entered the code: the only one who may look it up or decide it */
  claimed_by: string | null;
}

/** An entry of the database-backed file store (FILE_STORE=db): "/"-rooted path, folders without a trailing "/". */
export interface FileNodesTable {
  path: string;
  /** the folder's path ("/" for the top) */
  parent: string;
  name: string;
  is_dir: number;
  size: number | string;
  sha256: string | null;
  /** the chunks holding the content (files) */
  blob_id: string | null;
  mtime: string;
  /** Unix seconds */
  created: number | string;
}

/** Content of a stored file, in order. */
export interface FileChunksTable {
  blob_id: string;
  seq: number;
  data: Buffer;
}

/** One agent report (qbee's configuration Report), as received. */
export interface ReportsTable {
  id: Generated<number>;
  device_id: string;
  /** Unix seconds, as the agent stamped it */
  ts: number;
  /** ISO 8601, when the broker stored it */
  received_at: string;
  sev: string; // INFO | WARN | ERR | CRIT
  /** 0 INFO … 3 CRIT, for ordering and minimum-severity filters */
  level: number;
  bundle: string;
  bundle_commit_id: string;
  commit_id: string;
  labels: string;
  text: string;
  /** base64 of the operation log */
  log: string | null;
}

/** Which user has read which report (read/unread is per user). */
export interface ReportReadsTable {
  report_id: number;
  user_id: string;
  read_at: string;
}

/** The installation's one company record. */
export interface CompanyTable {
  id: string;
  name: string;
  address: string;
  zip: string;
  city: string;
  country: string;
  vat_number: string;
  contact_name: string;
  contact_email: string;
  contact_phone: string;
  /** default agent run interval, minutes */
  agent_interval: number;
  created_at: string;
  updated_at: string;
}

/** A configuration change (qbee's Change): one bundle of one entity, staged by a user until committed. */
export interface ConfigChangesTable {
  id: string;
  sha: string;
  user_id: string;
  status: string; // 'new' | 'committed'
  entity_type: string; // 'node' | 'tag'
  entity_id: string;
  bundle: string;
  extend: number;
  /** JSON of the bundle's configuration as sent (secrets in clear: never answered as stored) */
  content: string;
  commit_sha: string | null;
  created_at: string;
  updated_at: string;
  /** order of staging, for applying a user's changes in the order made */
  seq: number;
}

/** A configuration commit; its sha is the sha of its audit entry. */
export interface ConfigCommitsTable {
  sha: string;
  audit_id: number;
  user_id: string;
  message: string;
  created_at: string;
}

/** An entity's own bundle as last committed. */
export interface ConfigEntitiesTable {
  entity_type: string;
  entity_id: string;
  bundle: string;
  extend: number;
  data: string; // JSON
  commit_sha: string;
  /** ISO 8601 of the commit */
  commit_created: string;
}

/** Per device: the commit of its rendered configuration, its digest, and what its agent last applied. */
export interface DeviceConfigTable {
  device_id: string;
  commit_sha: string | null;
  digest: string | null;
  device_commit_sha: string | null;
  applied_at: string | null;
}
