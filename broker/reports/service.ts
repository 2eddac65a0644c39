import { sql, type SelectQueryBuilder } from 'kysely';
import type { Logger } from 'pino';
import type { ReportItem } from '../../shared/api-types.js';
import type { AgentReport, ReportSeverity } from '../../shared/protocol.js';
import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { Config } from '../environment.js';
import type { Db } from '../db/database.js';
import type { Database } from '../db/schema.js';
import { deviceNodeIds, deviceState, enrolledDeviceIds } from '../devices/directory.js';
import type { DevicesService } from '../devices/service.js';
import { checkReports, clampReportTs, SEVERITIES, trimReport, type CheckedReports, type ReportRefusal } from './validate.js';

/** Retention runs this often (and once at start). */
const SWEEP_EVERY_MS = 60 * 60 * 1000;
/** The per-device rate is counted over this window. */
const RATE_WINDOW_MS = 60_000;
/** Rows per insert statement (11 values each, well under every driver's parameter limit). */
const INSERT_BATCH = 100;
/** Device ids per `in (...)` of a summary (no paging there, so the list is split). */
const ID_BATCH = 500;
/** The bundle name of the agent's own events (qbee's). */
export const AGENT_INTERNAL_BUNDLE = 'agent_internal';

/** A report as GET /reportlist answers it (shared with the web console). */
export type { ReportItem };

export interface ReportListQuery {
  offset: number;
  items_per_page: number;
  search?: string;
  node_id?: string;
  severity?: ReportSeverity[];
  bundle?: string;
  commit_id?: string;
  read?: boolean;
  from?: number;
  to?: number;
  sort_field?: 'ts' | 'sev' | 'received' | 'bundle';
  sort_direction?: 'asc' | 'desc';
}

export type SeverityCounts = Record<ReportSeverity, number>;

export interface ReportCounts {
  total: number;
  unread: number;
  severity: SeverityCounts;
  unread_severity: SeverityCounts;
  /** Unix seconds of the newest report; 0 when none */
  last_ts: number;
}

export interface MarkReadRequest {
  ids?: number[];
  node_id?: string;
  all?: boolean;
  read?: boolean;
}

export interface RecordOutcome {
  stored: number;
  refused: Partial<Record<ReportRefusal | 'rate_limited' | 'unknown_device', number>>;
}

export interface ReportsDeps {
  db: Db;
  logger: Logger;
  config: Pick<Config, 'reportRetentionDays' | 'reportMaxPerDevice' | 'reportMaxTotal' | 'reportRatePerDevice'>;
  access: Pick<AccessService, 'reachesEveryDevice'>;
  devices: Pick<DevicesService, 'listVisibleDevices' | 'node'>;
}

type Scoped = SelectQueryBuilder<Database & { r: Database['reports'] }, 'r', object>;

function zeroCounts(): SeverityCounts {
  return { INFO: 0, WARN: 0, ERR: 0, CRIT: 0 };
}

function emptySummary(): ReportCounts {
  return { total: 0, unread: 0, severity: zeroCounts(), unread_severity: zeroCounts(), last_ts: 0 };
}

/** `%` and `_` in a user's search match themselves. */
function likePattern(text: string): string {
  return `%${text.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

/**
 * The reports of agents (qbee's Logs): configuration outcomes, watchers' alerts and the agent's own
 * events, per device, with read/unread per user. Checks what agents send (bounded per message and
 * per device and minute), keeps storage bounded by age and count, and answers the report calls
 * within the caller's reports:read (or device:read for group summaries) resources.
 */
export class ReportsService {
  private readonly log: Logger;
  private sweepTimer: NodeJS.Timeout | undefined;
  /** Per device: reports accepted in the current rate window. Entries older than a window are dropped by the sweep. */
  private readonly rate = new Map<string, { start: number; count: number; dropped: number }>();

  constructor(private readonly deps: ReportsDeps) {
    this.log = deps.logger.child({ module: 'reports' });
  }

  async init(): Promise<void> {
    await this.sweep().catch((err) => this.log.error({ err }, 'report retention failed'));
    this.sweepTimer = setInterval(() => void this.sweep().catch((err) => this.log.error({ err }, 'report retention failed')), SWEEP_EVERY_MS);
    this.sweepTimer.unref();
  }

  async close(): Promise<void> {
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    this.sweepTimer = undefined;
  }

  // ---- from agents ----------------------------------------------------------------------------

  /** Stores reports handed over in this process (the agent's own events, tests): checked first, as on arrival. */
  async record(deviceId: string, reports: AgentReport[] | unknown, now = new Date()): Promise<RecordOutcome> {
    return this.recordChecked(deviceId, checkReports(reports), now);
  }

  /**
   * Stores reports an agent sent (a `reports` message, or those of `config_applied`), as checked
   * where the message arrived (shared/wire.ts): logs the refused ones, keeps at most
   * REPORT_RATE_PER_DEVICE per device and minute (each trimmed: trimReport), and trims the device's
   * reports to REPORT_MAX_PER_DEVICE. Reports of a device that is not approved are dropped. A `ts`
   * more than REPORT_FUTURE_SKEW_S ahead of the broker's clock is stored as that bound.
   */
  async recordChecked(deviceId: string, checked: CheckedReports, now = new Date()): Promise<RecordOutcome> {
    const outcome: RecordOutcome = { stored: 0, refused: { ...checked.refused } };
    if (Object.keys(checked.refused).length > 0) this.log.warn({ deviceId, refused: checked.refused }, 'agent reports refused');
    if (checked.valid.length === 0) return outcome;
    if ((await deviceState(this.deps.db, deviceId)) !== 'approved') {
      outcome.refused.unknown_device = checked.valid.length;
      return outcome;
    }
    const allowed = this.take(deviceId, checked.valid.length, now.getTime());
    if (allowed < checked.valid.length) outcome.refused.rate_limited = checked.valid.length - allowed;
    const nowS = Math.floor(now.getTime() / 1000);
    let future = 0;
    const rows = checked.valid.slice(0, allowed).map((report) => {
      const r = trimReport(report);
      const ts = clampReportTs(r.ts, nowS);
      if (ts !== r.ts) future++;
      return { ...r, ts, device_id: deviceId, received_at: now.toISOString() };
    });
    if (future > 0) this.log.warn({ deviceId, reports: future }, 'agent reports stamped in the future: stored at the broker time bound');
    if (rows.length === 0) return outcome;
    for (let i = 0; i < rows.length; i += INSERT_BATCH) {
      await this.deps.db
        .insertInto('reports')
        .values(rows.slice(i, i + INSERT_BATCH))
        .execute();
    }
    outcome.stored = rows.length;
    await this.trimDevice(deviceId);
    return outcome;
  }

  /** The agent's own events (connected, …) as reports of bundle `agent_internal`. */
  async agentEvent(deviceId: string, sev: ReportSeverity, text: string, now = new Date()): Promise<void> {
    const report: AgentReport = {
      bundle: AGENT_INTERNAL_BUNDLE,
      bundle_commit_id: '',
      commit_id: '',
      labels: AGENT_INTERNAL_BUNDLE,
      sev,
      text,
      ts: Math.floor(now.getTime() / 1000),
    };
    await this.record(deviceId, [report], now);
  }

  /** How many of `wanted` reports the device may still send in this minute. */
  private take(deviceId: string, wanted: number, now: number): number {
    let window = this.rate.get(deviceId);
    if (!window || now - window.start >= RATE_WINDOW_MS) {
      if (window && window.dropped > 0) this.log.warn({ deviceId, dropped: window.dropped }, 'agent reports over the rate were dropped');
      window = { start: now, count: 0, dropped: 0 };
      this.rate.set(deviceId, window);
    }
    const allowed = Math.max(0, Math.min(wanted, this.deps.config.reportRatePerDevice - window.count));
    window.count += allowed;
    window.dropped += wanted - allowed;
    return allowed;
  }

  /** Keeps the newest REPORT_MAX_PER_DEVICE reports of a device. */
  private async trimDevice(deviceId: string): Promise<void> {
    const db = this.deps.db;
    const edge = await db
      .selectFrom('reports')
      .select('id')
      .where('device_id', '=', deviceId)
      .orderBy('id', 'desc')
      .offset(this.deps.config.reportMaxPerDevice)
      .limit(1)
      .executeTakeFirst();
    if (edge) await db.deleteFrom('reports').where('device_id', '=', deviceId).where('id', '<=', Number(edge.id)).execute();
  }

  /**
   * Retention: removes reports older than REPORT_RETENTION_DAYS, those of devices no longer
   * enrolled, and the oldest beyond REPORT_MAX_TOTAL; forgets stale rate windows.
   */
  async sweep(now = new Date()): Promise<void> {
    const db = this.deps.db;
    const cutoff = new Date(now.getTime() - this.deps.config.reportRetentionDays * 86_400_000).toISOString();
    await db.deleteFrom('reports').where('received_at', '<', cutoff).execute();
    await db.deleteFrom('reports').where('device_id', 'not in', enrolledDeviceIds(db)).execute();
    const edge = await db.selectFrom('reports').select('id').orderBy('id', 'desc').offset(this.deps.config.reportMaxTotal).limit(1).executeTakeFirst();
    if (edge) await db.deleteFrom('reports').where('id', '<=', Number(edge.id)).execute();
    for (const [deviceId, window] of this.rate) if (now.getTime() - window.start >= RATE_WINDOW_MS) this.rate.delete(deviceId);
  }

  // ---- for the API ----------------------------------------------------------------------------

  /**
   * The reports of the devices the principal reaches under `permission`, below `nodeId` when given:
   * the query restricted to them, and the titles of the devices. Undefined when none is reachable.
   */
  private async scoped(principal: Principal, permission: 'reports:read' | 'device:read', nodeId?: string) {
    const visible = (await this.deps.devices.listVisibleDevices(principal, permission)).filter((d) => !nodeId || d.nodeIds.includes(nodeId));
    const titles = new Map(visible.map((d) => [d.deviceId, d.title]));
    if (visible.length === 0) return undefined;
    const base = this.deps.db.selectFrom('reports as r') as unknown as Scoped;
    // A grant on every device needs no list of ids: every device in the tree.
    const query =
      !nodeId && this.deps.access.reachesEveryDevice(principal, permission)
        ? base.where('r.device_id', 'in', deviceNodeIds(this.deps.db))
        : base.where(
            'r.device_id',
            'in',
            visible.map((d) => d.deviceId),
          );
    return { query, titles, ids: visible.map((d) => d.deviceId) };
  }

  private joinRead(query: Scoped, userId: string) {
    return query.leftJoin('report_reads as rr', (j) => j.onRef('rr.report_id', '=', 'r.id').on('rr.user_id', '=', userId));
  }

  /** `GET /reportlist`: one page of reports, filtered and sorted, with the caller's read state. */
  async list(principal: Principal, q: ReportListQuery): Promise<{ items: ReportItem[]; total: number }> {
    const scoped = await this.scoped(principal, 'reports:read', q.node_id);
    if (!scoped) return { items: [], total: 0 };
    let query = this.joinRead(scoped.query, principal.user.id);
    if (q.severity?.length) query = query.where('r.sev', 'in', q.severity);
    if (q.bundle !== undefined) query = query.where('r.bundle', '=', q.bundle);
    if (q.commit_id !== undefined) query = query.where('r.commit_id', '=', q.commit_id);
    if (q.from !== undefined) query = query.where('r.ts', '>=', q.from);
    if (q.to !== undefined) query = query.where('r.ts', '<=', q.to);
    if (q.read === true) query = query.where('rr.report_id', 'is not', null);
    if (q.read === false) query = query.where('rr.report_id', 'is', null);
    const search = q.search?.trim();
    if (search) {
      const pattern = likePattern(search);
      query = query.where((eb) =>
        eb.or([
          eb(sql`lower(r.text)`, 'like', sql`${pattern} escape '\\'`),
          eb(sql`lower(r.bundle)`, 'like', sql`${pattern} escape '\\'`),
          eb(sql`lower(r.labels)`, 'like', sql`${pattern} escape '\\'`),
        ]),
      );
    }
    const counted = await query.select((eb) => eb.fn.countAll<string | number>().as('n')).executeTakeFirst();
    const direction = q.sort_direction ?? 'desc';
    const column = { ts: 'r.ts', sev: 'r.level', received: 'r.id', bundle: 'r.bundle' }[q.sort_field ?? 'ts'] as 'r.ts' | 'r.level' | 'r.id' | 'r.bundle';
    const rows = await query
      .select([
        'r.id',
        'r.device_id',
        'r.bundle',
        'r.bundle_commit_id',
        'r.commit_id',
        'r.labels',
        'r.sev',
        'r.text',
        'r.log',
        'r.ts',
        'r.received_at',
        'rr.read_at',
      ])
      .orderBy(column, direction)
      .orderBy('r.id', direction)
      .offset(q.offset)
      .limit(q.items_per_page)
      .execute();
    return {
      total: Number(counted?.n ?? 0),
      items: rows.map((r) => ({
        id: Number(r.id),
        node_id: r.device_id,
        device_id: r.device_id,
        title: scoped.titles.get(r.device_id) ?? r.device_id.slice(0, 12),
        bundle: r.bundle,
        bundle_commit_id: r.bundle_commit_id,
        commit_id: r.commit_id,
        labels: r.labels,
        sev: r.sev as ReportSeverity,
        text: r.text,
        log: r.log ?? '',
        ts: Number(r.ts),
        received: Math.floor(Date.parse(r.received_at) / 1000),
        read: r.read_at !== null,
      })),
    };
  }

  /** Reports by severity over the given devices (everyone's, read or not): the fleet counts of /analysis/orgstats. */
  async severityCounts(deviceIds: string[]): Promise<Record<ReportSeverity, number>> {
    const out: Record<ReportSeverity, number> = { INFO: 0, WARN: 0, ERR: 0, CRIT: 0 };
    for (let i = 0; i < deviceIds.length; i += ID_BATCH) {
      const rows = await this.deps.db
        .selectFrom('reports')
        .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH))
        .select((eb) => ['sev', eb.fn.countAll<string | number>().as('n')])
        .groupBy('sev')
        .execute();
      for (const row of rows) if (SEVERITIES.includes(row.sev as ReportSeverity)) out[row.sev as ReportSeverity] += Number(row.n);
    }
    return out;
  }

  /** Counts by device and severity, read and all, of the given devices for one user. */
  private async counts(ids: string[], userId: string): Promise<Map<string, ReportCounts>> {
    const out = new Map<string, ReportCounts>();
    for (let i = 0; i < ids.length; i += ID_BATCH) {
      const base = this.deps.db.selectFrom('reports as r').where('r.device_id', 'in', ids.slice(i, i + ID_BATCH)) as unknown as Scoped;
      const rows = await this.joinRead(base, userId)
        .select((eb) => [
          'r.device_id',
          'r.sev',
          eb.fn.countAll<string | number>().as('n'),
          eb.fn.count<string | number>('rr.report_id').as('read'),
          eb.fn.max('r.ts').as('last'),
        ])
        .groupBy(['r.device_id', 'r.sev'])
        .execute();
      for (const row of rows) {
        const sev = row.sev as ReportSeverity;
        if (!SEVERITIES.includes(sev)) continue;
        const c = out.get(row.device_id) ?? emptySummary();
        const n = Number(row.n);
        const unread = n - Number(row.read);
        c.total += n;
        c.unread += unread;
        c.severity[sev] += n;
        c.unread_severity[sev] += unread;
        c.last_ts = Math.max(c.last_ts, Number(row.last ?? 0));
        out.set(row.device_id, c);
      }
    }
    return out;
  }

  /** `GET /reportsummary/{device_id}` (the route checked reports:read on the device). */
  async deviceSummary(principal: Principal, deviceId: string): Promise<ReportCounts & { node_id: string }> {
    const counts = (await this.counts([deviceId], principal.user.id)).get(deviceId) ?? emptySummary();
    return { node_id: deviceId, ...counts };
  }

  /**
   * `GET /groupreportssummary/{group_id}`: the counts of the devices below a node (or the device
   * itself) that the caller reads under device:read, in all and per device with reports. A group the
   * caller may not see answers 404 like an unknown one.
   */
  async groupSummary(principal: Principal, nodeId: string) {
    // Unknown, or a group the caller may not see: 404, as GET /node/{node_id} answers.
    await this.deps.devices.node(principal, nodeId);
    const scoped = await this.scoped(principal, 'device:read', nodeId);
    const all = emptySummary();
    if (!scoped) return { node_id: nodeId, devices: 0, ...all, items: [] };
    const perDevice = await this.counts(scoped.ids, principal.user.id);
    const items = [...perDevice.entries()].map(([deviceId, c]) => {
      all.total += c.total;
      all.unread += c.unread;
      for (const sev of SEVERITIES) {
        all.severity[sev] += c.severity[sev];
        all.unread_severity[sev] += c.unread_severity[sev];
      }
      all.last_ts = Math.max(all.last_ts, c.last_ts);
      return { node_id: deviceId, title: scoped.titles.get(deviceId) ?? deviceId.slice(0, 12), ...c };
    });
    // Worst first: unread critical, then errors, warnings.
    items.sort(
      (a, b) =>
        b.unread_severity.CRIT - a.unread_severity.CRIT ||
        b.unread_severity.ERR - a.unread_severity.ERR ||
        b.unread_severity.WARN - a.unread_severity.WARN ||
        b.unread - a.unread ||
        (a.title < b.title ? -1 : 1),
    );
    return { node_id: nodeId, devices: scoped.ids.length, ...all, items };
  }

  /**
   * Marks reports read (or unread with `read: false`) for the caller: the given ids, or every report
   * of a node (device or group), or all, among the reports of `devices` (ids) or of the devices the
   * caller reads under reports:read. Answers how many changed.
   */
  async markRead(principal: Principal, body: MarkReadRequest, device?: string): Promise<{ changed: number }> {
    let query: Scoped;
    if (device !== undefined) {
      query = this.deps.db.selectFrom('reports as r').where('r.device_id', '=', device) as unknown as Scoped;
    } else {
      const scoped = await this.scoped(principal, 'reports:read', body.node_id);
      if (!scoped) return { changed: 0 };
      query = scoped.query;
    }
    if (body.ids) {
      if (body.ids.length === 0) return { changed: 0 };
      query = query.where('r.id', 'in', body.ids);
    }
    const userId = principal.user.id;
    const db = this.deps.db;
    if (body.read === false) {
      const result = await db
        .deleteFrom('report_reads')
        .where('user_id', '=', userId)
        .where('report_id', 'in', query.select('r.id') as never)
        .executeTakeFirst();
      return { changed: Number(result.numDeletedRows) };
    }
    const now = new Date().toISOString();
    const unread = this.joinRead(query, userId)
      .where('rr.report_id', 'is', null)
      .select((eb) => ['r.id', eb.val(userId).as('user_id'), eb.val(now).as('read_at')]);
    const result = await db
      .insertInto('report_reads')
      .columns(['report_id', 'user_id', 'read_at'])
      .expression(unread as never)
      .onConflict((oc) => oc.columns(['user_id', 'report_id']).doNothing())
      .executeTakeFirst();
    return { changed: Number(result.numInsertedOrUpdatedRows ?? 0) };
  }
}
