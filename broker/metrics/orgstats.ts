/**
 * GET /analysis/orgstats: fleet counts over the devices a caller reaches — how many, how many
 * online, and how many per OS, architecture and agent version — and reports by severity when a
 * reports domain provides them (`ReportCounts`); without one the answer says they are not available.
 */
import type { Db } from '../db/database.js';
import { deviceHostRows } from '../devices/directory.js';
import { readReports } from '../inventory/store.js';

/** What orgstats needs to know of devices. */
export interface FleetFacts {
  isOnline(deviceId: string): boolean;
  /** OS (name and version), architecture and agent version of each device, '' where unknown. */
  describe(deviceIds: string[]): Promise<Map<string, { os: string; arch: string; agentVersion: string }>>;
}

/** Counts of reports by severity (INFO, WARN, ERR, CRIT) over the given devices. */
export type ReportCounts = (deviceIds: string[]) => Promise<Record<string, number>>;

export interface OrgStats {
  devices: number;
  online: number;
  offline: number;
  by_os: Record<string, number>;
  by_arch: Record<string, number>;
  by_agent_version: Record<string, number>;
  reports: { available: true; by_severity: Record<string, number> } | { available: false; by_severity: null };
}

const ID_BATCH = 500;
const UNKNOWN = 'unknown';

function bump(counts: Record<string, number>, key: string): void {
  const k = key || UNKNOWN;
  counts[k] = (counts[k] ?? 0) + 1;
}

export async function fleetCounts(deviceIds: string[], fleet: FleetFacts, reports?: ReportCounts): Promise<OrgStats> {
  const facts = await fleet.describe(deviceIds);
  const byOs: Record<string, number> = {};
  const byArch: Record<string, number> = {};
  const byVersion: Record<string, number> = {};
  let online = 0;
  for (const id of deviceIds) {
    if (fleet.isOnline(id)) online += 1;
    const f = facts.get(id);
    bump(byOs, f?.os ?? '');
    bump(byArch, f?.arch ?? '');
    bump(byVersion, f?.agentVersion ?? '');
  }
  return {
    devices: deviceIds.length,
    online,
    offline: deviceIds.length - online,
    by_os: byOs,
    by_arch: byArch,
    by_agent_version: byVersion,
    reports: reports ? { available: true, by_severity: await reports(deviceIds) } : { available: false, by_severity: null },
  };
}

function text(v: unknown): string {
  return typeof v === 'string' ? v.slice(0, 200) : '';
}

/** FleetFacts from the device records and their last inventory reports (`os`, `arch`). */
export function storedFleetFacts(db: Db, isOnline: (deviceId: string) => boolean): FleetFacts {
  return {
    isOnline,
    async describe(deviceIds) {
      const out = new Map<string, { os: string; arch: string; agentVersion: string }>();
      for (let i = 0; i < deviceIds.length; i += ID_BATCH) {
        const ids = deviceIds.slice(i, i + ID_BATCH);
        // The device records and their reports come from their owners, one query each per batch.
        const [rows, reports] = await Promise.all([deviceHostRows(db, ids), readReports(db, ids)]);
        const data = new Map(reports.map((r) => [r.device_id, r.data]));
        for (const row of rows) {
          let report: Record<string, unknown> = {};
          try {
            const json = data.get(row.device_id);
            const parsed: unknown = json ? JSON.parse(json) : {};
            if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) report = parsed as Record<string, unknown>;
          } catch {
            report = {};
          }
          const os = (report.os ?? {}) as Record<string, unknown>;
          const osName = text(os.pretty_name) || [text(os.name), text(os.version)].filter(Boolean).join(' ');
          out.set(row.device_id, { os: osName, arch: text(report.arch), agentVersion: row.agent_version ?? '' });
        }
      }
      return out;
    },
  };
}
