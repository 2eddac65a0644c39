/**
 * The CVE tables (broker/db/migrations/0013-cve.ts): the imported feed, the matches against
 * installed packages and the decisions per CVE. No HTTP and no access decisions here.
 */
import type { Db } from '../db/database.js';
import type { Advisory, RangeEvent } from './osv.js';
import type { SeverityLevel } from './cvss.js';
import type { Match } from './match.js';

/** Rows per INSERT (at most 7 columns each): well under SQLite's and PostgreSQL's parameter limits. */
const INSERT_BATCH = 500;
/** Ids per `IN (...)` query. */
export const ID_BATCH = 500;

export interface AdvisoryRow {
  advisory_id: string;
  cve_ids: string[];
  summary: string;
  score: number | null;
  severity: SeverityLevel;
  published: string | null;
  modified: string | null;
}

function parseIds(json: string): string[] {
  try {
    const v: unknown = JSON.parse(json);
    return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
  } catch {
    return [];
  }
}

/** Adds or replaces advisories (by OSV id) with their affected packages. */
export async function saveAdvisories(db: Db, advisories: Advisory[], now: string): Promise<void> {
  for (let i = 0; i < advisories.length; i += ID_BATCH) {
    const batch = advisories.slice(i, i + ID_BATCH);
    const ids = batch.map((a) => a.id);
    await db.deleteFrom('cve_affected').where('advisory_id', 'in', ids).execute();
    await db.deleteFrom('cve_advisories').where('advisory_id', 'in', ids).execute();
    const rows = batch.map((a) => ({
      advisory_id: a.id,
      cve_ids: JSON.stringify(a.cveIds),
      summary: a.summary,
      score: a.score,
      severity: a.severity,
      published: a.published,
      modified: a.modified,
      imported_at: now,
    }));
    for (let j = 0; j < rows.length; j += 100)
      await db
        .insertInto('cve_advisories')
        .values(rows.slice(j, j + 100))
        .execute();
    const affected = batch.flatMap((a) =>
      a.affected.map((p) => ({ advisory_id: a.id, ecosystem: p.ecosystem, name: p.name, data: JSON.stringify({ ranges: p.ranges, versions: p.versions }) })),
    );
    for (let j = 0; j < affected.length; j += INSERT_BATCH)
      await db
        .insertInto('cve_affected')
        .values(affected.slice(j, j + INSERT_BATCH))
        .execute();
  }
}

/** Changes whenever the feed does (an import stamps imported_at, a removal stamps what it changed, or lowers the count). */
export async function feedKey(db: Db): Promise<string> {
  const row = await db
    .selectFrom('cve_advisories')
    .select([(eb) => eb.fn.countAll<number | string>().as('n'), (eb) => eb.fn.max('imported_at').as('last')])
    .executeTakeFirst();
  return `${Number(row?.n ?? 0)}:${row?.last ?? ''}`;
}

/** What the imported feed holds: its advisory count, when it was last imported, and the newest date the feed itself gives. */
export async function feedState(db: Db): Promise<{ advisories: number; imported_at: string | null; feed_date: string | null }> {
  const row = await db
    .selectFrom('cve_advisories')
    .select([
      (eb) => eb.fn.countAll<number | string>().as('n'),
      (eb) => eb.fn.max('imported_at').as('imported_at'),
      (eb) => eb.fn.max('modified').as('modified'),
      (eb) => eb.fn.max('published').as('published'),
    ])
    .executeTakeFirst();
  const advisories = Number(row?.n ?? 0);
  return { advisories, imported_at: row?.imported_at ?? null, feed_date: row?.modified ?? row?.published ?? null };
}

export async function readAdvisories(db: Db): Promise<AdvisoryRow[]> {
  const rows = await db.selectFrom('cve_advisories').select(['advisory_id', 'cve_ids', 'summary', 'score', 'severity', 'published', 'modified']).execute();
  return rows.map((r) => ({ ...r, cve_ids: parseIds(r.cve_ids), score: r.score === null ? null : Number(r.score), severity: r.severity as SeverityLevel }));
}

export interface AffectedRow {
  advisory_id: string;
  ecosystem: string;
  name: string;
  ranges: RangeEvent[][];
  versions: string[];
}

export async function readAffected(db: Db): Promise<AffectedRow[]> {
  const rows = await db.selectFrom('cve_affected').select(['advisory_id', 'ecosystem', 'name', 'data']).execute();
  return rows.map((r) => {
    let data: { ranges?: RangeEvent[][]; versions?: string[] } = {};
    try {
      data = JSON.parse(r.data) as typeof data;
    } catch {
      // A row this code did not write: it affects nothing.
    }
    return { advisory_id: r.advisory_id, ecosystem: r.ecosystem, name: r.name, ranges: data.ranges ?? [], versions: data.versions ?? [] };
  });
}

/** Replaces the matches of these devices (all devices when `deviceIds` is undefined). */
export async function replaceMatches(db: Db, deviceIds: string[] | undefined, matches: Match[]): Promise<void> {
  if (deviceIds === undefined) await db.deleteFrom('cve_matches').execute();
  else
    for (let i = 0; i < deviceIds.length; i += ID_BATCH)
      await db
        .deleteFrom('cve_matches')
        .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH))
        .execute();
  await insertMatches(db, matches);
}

/** Removes the findings of these devices (a device being removed), in the caller's transaction. */
export async function deleteDeviceCveMatches(trx: Db, deviceIds: string[]): Promise<void> {
  for (let i = 0; i < deviceIds.length; i += ID_BATCH)
    await trx
      .deleteFrom('cve_matches')
      .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH))
      .execute();
}

export async function insertMatches(db: Db, matches: Match[]): Promise<void> {
  for (let i = 0; i < matches.length; i += INSERT_BATCH)
    await db
      .insertInto('cve_matches')
      .values(matches.slice(i, i + INSERT_BATCH))
      .execute();
}

/** cve id → how many of the devices have it (all devices with `deviceIds` undefined). */
export async function hostCounts(db: Db, deviceIds: string[] | undefined): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  const run = async (ids?: string[]) => {
    let q = db.selectFrom('cve_matches').select(['cve_id', (eb) => eb.fn.count<number | string>('device_id').distinct().as('n')]);
    if (ids) q = q.where('device_id', 'in', ids);
    for (const row of await q.groupBy('cve_id').execute()) out.set(row.cve_id, (out.get(row.cve_id) ?? 0) + Number(row.n));
  };
  if (deviceIds === undefined) await run();
  else for (let i = 0; i < deviceIds.length; i += ID_BATCH) await run(deviceIds.slice(i, i + ID_BATCH));
  return out;
}

/** cve id → the affected package names among the devices. */
export async function affectedPackages(db: Db, deviceIds: string[] | undefined): Promise<Map<string, Set<string>>> {
  const out = new Map<string, Set<string>>();
  const run = async (ids?: string[]) => {
    let q = db.selectFrom('cve_matches').select(['cve_id', 'package']).distinct();
    if (ids) q = q.where('device_id', 'in', ids);
    for (const row of await q.execute()) {
      const set = out.get(row.cve_id) ?? new Set<string>();
      set.add(row.package);
      out.set(row.cve_id, set);
    }
  };
  if (deviceIds === undefined) await run();
  else for (let i = 0; i < deviceIds.length; i += ID_BATCH) await run(deviceIds.slice(i, i + ID_BATCH));
  return out;
}

export async function matchesOfCve(db: Db, cveId: string) {
  return db.selectFrom('cve_matches').selectAll().where('cve_id', '=', cveId).orderBy('device_id').orderBy('package').execute();
}

export async function matchesOfDevice(db: Db, deviceId: string) {
  return db.selectFrom('cve_matches').selectAll().where('device_id', '=', deviceId).execute();
}

export interface StatusRow {
  cve_id: string;
  status: 'accepted' | 'ignored';
  reason: string;
  user_id: string;
  updated_at: string;
}

export async function readStatuses(db: Db): Promise<Map<string, StatusRow>> {
  const rows = await db.selectFrom('cve_status').selectAll().execute();
  return new Map(rows.map((r) => [r.cve_id, r as StatusRow]));
}

export async function readStatus(db: Db, cveId: string): Promise<StatusRow | undefined> {
  return (await db.selectFrom('cve_status').selectAll().where('cve_id', '=', cveId).executeTakeFirst()) as StatusRow | undefined;
}

export async function writeStatus(db: Db, row: StatusRow | { cve_id: string; status: 'open' }): Promise<void> {
  if (row.status === 'open') {
    await db.deleteFrom('cve_status').where('cve_id', '=', row.cve_id).execute();
    return;
  }
  await db
    .insertInto('cve_status')
    .values(row)
    .onConflict((oc) => oc.column('cve_id').doUpdateSet({ status: row.status, reason: row.reason, user_id: row.user_id, updated_at: row.updated_at }))
    .execute();
}

/**
 * Removes a CVE from the feed: its matches, its decision, and its id from the advisories listing
 * it (an advisory left with no id goes, with its affected packages). True when it was there.
 */
export async function removeCve(db: Db, cveId: string, advisories: AdvisoryRow[]): Promise<boolean> {
  const holding = advisories.filter((a) => a.cve_ids.includes(cveId));
  if (holding.length === 0) return false;
  for (const a of holding) {
    const left = a.cve_ids.filter((id) => id !== cveId);
    if (left.length === 0) {
      await db.deleteFrom('cve_affected').where('advisory_id', '=', a.advisory_id).execute();
      await db.deleteFrom('cve_advisories').where('advisory_id', '=', a.advisory_id).execute();
    } else
      await db
        .updateTable('cve_advisories')
        .set({ cve_ids: JSON.stringify(left) })
        .where('advisory_id', '=', a.advisory_id)
        .execute();
  }
  await db.deleteFrom('cve_matches').where('cve_id', '=', cveId).execute();
  await db.deleteFrom('cve_status').where('cve_id', '=', cveId).execute();
  return true;
}
