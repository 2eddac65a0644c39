/**
 * The typed inventory an agent reports (shared/inventory.ts): checking a payload from a hostile
 * peer, storing it per device and type (packages also one row each), and how a fleet summary
 * groups items (its keys, its counts). No HTTP and no access decisions here: the service decides who sees what.
 */
import type { Db } from '../db/database.js';
import { INVENTORY_PAYLOADS, isInventoryItemType, type InventoryItemType } from '../../shared/inventory.js';

/** The largest payload stored (JSON text); the agent socket itself stops at 4 MiB. */
export const MAX_ITEM_BYTES = 3 * 1024 * 1024;
/** Rows per INSERT: well under SQLite's and PostgreSQL's parameter limits (6 columns each). */
const INSERT_BATCH = 500;
/** Ids per `IN (...)` query. */
export const ID_BATCH = 500;

export type ItemCheck = { ok: true; type: InventoryItemType; digest: string; data: Record<string, unknown>; json: string } | { ok: false; reason: string };

/** Checks an `inventory_item` message: known type, hex digest, size, and the type's schema (unknown fields stripped). */
export function checkItem(msg: { type?: unknown; digest?: unknown; data?: unknown }): ItemCheck {
  if (!isInventoryItemType(msg.type)) return { ok: false, reason: 'unknown item type' };
  if (typeof msg.digest !== 'string' || !/^[0-9a-f]{64}$/.test(msg.digest)) return { ok: false, reason: 'digest is not a sha256 hex string' };
  let size: number;
  try {
    size = JSON.stringify(msg.data ?? null).length;
  } catch {
    return { ok: false, reason: 'data is not JSON' };
  }
  if (size > MAX_ITEM_BYTES) return { ok: false, reason: `data of ${size} bytes exceeds ${MAX_ITEM_BYTES}` };
  const parsed = INVENTORY_PAYLOADS[msg.type].safeParse(msg.data);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { ok: false, reason: `${issue.path.join('.') || 'data'}: ${issue.message}` };
  }
  const data = parsed.data as Record<string, unknown>;
  return { ok: true, type: msg.type, digest: msg.digest, data, json: JSON.stringify(data) };
}

/** Replaces one type of a device's inventory; software also replaces the device's package rows. */
export async function saveItem(db: Db, deviceId: string, item: Extract<ItemCheck, { ok: true }>, now: string): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await trx
      .insertInto('inventory_items')
      .values({ device_id: deviceId, item_type: item.type, data: item.json, digest: item.digest, updated_at: now })
      .onConflict((oc) => oc.columns(['device_id', 'item_type']).doUpdateSet({ data: item.json, digest: item.digest, updated_at: now }))
      .execute();
    if (item.type !== 'software') return;
    const software = item.data as { pkg_manager: string; items: Array<{ name: string; version: string; arch?: string; source?: string }> };
    await trx.deleteFrom('inventory_packages').where('device_id', '=', deviceId).execute();
    // The same name and arch twice (a broken status file) is kept once.
    const seen = new Set<string>();
    const rows = software.items
      .filter((p) => {
        const key = `${p.name}\u0000${p.arch ?? ''}`;
        if (seen.has(key)) return false;
        seen.add(key);
        return true;
      })
      .map((p) => ({
        device_id: deviceId,
        name: p.name,
        version: p.version,
        arch: p.arch ?? '',
        pkg_manager: software.pkg_manager,
        source: p.source && p.source !== p.name ? p.source : null,
      }));
    for (let i = 0; i < rows.length; i += INSERT_BATCH)
      await trx
        .insertInto('inventory_packages')
        .values(rows.slice(i, i + INSERT_BATCH))
        .execute();
  });
}

/** Removes the device's item types not in `keep` (an engine or package manager the agent no longer finds). */
export async function forgetOtherTypes(db: Db, deviceId: string, keep: InventoryItemType[]): Promise<void> {
  let q = db.deleteFrom('inventory_items').where('device_id', '=', deviceId);
  if (keep.length > 0) q = q.where('item_type', 'not in', keep);
  await q.execute();
  if (!keep.includes('software')) await db.deleteFrom('inventory_packages').where('device_id', '=', deviceId).execute();
}

export interface StoredItem {
  data: Record<string, unknown>;
  updated_at: string;
}

function parse(json: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(json);
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

export async function readItem(db: Db, deviceId: string, type: InventoryItemType): Promise<StoredItem | undefined> {
  const row = await db
    .selectFrom('inventory_items')
    .select(['data', 'updated_at'])
    .where('device_id', '=', deviceId)
    .where('item_type', '=', type)
    .executeTakeFirst();
  return row && { data: parse(row.data), updated_at: row.updated_at };
}

/** One type of many devices' inventory (those that reported it). */
export async function readItems(db: Db, deviceIds: string[], type: InventoryItemType): Promise<Map<string, StoredItem>> {
  const out = new Map<string, StoredItem>();
  for (let i = 0; i < deviceIds.length; i += ID_BATCH) {
    const rows = await db
      .selectFrom('inventory_items')
      .select(['device_id', 'data', 'updated_at'])
      .where('item_type', '=', type)
      .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH))
      .execute();
    for (const row of rows) out.set(row.device_id, { data: parse(row.data), updated_at: row.updated_at });
  }
  return out;
}

export interface PackageRow {
  device_id: string;
  name: string;
  version: string;
  arch: string;
  pkg_manager: string;
}

/** The devices (among `deviceIds`) with a package of this exact name installed, and its versions there. */
export async function packagesNamed(db: Db, name: string, deviceIds: string[]): Promise<PackageRow[]> {
  const out: PackageRow[] = [];
  for (let i = 0; i < deviceIds.length; i += ID_BATCH) {
    out.push(
      ...(await db
        .selectFrom('inventory_packages')
        .select(['device_id', 'name', 'version', 'arch', 'pkg_manager'])
        .where('name', '=', name)
        .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH))
        .execute()),
    );
  }
  return out;
}

/** name/version/arch → how many of `deviceIds` have it installed (grouped in SQL, batch by batch). */
export async function packageCounts(
  db: Db,
  deviceIds: string[],
  nameContains?: string,
): Promise<Map<string, { name: string; version: string; arch: string; devices: number }>> {
  const out = new Map<string, { name: string; version: string; arch: string; devices: number }>();
  for (let i = 0; i < deviceIds.length; i += ID_BATCH) {
    let q = db
      .selectFrom('inventory_packages')
      .select(['name', 'version', 'arch', (eb) => eb.fn.countAll<number | string>().as('n')])
      .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH));
    if (nameContains) q = q.where((eb) => eb(eb.fn('lower', ['name']), 'like', `%${escapeLike(nameContains.toLowerCase())}%`));
    for (const row of await q.groupBy(['name', 'version', 'arch']).execute()) {
      const key = `${row.name}\u0000${row.version}\u0000${row.arch}`;
      const entry = out.get(key) ?? { name: row.name, version: row.version, arch: row.arch, devices: 0 };
      entry.devices += Number(row.n);
      out.set(key, entry);
    }
  }
  return out;
}

/** LIKE wildcards in a search are dropped (ESCAPE differs between SQLite and PostgreSQL): the search is plain text. */
function escapeLike(s: string): string {
  return s.replace(/[%_\\]/g, '');
}

/** What a fleet summary groups the items of a type by (the first field is the one `search` matches). */
export const SUMMARY_KEYS: Record<Exclude<InventoryItemType, 'software'>, (item: Record<string, unknown>) => Record<string, string | number>> = {
  docker_containers: (c) => ({ image: String(c.image ?? '') }),
  podman_containers: (c) => ({ image: String(c.image ?? '') }),
  docker_images: (i) => ({ repository: String(i.repository ?? ''), tag: String(i.tag ?? '') }),
  podman_images: (i) => ({ repository: String(i.repository ?? ''), tag: String(i.tag ?? '') }),
  users: (u) => ({ user: String(u.user ?? '') }),
  groups: (g) => ({ group: String(g.group ?? '') }),
  ports: (p) => ({ port: Number(/:(\d+)$/.exec(String(p.socket ?? ''))?.[1] ?? 0), proto: String(p.proto ?? '') }),
  processes: (p) => ({ program: String(p.cmdline ?? '').split(' ')[0] }),
};

/** Which of `deviceIds` have reported this type. */
export async function reportedDevices(db: Db, deviceIds: string[], type: InventoryItemType): Promise<Set<string>> {
  const out = new Set<string>();
  for (let i = 0; i < deviceIds.length; i += ID_BATCH) {
    const rows = await db
      .selectFrom('inventory_items')
      .select('device_id')
      .where('item_type', '=', type)
      .where('device_id', 'in', deviceIds.slice(i, i + ID_BATCH))
      .execute();
    for (const row of rows) out.add(row.device_id);
  }
  return out;
}

/** The text a group's key fields make, for ordering and telling groups apart. */
export const keyText = (g: Record<string, unknown>) =>
  Object.entries(g)
    .filter(([k]) => k !== 'devices')
    .map(([, v]) => String(v))
    .join('\u0000');

/** Per device a list of keys (duplicates counted once per device) → each key with its device count; `needle` matches the first field. */
export function countGroups(
  perDevice: Array<Array<Record<string, string | number>>>,
  needle?: string,
): Array<Record<string, string | number> & { devices: number }> {
  const counts = new Map<string, Record<string, string | number> & { devices: number }>();
  for (const keys of perDevice) {
    const seen = new Set<string>();
    for (const key of keys) {
      const text = keyText(key);
      if (seen.has(text)) continue;
      seen.add(text);
      if (needle && !String(Object.values(key)[0]).toLowerCase().includes(needle)) continue;
      const entry = counts.get(text) ?? { ...key, devices: 0 };
      entry.devices += 1;
      counts.set(text, entry);
    }
  }
  return [...counts.values()];
}

/**
 * At most `limit` payloads per device in each window: an agent sends at most one per type per
 * collection, so a device sending far more is hostile or broken, and its excess is dropped before
 * it costs a database write. One entry per device that sent something in the current window.
 */
export class ItemRate {
  private readonly windows = new Map<string, { start: number; count: number }>();

  constructor(
    private readonly limit = 100,
    private readonly windowMs = 60_000,
  ) {}

  /** Counts one payload of the device; false when it is over the limit of the current window. */
  take(deviceId: string, now = Date.now()): boolean {
    if (this.windows.size > 10_000) for (const [id, w] of this.windows) if (now - w.start >= this.windowMs) this.windows.delete(id);
    const w = this.windows.get(deviceId);
    if (!w || now - w.start >= this.windowMs) {
      this.windows.set(deviceId, { start: now, count: 1 });
      return true;
    }
    w.count += 1;
    return w.count <= this.limit;
  }
}
