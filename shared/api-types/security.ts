/**
 * Security records as GET routes answer them: the audit trail and its verification, CVEs and the
 * feed state, and agent reports. Types only (see ../api-types.ts).
 */
import type { AgentReport, ReportSeverity } from '../protocol.js';

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
export interface ReportItem extends AgentReport {
  /** report id (for PATCH /reportmarkread) */
  id: number;
  /** the device id */
  node_id: string;
  device_id: string;
  /** the device's title in the group tree */
  title: string;
  /** base64 of the operation log's tail; "" when none */
  log: string;
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
