/**
 * CVE findings: an OSV feed the operator imports (file or folder read by feed-files.ts:
 * `npm start -- cve-import`, or POST /cve/import), matched against the packages devices report
 * with their package manager's ordering (dpkg, rpm, apk), listed per CVE with host counts, and the operator's decisions
 * (accept / ignore with a reason). Matches are computed when the feed changes (every device) and
 * when a device's packages or OS change (that device), and stored, so listing is a grouped query.
 * A caller sees the devices their device:read reaches in host lists and counts, none without it
 * (AccessService.cveScope).
 */
import fs from 'node:fs';
import type { Logger } from 'pino';
import type { CveItem, CveStatus } from '../../shared/api-types.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { Db } from '../db/database.js';
import type { DevicesService } from '../devices/service.js';
import { DomainError, invalid, notFound, tooLarge } from '../errors.js';
import { devicesWithPackages, installedPackages, readReports } from '../inventory/store.js';
import { userEmails } from '../users/directory.js';
import { SEVERITY_LEVELS, type SeverityLevel } from './cvss.js';
import { readFeedFiles, readFeedPath } from './feed-files.js';
import { MatchIndex, type DeviceFacts, type InstalledPackage, type Match } from './match.js';
import { parseDocument, severityRank, type Advisory } from './osv.js';
import * as store from './store.js';

/** The largest upload POST /cve/import takes. */
export const MAX_IMPORT_UPLOAD_BYTES = 64 * 1024 * 1024;
/** How long fleet-wide host counts are reused at most (see CveService.fleetAggregates). */
const AGGREGATE_TTL_MS = 5_000;
/** Devices whose packages are read per query while matching the whole fleet. */
const MATCH_BATCH = 100;

export type { CveStatus };

export interface CveListQuery {
  search?: string;
  severity?: SeverityLevel[];
  status?: CveStatus;
  device_id?: string;
  include_unaffected?: boolean;
  sort_field?: 'score' | 'hosts' | 'cve_id' | 'published' | 'severity';
  sort_direction?: 'asc' | 'desc';
  offset: number;
  items_per_page: number;
}

/** A CVE as GET /cvelist answers it (shared with the web console). */
export type CveSummary = CveItem;

export interface ImportResult {
  files: number;
  advisories: number;
  cves: number;
  skipped: number;
  errors: Array<{ file: string; error: string }>;
  matches: number;
  devices_affected: number;
}

interface CveRecord {
  cve_id: string;
  score: number | null;
  severity: SeverityLevel;
  summary: string;
  advisories: string[];
  published: string | null;
}

/** The feed grouped by CVE id: an advisory listing several CVEs appears under each; the highest score wins. */
function byCve(rows: store.AdvisoryRow[]): Map<string, CveRecord> {
  const out = new Map<string, CveRecord>();
  for (const a of rows) {
    for (const id of a.cve_ids) {
      const r = out.get(id);
      if (!r) {
        out.set(id, { cve_id: id, score: a.score, severity: a.severity, summary: a.summary, advisories: [a.advisory_id], published: a.published });
        continue;
      }
      r.advisories.push(a.advisory_id);
      if (a.score !== null && (r.score === null || a.score > r.score)) {
        r.score = a.score;
        r.severity = a.severity;
      } else if (r.score === null && severityRank(a.severity) > severityRank(r.severity)) r.severity = a.severity;
      if (!r.summary) r.summary = a.summary;
      if (a.published && (!r.published || a.published < r.published)) r.published = a.published;
    }
  }
  return out;
}

export class CveService {
  /** The match index and the feed state it was built from (another process may import: `npm start -- cve-import`). */
  private index: { index: MatchIndex; key: string } | undefined;
  /**
   * Host counts and packages per CVE over every device, for callers who see every device: kept
   * until the findings change here, and at most AGGREGATE_TTL_MS (a change another broker made, or
   * one whose transaction had not committed yet when a listing read it).
   */
  private fleetAggregates: Promise<{ counts: Map<string, number>; packages: Map<string, Set<string>> }> | undefined;
  private fleetAggregatesAt = 0;

  constructor(
    private readonly deps: {
      db: Db;
      logger: Logger;
      access: Pick<AccessService, 'require' | 'cveScope'>;
      devices: Pick<DevicesService, 'listVisibleDevices' | 'getDevice'>;
    },
  ) {}

  async init(): Promise<void> {}

  async close(): Promise<void> {}

  // ---- import ------------------------------------------------------------------------------------

  /** Parses feed files (each an advisory or an array); a malformed file is reported in `errors` and skipped. */
  static readFiles = readFeedFiles;

  /** Reads a feed file or a folder of `.json` files (below it too) from disk, bounded. */
  static readPath = readFeedPath;

  /** Adds (or replaces, by OSV id) advisories and re-matches every device. */
  async importAdvisories(advisories: Advisory[]): Promise<{ advisories: number; cves: number; matches: number; devices_affected: number }> {
    // The last occurrence of an id wins (a folder holding an advisory twice).
    const unique = [...new Map(advisories.map((a) => [a.id, a])).values()];
    await store.saveAdvisories(this.deps.db, unique, new Date().toISOString());
    this.index = undefined;
    const { matches, devices } = await this.rematchAll();
    return { advisories: unique.length, cves: new Set(unique.flatMap((a) => a.cveIds)).size, matches, devices_affected: devices };
  }

  /** POST /cve/import: one uploaded file, all or nothing (a malformed advisory changes nothing). */
  async importUpload(file: { path: string; size: number; originalName: string } | undefined): Promise<ImportResult> {
    if (!file) throw invalid('file: send the feed as a multipart part named "file".', { field: 'file' });
    try {
      if (file.size > MAX_IMPORT_UPLOAD_BYTES)
        throw tooLarge(`The feed file is larger than ${MAX_IMPORT_UPLOAD_BYTES} bytes; import it with \`npm start -- cve-import\`.`);
      const json = await fs.promises.readFile(file.path, 'utf8');
      const r = parseDocument(json);
      if (!r.ok) throw new DomainError('invalid', 'invalid_feed', `The feed is not OSV JSON: ${r.error}`, { field: 'file', file: file.originalName });
      const done = await this.importAdvisories(r.advisories);
      return { files: 1, skipped: r.skipped, errors: [], ...done };
    } finally {
      await fs.promises.rm(file.path, { force: true });
    }
  }

  // ---- matching ----------------------------------------------------------------------------------

  private async matchIndex(): Promise<MatchIndex> {
    const key = await store.feedKey(this.deps.db);
    if (this.index?.key === key) return this.index.index;
    const cves = new Map((await store.readAdvisories(this.deps.db)).map((a) => [a.advisory_id, a.cve_ids]));
    const index = new MatchIndex();
    for (const row of await store.readAffected(this.deps.db)) {
      const ids = cves.get(row.advisory_id);
      if (ids && ids.length > 0) index.add(row.advisory_id, ids, row.ecosystem, row.name, row.ranges, row.versions);
    }
    this.index = { index, key };
    return index;
  }

  /** os-release ID and VERSION_ID of devices, from their system inventory. */
  private async facts(deviceIds: string[]): Promise<Map<string, DeviceFacts>> {
    const out = new Map<string, DeviceFacts>(deviceIds.map((id) => [id, { deviceId: id }]));
    for (const row of await readReports(this.deps.db, deviceIds)) {
      try {
        const os = (JSON.parse(row.data) as { os?: { id?: unknown; version?: unknown } }).os;
        out.set(row.device_id, {
          deviceId: row.device_id,
          osId: typeof os?.id === 'string' ? os.id : undefined,
          osVersion: typeof os?.version === 'string' ? os.version : undefined,
        });
      } catch {
        // An unreadable report: the device's OS is unknown.
      }
    }
    return out;
  }

  private async matchDevices(index: MatchIndex, deviceIds: string[]): Promise<Match[]> {
    const facts = await this.facts(deviceIds);
    const packages = new Map<string, InstalledPackage[]>();
    for (const row of await installedPackages(this.deps.db, deviceIds)) {
      if (!index.concerns(row)) continue;
      const list = packages.get(row.device_id);
      if (list) list.push(row);
      else packages.set(row.device_id, [row]);
    }
    const out: Match[] = [];
    for (const [deviceId, list] of packages) out.push(...index.matchDevice(facts.get(deviceId) ?? { deviceId }, list));
    return out;
  }

  /** Re-matches every device that reported packages against the feed. */
  async rematchAll(): Promise<{ matches: number; devices: number }> {
    const index = await this.matchIndex();
    const ids = await devicesWithPackages(this.deps.db);
    this.fleetAggregates = undefined;
    await store.replaceMatches(this.deps.db, undefined, []);
    let matches = 0;
    const affected = new Set<string>();
    for (let i = 0; i < ids.length; i += MATCH_BATCH) {
      const found = await this.matchDevices(index, ids.slice(i, i + MATCH_BATCH));
      await store.insertMatches(this.deps.db, found);
      matches += found.length;
      for (const m of found) affected.add(m.device_id);
    }
    return { matches, devices: affected.size };
  }

  /** A device's packages or OS changed (the inventory service calls this): re-match it. */
  async rematchDevice(deviceId: string): Promise<void> {
    const index = await this.matchIndex();
    const found = index.size > 0 ? await this.matchDevices(index, [deviceId]) : [];
    await store.replaceMatches(this.deps.db, [deviceId], found);
    this.fleetAggregates = undefined;
  }

  // ---- reading -----------------------------------------------------------------------------------

  /** The devices whose findings the principal sees, with titles; `all` when they see every device. */
  private async visible(principal: Principal): Promise<{ ids: string[] | undefined; titles: Map<string, string> }> {
    const scope = this.deps.access.cveScope(principal);
    const list = await this.deps.devices.listVisibleDevices(principal, scope ?? 'cve:read');
    return { ids: scope ? list.map((d) => d.deviceId) : undefined, titles: new Map(list.map((d) => [d.deviceId, d.title])) };
  }

  /** The device ids a listing counts: those visible, narrowed to one device (which must be reachable). */
  private async countedDevices(principal: Principal, deviceId?: string): Promise<{ ids: string[] | undefined; titles: Map<string, string> }> {
    const v = await this.visible(principal);
    if (deviceId === undefined) return v;
    if (v.ids ? !v.ids.includes(deviceId) : !v.titles.has(deviceId)) {
      if (v.ids && (await this.deps.devices.getDevice(deviceId))) await this.deps.access.require(principal, 'device:read', deviceId);
      throw notFound(`Device ${deviceId}`);
    }
    return { ids: [deviceId], titles: v.titles };
  }

  private async summaries(principal: Principal, deviceId?: string): Promise<CveSummary[]> {
    const db = this.deps.db;
    const { ids } = await this.countedDevices(principal, deviceId);
    const aggregates = async () => {
      const [counts, packages] = await Promise.all([store.hostCounts(db, ids), store.affectedPackages(db, ids)]);
      return { counts, packages };
    };
    let fleet: Promise<{ counts: Map<string, number>; packages: Map<string, Set<string>> }>;
    if (ids) fleet = aggregates();
    else {
      if (!this.fleetAggregates || Date.now() - this.fleetAggregatesAt > AGGREGATE_TTL_MS) {
        this.fleetAggregates = aggregates();
        this.fleetAggregatesAt = Date.now();
      }
      fleet = this.fleetAggregates;
      fleet.catch(() => (this.fleetAggregates = undefined));
    }
    const [cves, { counts, packages }, statuses] = await Promise.all([store.readAdvisories(db).then(byCve), fleet, store.readStatuses(db)]);
    return [...cves.values()].map((c) => {
      const s = statuses.get(c.cve_id);
      return {
        ...c,
        packages: [...(packages.get(c.cve_id) ?? [])].sort(),
        hosts: counts.get(c.cve_id) ?? 0,
        status: s?.status ?? 'open',
        reason: s?.reason ?? '',
      };
    });
  }

  /** GET /cvelist: CVEs of the feed affecting the caller's devices (or all), filtered, sorted, one page. */
  async list(principal: Principal, q: CveListQuery): Promise<{ items: CveSummary[]; total: number }> {
    let all = await this.summaries(principal, q.device_id);
    if (!q.include_unaffected) all = all.filter((c) => c.hosts > 0);
    const needle = q.search?.trim().toLowerCase();
    if (needle)
      all = all.filter(
        (c) =>
          c.cve_id.toLowerCase().includes(needle) ||
          c.summary.toLowerCase().includes(needle) ||
          c.packages.some((p) => p.toLowerCase().includes(needle)) ||
          c.advisories.some((a) => a.toLowerCase().includes(needle)),
      );
    if (q.severity?.length) all = all.filter((c) => q.severity!.includes(c.severity));
    if (q.status) all = all.filter((c) => c.status === q.status);
    const field = q.sort_field ?? 'score';
    const key = (c: CveSummary): number | string =>
      field === 'score'
        ? (c.score ?? -1)
        : field === 'hosts'
          ? c.hosts
          : field === 'severity'
            ? severityRank(c.severity)
            : field === 'published'
              ? (c.published ?? '')
              : c.cve_id;
    const direction = (q.sort_direction ?? (field === 'cve_id' ? 'asc' : 'desc')) === 'desc' ? -1 : 1;
    all.sort((a, b) => {
      const x = key(a);
      const y = key(b);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return c * direction || (a.cve_id < b.cve_id ? -1 : a.cve_id > b.cve_id ? 1 : 0);
    });
    return { items: all.slice(q.offset, q.offset + q.items_per_page), total: all.length };
  }

  /** GET /cve/{cve_id}: the CVE and, per device the caller sees, the affected package, its version and the fix. */
  async get(principal: Principal, cveId: string) {
    const db = this.deps.db;
    const cve = byCve((await store.readAdvisories(db)).filter((a) => a.cve_ids.includes(cveId))).get(cveId);
    if (!cve) throw notFound(`CVE ${cveId}`);
    const { ids, titles } = await this.visible(principal);
    const reach = ids ? new Set(ids) : undefined;
    const status = await store.readStatus(db, cveId);
    const devices = (await store.matchesOfCve(db, cveId))
      .filter((m) => (reach ? reach.has(m.device_id) : titles.has(m.device_id)))
      .map((m) => ({
        device_id: m.device_id,
        node_id: m.device_id,
        title: titles.get(m.device_id) ?? m.device_id.slice(0, 12),
        package: m.package,
        version: m.version,
        fixed_version: m.fixed_version,
        advisory_id: m.advisory_id,
      }));
    return {
      ...cve,
      packages: [...new Set(devices.map((d) => d.package))].sort(),
      hosts: new Set(devices.map((d) => d.device_id)).size,
      status: status?.status ?? ('open' as const),
      reason: status?.reason ?? '',
      status_updated_at: status?.updated_at ?? null,
      status_user_id: status?.user_id ?? null,
      devices,
    };
  }

  /** GET /cvefeed: whether a feed was imported, and how old it is (the console says so before "no CVE affects your devices"). */
  async feed(): Promise<{ imported: boolean; advisories: number; imported_at: string | null; feed_date: string | null }> {
    const state = await store.feedState(this.deps.db);
    return { imported: state.advisories > 0, ...state };
  }

  /** GET /cvescorestats: CVEs affecting the caller's devices by severity (ignored ones counted apart). */
  async scoreStats(principal: Principal) {
    const all = (await this.summaries(principal)).filter((c) => c.hosts > 0);
    const counts = Object.fromEntries(SEVERITY_LEVELS.map((s) => [s, 0])) as Record<SeverityLevel, number>;
    let ignored = 0;
    let accepted = 0;
    for (const c of all) {
      if (c.status === 'ignored') ignored++;
      else counts[c.severity]++;
      if (c.status === 'accepted') accepted++;
    }
    return { ...counts, total: all.length - ignored, accepted, ignored };
  }

  /** GET /cve_hosts_max_count: the most devices (of those the caller sees) one CVE affects. */
  async hostsMaxCount(principal: Principal) {
    let best: CveSummary | undefined;
    for (const c of await this.summaries(principal)) if (!best || c.hosts > best.hosts) best = c;
    return { count: best?.hosts ?? 0, cve_id: best && best.hosts > 0 ? best.cve_id : null };
  }

  // ---- decisions ---------------------------------------------------------------------------------

  /** PATCH /cve/{cve_id}: accept or ignore with a reason, or `open` to withdraw the decision. */
  async setStatus(principal: Principal, cveId: string, body: { status: CveStatus; reason?: string }) {
    const known = (await store.readAdvisories(this.deps.db)).some((a) => a.cve_ids.includes(cveId));
    if (!known) throw notFound(`CVE ${cveId}`);
    const reason = body.reason?.trim() ?? '';
    if (body.status !== 'open' && !reason) throw invalid('reason: say why the CVE is accepted or ignored.', { field: 'reason' });
    if (body.status === 'open') await store.writeStatus(this.deps.db, { cve_id: cveId, status: 'open' });
    else
      await store.writeStatus(this.deps.db, { cve_id: cveId, status: body.status, reason, user_id: principal.user.id, updated_at: new Date().toISOString() });
    return this.statusOf(cveId);
  }

  /** The decision on a CVE, for the audit trail and PATCH's answer. */
  async statusOf(cveId: string): Promise<{ cve_id: string; status: CveStatus; reason: string; user_id: string | null; updated_at: string | null }> {
    const s = await store.readStatus(this.deps.db, cveId);
    return { cve_id: cveId, status: s?.status ?? 'open', reason: s?.reason ?? '', user_id: s?.user_id ?? null, updated_at: s?.updated_at ?? null };
  }

  /** GET /cve/status/cves: the accepted and ignored CVEs with their reasons. */
  async statuses(q: { status?: 'accepted' | 'ignored'; offset: number; items_per_page: number }) {
    const db = this.deps.db;
    const cves = byCve(await store.readAdvisories(db));
    const decided = [...(await store.readStatuses(db)).values()];
    const users = await userEmails(
      db,
      decided.map((s) => s.user_id),
    );
    const rows = decided
      .filter((s) => !q.status || s.status === q.status)
      .sort((a, b) => (a.updated_at < b.updated_at ? 1 : a.updated_at > b.updated_at ? -1 : 0))
      .map((s) => {
        const c = cves.get(s.cve_id);
        return {
          ...s,
          user_email: users.get(s.user_id) ?? null,
          severity: c?.severity ?? ('unknown' as const),
          score: c?.score ?? null,
          summary: c?.summary ?? '',
        };
      });
    return { items: rows.slice(q.offset, q.offset + q.items_per_page), total: rows.length };
  }

  /** DELETE /cve/{cve_id}: removes the CVE from the feed (a later import of an advisory naming it brings it back). */
  async remove(cveId: string): Promise<void> {
    const removed = await store.removeCve(this.deps.db, cveId, await store.readAdvisories(this.deps.db));
    if (!removed) throw notFound(`CVE ${cveId}`);
    this.index = undefined;
    this.fleetAggregates = undefined;
  }
}
