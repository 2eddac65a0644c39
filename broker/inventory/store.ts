/**
 * The inventory report table (`inventory`: an agent's last report per device), and what other domains
 * read of inventories or remove with a device: reports by device, installed packages (CVE matching),
 * and the cascade of a removed device. No HTTP and no access decisions here; the typed items are in
 * items.ts.
 */
import type { Db } from '../db/database.js';
import { ID_BATCH } from './items.js';

export interface ReportRow {
  device_id: string;
  /** The report as JSON text. */
  data: string;
  updated_at: string;
}

/** Stores a device's report, replacing the previous one. */
export async function saveReport(db: Db, deviceId: string, json: string, now: string): Promise<void> {
  await db
    .insertInto('inventory')
    .values({ device_id: deviceId, data: json, updated_at: now })
    .onConflict((oc) => oc.column('device_id').doUpdateSet({ data: json, updated_at: now }))
    .execute();
}

/** A device's last report, or undefined before its first. */
export async function readReport(db: Db, deviceId: string): Promise<ReportRow | undefined> {
  return db.selectFrom('inventory').selectAll().where('device_id', '=', deviceId).executeTakeFirst();
}

/** The last reports of these devices (those without one are missing): one query per batch of ids. */
export async function readReports(db: Db, deviceIds: string[]): Promise<ReportRow[]> {
  const out: ReportRow[] = [];
  for (let i = 0; i < deviceIds.length; i += ID_BATCH)
    out.push(
      ...(await db
        .selectFrom('inventory')
        .selectAll()
        .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH))
        .execute()),
    );
  return out;
}

/** A package a device reported installed, as CVE matching reads it. */
export interface InstalledPackageRow {
  device_id: string;
  name: string;
  version: string;
  pkg_manager: string;
  source: string | null;
}

/** The installed packages of these devices, in one query (the caller bounds the ids). */
export async function installedPackages(db: Db, deviceIds: string[]): Promise<InstalledPackageRow[]> {
  if (deviceIds.length === 0) return [];
  return db.selectFrom('inventory_packages').select(['device_id', 'name', 'version', 'pkg_manager', 'source']).where('device_id', 'in', deviceIds).execute();
}

/** Every device that reported packages, sorted by id. */
export async function devicesWithPackages(db: Db): Promise<string[]> {
  return (await db.selectFrom('inventory_packages').select('device_id').distinct().execute()).map((r) => r.device_id).sort();
}

/** Removes everything inventory holds of these devices (a device being removed), in the caller's transaction. */
export async function deleteDeviceInventory(trx: Db, deviceIds: string[]): Promise<void> {
  for (let i = 0; i < deviceIds.length; i += ID_BATCH) {
    const ids = deviceIds.slice(i, i + ID_BATCH);
    await trx.deleteFrom('inventory').where('device_id', 'in', ids).execute();
    await trx.deleteFrom('inventory_items').where('device_id', 'in', ids).execute();
    await trx.deleteFrom('inventory_packages').where('device_id', 'in', ids).execute();
  }
}
