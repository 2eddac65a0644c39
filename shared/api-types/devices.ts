/**
 * Device records as GET routes answer them: connection status, attributes, the group tree, and
 * metrics (samples, the latest summary, /analysis). Types only (see ../api-types.ts).
 */
import type { MetricSample } from '../metrics.js';

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

/** A device that enrolled and waits for approval, in this broker's words. */
export interface PendingHost {
  /** the device id: SHA-256 of its public key */
  node_id: string;
  hostname: string;
  /** first enrolment, ISO 8601 */
  created_at: string;
  last_ip: string | null;
  /** last enrolment or connection attempt, ISO 8601 */
  last_seen: string | null;
  /** `SHA256:<base64>` of the public key, to compare with the agent log before approving */
  public_key_fingerprint: string;
  /** The group the device goes to when approved (its bootstrap key's group). */
  group_id: string;
  bootstrap_key_id: string | null;
}

/** An entry of GET /pendinghost: the pending host plus the fields of qbee's PendingDevice. */
export interface PendingHostItem extends PendingHost {
  /** same as `node_id` */
  pub_key_digest: string;
  /** always false here */
  approved: boolean;
  /** address of the last enrolment, "" if unknown */
  remoteaddress: string;
  /** first enrolment, Unix seconds */
  timestamp: number;
  host: string;
  fqhost: string;
  uqhost: string;
}

/**
 * An entry of GET /bootstrapkeylist and GET /bootstrapkey/{bootstrapkey_id}, which answer a map keyed
 * by the key itself (for bootstrap-keys:manage holders) or by `key_id` (the secret left out).
 */
export interface BootstrapKeyEntry {
  group_id: string;
  auto_accept: boolean;
  /** a public name of the key (the start of its SHA-256) */
  key_id: string;
  /** ISO 8601 */
  created_at: string;
  /** what people call the key ("" for none) */
  label: string;
  /** ISO 8601 expiry; null: never expires */
  expires_at: string | null;
  /** `expires_at` has passed (by the broker clock): the key enrols nothing */
  expired: boolean;
  /** the key itself: for bootstrap-keys:manage holders only */
  key?: string;
  /** GET /bootstrapkeylist only: devices enrolled with the key, pending and approved */
  devices?: number;
}

/** GET /events: an agent connected to a broker (`device.online`) or left (`device.offline`). */
export interface DeviceEvent {
  event: 'device.online' | 'device.offline';
  device_id: string;
  /** ISO 8601: when the broker saw the change (for offline, the device's last contact) */
  at: string;
}

/** GET /events: a pending host appeared (an agent enrolled with a manual key), was approved, or was rejected. */
export interface PendingHostEvent {
  event: 'pending.added' | 'pending.approved' | 'pending.removed';
  device_id: string;
  hostname: string;
  /** ISO 8601: when the change was made */
  at: string;
}
