/**
 * The API's records as they travel (CONTRACT.md), written once for the broker, the CLI and the
 * web console. Plain interfaces and no runtime code, so the browser bundle takes nothing from
 * this file (and no zod). The broker's zod response schemas are checked against these types with
 * `satisfies z.ZodType<…>`, so a schema that drifts from its record does not compile.
 */
import type { MetricSample } from './metrics.js';
import type { Permission } from './permissions.js';
import type { ReportSeverity } from './protocol.js';

/** The answer of a list route: one page of `items` and how many there are in all. */
export interface ListPage<T> {
  items: T[];
  total: number;
}

/** A second factor a user can sign in with: `email` always, `google` (an authenticator app) once confirmed. */
export type SecondFactorProvider = 'email' | 'google';

/** A user's `two_factor` (CONTRACT.md). */
export interface TwoFactorState {
  /** whether sign-in asks this user for a second factor (the account policy, or the user's override) */
  enabled: boolean;
  /** the providers the user can use: `email` always, `google` once an authenticator app is confirmed */
  providers: SecondFactorProvider[];
}

/**
 * Where the welcome mail of a new user went (POST /user): handed to the SMTP relay, written to the
 * broker's outbox folder because no SMTP_URL is set, or not sent at all.
 */
export type WelcomeMailDelivery = 'sent' | 'outbox' | 'failed';

/** A user as GET /user/{user_id} and GET /userlist show it. */
export interface UserRecord {
  user_id: string;
  fname: string;
  lname: string;
  email: string;
  /** role ids */
  roles: string[];
  disabled: boolean;
  two_factor: TwoFactorState;
  /** ISO 8601 */
  created_at: string;
  /** ISO 8601, or null before the first sign-in */
  last_login: string | null;
}

/** GET /userlist: users, and the subscription's seats taken by active users. */
export interface UserList extends ListPage<UserRecord> {
  seats: { used: number; max: number };
}

/** GET /profile: the signed-in user's own record plus what they may do. */
export interface Profile extends UserRecord {
  /** every permission the user's roles grant (on at least some devices) */
  permissions: string[];
  /** unused recovery codes of the authenticator app (0 without an app) */
  recovery_codes_left: number;
  /** the remote-access:connect resources that allow a console, with the logins each names (none: the agent's own account) */
  console_grants: { resource: string; users: string[] }[];
}

/** GET /remote/access/{device_id}: what the caller may try on a device, for showing buttons. */
/** GET /remote/files/{device_id}: a directory on the device, as its agent listed it. */
export type { DirectoryEntry, DirectoryListing } from './protocol.js';

export interface RemoteCapabilities {
  device_id: string;
  /** the device agent is connected now */
  connected: boolean;
  console: boolean;
  /** present when every console grant names its users (`console(user=...)`): a console must run as one of these */
  console_users?: string[];
  tunnel: boolean;
  /** present when asked about one tunnel (?port=&proto=&dst=): whether it is allowed */
  tunnel_allowed?: boolean;
  copy: boolean;
  /** present when every grant reading files on the device names directories (`copy(path=...)`): where a file browser may look */
  copy_paths?: string[];
  reload: boolean;
}

/** GET /device/{device_id}/status: whether its agent is connected and remote sessions can open now (qbee's DeviceStatus). */
export interface DeviceStatus {
  uuid: string;
  remote_access: boolean;
  connected: boolean;
  /** ISO 8601 of the last contact, null if never */
  last_seen: string | null;
  /** while remote_access: host[:port] where qbee-cli dials this broker */
  edge?: string;
  /** 1 while remote_access */
  edge_version?: 1;
}

/** The legacy device attributes: always present, as strings ("" when unset). */
export type LegacyAttribute = 'device_name' | 'description' | 'latitude' | 'longitude' | 'country' | 'city' | 'zip' | 'address';

/** A device's attributes: the legacy fields and the custom key → value pairs. */
export interface DeviceAttributes extends Record<LegacyAttribute, string> {
  custom: Record<string, string>;
}

/** GET /deviceattribute/{device_id}: the attributes and the most custom keys a device may hold. */
export interface AttributesRecord extends DeviceAttributes {
  custom_max: number;
}

/** A node of GET /grouptree: a group with its children, or a device. */
export interface GroupTreeNode {
  id: string;
  node_id: string;
  title: string;
  type: 'group' | 'device';
  /** the node's own tags (a device also carries the tags of every group above it) */
  tags: string[];
  /** child nodes (empty for a device) */
  nodes: GroupTreeNode[];
  /** devices only */
  status?: 'online' | 'offline';
  /** devices only: last contact, Unix seconds (qbee's int64), null if never */
  last_reported?: number | null;
  /** devices only */
  attributes?: DeviceAttributes;
  /** devices only: the configuration commit its agent last applied ('' before the first) */
  device_commit_sha?: string;
  /** devices only: whether the agent applied the commit of its current configuration */
  config_propagated?: boolean;
  /** GET /grouptree?manage_hints=true: whether the caller may rename, move, tag (a group: delete, create in) this node */
  can_manage?: boolean;
}

/** GET /grouptree */
export interface GroupTree {
  total_devices: number;
  tree: GroupTreeNode;
  /** with manage_hints=true and device:manage: the tags the caller may add or remove, '*' for any */
  manageable_tags?: '*' | string[];
}

/** An entry of the audit trail (GET /commitlist). */
export interface AuditEntry {
  id: number;
  /** ISO 8601 */
  ts: string;
  /** stable event code, e.g. remote.console.start, user.create */
  event: string;
  user_id: string | null;
  user_email: string | null;
  device_id: string | null;
  action: string;
  /** the options / request detail */
  options: unknown;
  /** 'allowed' | 'denied' | 'ok' | 'error' | 'ended' */
  result: string;
  reason: string | null;
  source_ip: string | null;
  /** 'api' | 'web' | 'cli' | 'ssh' | 'qbee' */
  source: string | null;
  session_id: string | null;
  /** A remote session's start entry: from its end entry (joined when listed). */
  ended_at: string | null;
  /** A remote session's start entry: how it ended (ended, denied, error) and why, from its end entry; null while open. */
  end_result?: string | null;
  end_reason?: string | null;
  duration_ms: number | null;
  bytes_in: number | null;
  bytes_out: number | null;
  /** An end entry (`remote.<action>.end`): the id of the start entry it closes. */
  ref_id: number | null;
  /** SHA-256 over the previous entry's sha and this entry's content: the chain GET /audit/verify walks. */
  sha: string;
  /** qbee commit fields: a sentence for people, the kind of event, Unix seconds. */
  message: string;
  type: string;
  created: number;
  /**
   * qbee's CommitExtended: GET /commitlist answers every entry with `labels` (empty), `updated` and
   * `changes`: a configuration commit's (event config.commit) as qbee's Change objects, others none.
   */
  changes?: unknown[];
  labels?: string[];
  updated?: number;
}

/** GET /audit/verify: the chain walked from the first entry; `first_bad` names the first entry that does not match. */
export interface AuditVerification {
  ok: boolean;
  entries: number;
  first_bad?: { id: number; sha: string; expected: string };
  /** The checkpoint the walk started from, when the retention deleted older entries. */
  checkpoint?: { id: number; deleted_through: number };
}

/** One recorded console in `GET /remote/recordings` (its owner's, or any on a device the caller manages). */
export interface RecordingListItem {
  id: string;
  audit_id: number;
  session_id: string | null;
  user: { id: string; email: string };
  device: { id: string; name: string };
  started_at: string;
  ended_at: string | null;
  duration_ms: number | null;
  command?: string[];
}

/** GET /ssh/config: how to reach the SSH gateway with OpenSSH; only `enabled` when SSH_PORT is off. */
export interface SshClientSetup {
  enabled: boolean;
  url?: string;
  host?: string;
  port?: number;
  profile?: string;
  known_hosts?: string;
  ssh_config?: string;
}

/** A remote session's kind, and the kind of client that opened it. */
export type RemoteSessionKind = 'console' | 'tunnel' | 'copy' | 'reload';
export type RemoteSessionSource = 'api' | 'web' | 'cli' | 'ssh' | 'qbee';

/** A live remote session in GET /remote/sessions. */
export interface LiveSessionItem {
  id: string;
  user: { id: string; email: string };
  device: { id: string; name: string };
  kind: RemoteSessionKind;
  source: RemoteSessionSource;
  ip: string;
  started_at: string;
  /** client to device, so far */
  bytes_in: number;
  /** device to client, so far */
  bytes_out: number;
  /** the caller may end it */
  can_end: boolean;
  /** consoles only: false while the owner's connection is gone and it waits for a re-attach */
  attached?: boolean;
  /** consoles only: who watches it read-only, since when */
  watchers?: { user: { id: string; email: string }; since: string }[];
  /** consoles only: the caller may watch it */
  can_watch?: boolean;
  /** consoles only: the caller may re-attach to it (their own console) */
  can_attach?: boolean;
  /** several brokers: the BROKER_ID holding the session */
  broker?: string;
}

/** The fields of the company record a caller sets. */
export type CompanyField = 'name' | 'address' | 'zip' | 'city' | 'country' | 'vat_number' | 'contact_name' | 'contact_email' | 'contact_phone';

/** The company record's settings. */
export interface CompanySettings {
  /** the account-wide second-factor policy (the same as PUT /settings/two-factor) */
  two_factor_required: boolean;
  /** default agent run interval, minutes */
  agent_interval: number;
}

/** GET /company and GET /company/{company_id}: the installation's one company. */
export type CompanyRecord = Record<CompanyField, string> & {
  id: string;
  company_id: string;
  settings: CompanySettings;
  created_at: string;
  updated_at: string;
};

/** A CVE's severity: from its CVSS score, else the advisory's own word. */
export type CveSeverity = 'critical' | 'high' | 'medium' | 'low' | 'none' | 'unknown';
/** The decision taken on a CVE. */
export type CveStatus = 'open' | 'accepted' | 'ignored';

/** A CVE in GET /cvelist. */
export interface CveItem {
  cve_id: string;
  /** CVSS base score; null when the feed gives none */
  score: number | null;
  severity: CveSeverity;
  summary: string;
  /** OSV ids of the advisories naming this CVE */
  advisories: string[];
  /** installed packages it affects on the counted devices */
  packages: string[];
  /** devices affected */
  hosts: number;
  status: CveStatus;
  reason: string;
  published: string | null;
}

/** GET /cve/{cve_id}: the CVE, its decision, and the devices it affects. */
export interface CveDetail extends CveItem {
  status_updated_at: string | null;
  status_user_id: string | null;
  devices: {
    device_id: string;
    node_id: string;
    title: string;
    package: string;
    version: string;
    /** null when the feed knows no fix */
    fixed_version: string | null;
    advisory_id: string;
  }[];
}

/** GET /cvescorestats: CVEs affecting the devices by severity; ignored ones only in `ignored`. */
export type CveScoreStats = Record<CveSeverity, number> & { total: number; accepted: number; ignored: number };

/** GET /cvefeed: whether a vulnerability feed was imported, and how old it is. */
export interface CveFeedState {
  imported: boolean;
  advisories: number;
  imported_at: string | null;
  feed_date: string | null;
}

/** A report's severity, as the agent sends it. */
export type { ReportSeverity };

/** An agent report in GET /reportlist. */
export interface ReportItem {
  /** report id (for PATCH /reportmarkread) */
  id: number;
  /** the device id */
  node_id: string;
  device_id: string;
  /** the device's title in the group tree */
  title: string;
  /** the configuration bundle, a watcher, or `agent_internal` */
  bundle: string;
  bundle_commit_id: string;
  /** the configuration commit the agent ran */
  commit_id: string;
  labels: string;
  sev: ReportSeverity;
  text: string;
  /** base64 of the operation log's tail; "" when none */
  log: string;
  /** Unix seconds, as the agent stamped it */
  ts: number;
  /** Unix seconds, when the broker stored it */
  received: number;
  /** whether the caller has marked it read */
  read: boolean;
}

/** GET /reportsummary/{device_id}: a device's reports counted. */
export interface ReportCounts {
  node_id: string;
  total: number;
  unread: number;
  severity: Record<ReportSeverity, number>;
  unread_severity: Record<ReportSeverity, number>;
  /** Unix seconds of the newest report; 0 when none */
  last_ts: number;
}

/** Console recording for the sessions a role grants: `default` (recorded), `off`, or `required`. */
export type RoleRecordingMode = 'default' | 'off' | 'required';

/** A user holding a role, as a role's `used_by` (and a refused delete's `role_in_use`) names them. */
export interface RoleUser {
  user_id: string;
  fname: string;
  lname: string;
}

/** A permission a role grants, on the devices its resources name (`*`: every device). */
export interface RolePolicy {
  permission: string;
  resources: string[];
}

/** A role as GET /role/{role_id} and GET /roleslist show it. Times are Unix seconds, as the qbee API clients read them. */
export interface RoleRecord {
  id: string;
  name: string;
  description: string;
  policies: RolePolicy[];
  recording: RoleRecordingMode;
  /** the built-in Administrator role: cannot be changed or deleted */
  builtin: boolean;
  created_at: number;
  created_by: string | null;
  updated_at: number;
  updated_by: string | null;
  used_by: RoleUser[];
}

/** A permission in GET /permissionslist. */
export interface PermissionInfo {
  permission: Permission;
  description: string;
  /** whether its policies take resources other than `*` */
  accepts_resources: boolean;
}

/** Whether a metrics answer holds raw samples or hourly averages. */
export type MetricsResolution = 'raw' | 'hour';

/** GET /device/{device_id}/metrics: a device's samples with `from <= ts < to` (Unix seconds). */
export interface SeriesAnswer {
  items: MetricSample[];
  total: number;
  resolution: MetricsResolution;
  from: number;
  to: number;
}

/** GET /device/{device_id}/metrics/latest: qbee's MetricsSummary (qbee-cli metrics.go). */
export interface MetricsSummary {
  filesystem: { reported: number; mounts: { path: string; used: number; available: number }[] };
  cpu: { reported: number; user: number; system: number; io: number };
  load: { reported: number; '1min': number; '5min': number; '15min': number };
  memory: { reported: number; used: number; swap_used: number; available: number };
}

/** How /analysis folds a metric's values. */
export type MetricsAggregate = 'avg' | 'min' | 'max';

/** One group of an /analysis answer: a device (`device_id`, `title`) or an hour (`ts`, `devices`). */
export interface AnalysisItem {
  device_id?: string;
  title?: string;
  ts?: number;
  value: number;
  samples: number;
  devices?: number;
}

/** GET and POST /analysis: one metric aggregated over the caller's devices, by device or by hour. */
export interface AnalysisAnswer {
  metric: string;
  aggregate: MetricsAggregate;
  group_by: 'device' | 'hour';
  from: number;
  to: number;
  /** group_by device: one per device with data; group_by hour: one per hour with data */
  items: AnalysisItem[];
  /** how many groups had data (before `limit`) */
  total: number;
}
