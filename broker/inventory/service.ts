import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { AgentLocator } from '../agents/locator.js';
import type { Db } from '../db/database.js';
import type { DevicesService } from '../devices/service.js';
import { ApiError, notFound } from '../http/errors.js';
import type { DeviceScope } from '../../shared/resources.js';
import { readAttributes } from '../devices/attributes.js';
import { unixSeconds } from '../devices/tree.js';
import { parseJsonSearch } from '../http/search.js';
import { inventorySearch, matchesSearch, QBEE_INVENTORY_KEYS, searchNeedsReport, systemInfo, type InventoryDevice, type InventorySearch } from './qbee.js';

/** The largest inventory report stored (JSON text); a bigger one is refused and logged. */
export const MAX_INVENTORY_BYTES = 512 * 1024;

export interface InventoryItem {
  device_id: string;
  /** When the broker received the report (ISO 8601); null before the first one. */
  received_at: string | null;
  [field: string]: unknown;
}

export interface InventoryListItem extends InventoryItem {
  title: string;
  connected: boolean;
  last_seen: string | null;
}

export interface InventoryListQuery {
  offset: number;
  items_per_page: number;
  search?: string;
  sort_field?: 'title' | 'device_name' | 'last_reported_time';
  sort_direction?: 'asc' | 'desc';
}

type DescribedDevice = InventoryDevice & { receivedAt: string | null };

/** Ids per `IN (...)` query: well under SQLite's and PostgreSQL's parameter limits. */
const ID_BATCH = 500;

/** A report without the keys qbee's records type strictly: those are the broker's to fill. */
function withoutQbeeKeys(report: Record<string, unknown>): Record<string, unknown> {
  const out = { ...report };
  for (const key of QBEE_INVENTORY_KEYS) delete out[key];
  return out;
}

function parseReport(json: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(json);
    return v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/**
 * Device inventory: the agent's last report (host name, OS, kernel, CPU, memory, disks, network
 * interfaces, agent version), kept per device and served to holders of inventory:read, limited to
 * the devices their device:read reaches when they hold device:read on some devices only.
 */
export class InventoryService {
  constructor(
    private readonly db: Db,
    private readonly access: Pick<AccessService, 'require' | 'inventoryScope'>,
    private readonly devices: Pick<DevicesService, 'getDevice' | 'listVisibleDevices'>,
    private readonly agents: Pick<AgentLocator, 'isConnected'>,
  ) {}

  async init(): Promise<void> {}

  async close(): Promise<void> {}

  /** Stores an agent's report (the hub calls this), replacing the previous one. */
  async record(deviceId: string, data: Record<string, unknown>): Promise<void> {
    const json = JSON.stringify(data);
    if (json.length > MAX_INVENTORY_BYTES) throw new Error(`inventory report of ${json.length} bytes exceeds ${MAX_INVENTORY_BYTES}`);
    const now = new Date().toISOString();
    const db = this.db;
    // Only approved devices in the tree keep an inventory (a removed device's late report is dropped).
    const device = await db.selectFrom('devices').select('state').where('device_id', '=', deviceId).executeTakeFirst();
    if (device?.state !== 'approved') return;
    await db
      .insertInto('inventory')
      .values({ device_id: deviceId, data: json, updated_at: now })
      .onConflict((oc) => oc.column('device_id').doUpdateSet({ data: json, updated_at: now }))
      .execute();
  }

  /** The permission whose resources limit which devices' inventory a caller reaches (decided in access). */
  private scopingPermission(principal: Principal): 'device:read' | 'inventory:read' {
    return this.access.inventoryScope(principal);
  }

  /** One device's last report, with qbee's DeviceInventory fields. 404 when the device is unknown or has not reported yet. */
  async get(principal: Principal, deviceId: string): Promise<InventoryItem> {
    if (this.scopingPermission(principal) === 'device:read') await this.access.require(principal, 'device:read', deviceId);
    else if (!(await this.devices.getDevice(deviceId))?.node) throw notFound(`Device ${deviceId}`);
    const row = await this.db.selectFrom('inventory').selectAll().where('device_id', '=', deviceId).executeTakeFirst();
    if (!row) throw new ApiError(404, 'no_inventory', `Device ${deviceId} has not reported its inventory yet (its agent reports when it connects).`);
    const scope = (await this.devices.listVisibleDevices(principal, this.scopingPermission(principal))).find((d) => d.deviceId === deviceId);
    const [device] = await this.describe(scope ? [scope] : [{ deviceId, nodeIds: [deviceId], tags: [], title: deviceId.slice(0, 12) }], true);
    return {
      ...withoutQbeeKeys(parseReport(row.data)),
      device_id: deviceId,
      received_at: row.updated_at,
      pub_key_digest: deviceId,
      system: systemInfo(device),
      last_reported: unixSeconds(device.lastSeen ?? row.updated_at) ?? 0,
      status: this.agents.isConnected(deviceId) ? 'online' : 'offline',
      tags: device.tags,
      attributes: device.attributes,
    };
  }

  /**
   * Devices whose inventory the principal reaches, filtered by qbee's search (JSON) or a plain text
   * (part of the title or the start of the id), sorted, one page; each with its last report (if any)
   * and qbee's InventoryListItem fields.
   */
  async list(principal: Principal, query: InventoryListQuery): Promise<{ items: InventoryListItem[]; total: number }> {
    const raw = query.search?.trim() ?? '';
    const search: InventorySearch = raw.startsWith('{') ? parseJsonSearch(raw, inventorySearch) : {};
    const text = raw.startsWith('{') ? '' : raw.toLowerCase();
    const visible = (await this.devices.listVisibleDevices(principal, this.scopingPermission(principal))).filter(
      (d) => !text || d.title.toLowerCase().includes(text) || d.deviceId.startsWith(text),
    );
    const field = query.sort_field ?? 'title';
    // Reports are read for every device only when a filter or the order needs them; else for the page only.
    const wholeReports = searchNeedsReport(search);
    const described = await this.describe(visible, wholeReports);
    const matched = described.filter((d) => matchesSearch(d, search));
    const key = (d: InventoryDevice): string | number =>
      field === 'last_reported_time' ? (unixSeconds(d.lastSeen) ?? 0) : field === 'device_name' ? String(d.attributes.device_name ?? '') : d.title;
    const direction = query.sort_direction === 'desc' ? -1 : 1;
    matched.sort((a, b) => {
      const x = key(a);
      const y = key(b);
      const c = x < y ? -1 : x > y ? 1 : 0;
      return (c || (a.deviceId < b.deviceId ? -1 : 1)) * direction;
    });
    const page = matched.slice(query.offset, query.offset + query.items_per_page);
    if (!wholeReports) await this.readReports(page);
    const items = page.map((d): InventoryListItem => {
      const connected = this.agents.isConnected(d.deviceId);
      return {
        ...withoutQbeeKeys(d.report),
        device_id: d.deviceId,
        title: d.title,
        connected,
        last_seen: d.lastSeen,
        received_at: d.receivedAt,
        node_id: d.deviceId,
        pub_key_digest: d.deviceId,
        uuid: d.deviceId,
        system: systemInfo(d),
        last_reported_time: unixSeconds(d.lastSeen) ?? 0,
        ancestors: [...d.nodeIds].reverse(),
        attributes: d.attributes,
        status: connected ? 'online' : 'offline',
        tags: d.tags,
      };
    });
    return { items, total: matched.length };
  }

  /** The devices' rows (and, with `reports`, their last reports) in the shape the qbee mapping reads. */
  private async describe(scopes: Array<DeviceScope & { title: string }>, reports: boolean): Promise<DescribedDevice[]> {
    const db = this.db;
    const rows = new Map<string, { hostname: string; last_ip: string | null; last_seen: string | null; agent_version: string | null; attributes: string }>();
    for (let i = 0; i < scopes.length; i += ID_BATCH) {
      const ids = scopes.slice(i, i + ID_BATCH).map((d) => d.deviceId);
      const found = await db
        .selectFrom('devices')
        .select(['device_id', 'hostname', 'last_ip', 'last_seen', 'agent_version', 'attributes'])
        .where('device_id', 'in', ids)
        .execute();
      for (const row of found) rows.set(row.device_id, row);
    }
    const out = scopes.map((d): DescribedDevice => {
      const row = rows.get(d.deviceId);
      return {
        deviceId: d.deviceId,
        title: d.title,
        nodeIds: d.nodeIds,
        tags: d.tags,
        hostname: row?.hostname ?? '',
        lastIp: row?.last_ip ?? null,
        lastSeen: row?.last_seen ?? null,
        agentVersion: row?.agent_version ?? null,
        attributes: { ...readAttributes(row?.attributes) },
        report: {},
        receivedAt: null,
      };
    });
    if (reports) await this.readReports(out);
    return out;
  }

  private async readReports(devices: DescribedDevice[]): Promise<void> {
    const db = this.db;
    const byId = new Map(devices.map((d) => [d.deviceId, d]));
    for (let i = 0; i < devices.length; i += ID_BATCH) {
      const ids = devices.slice(i, i + ID_BATCH).map((d) => d.deviceId);
      for (const row of await db.selectFrom('inventory').selectAll().where('device_id', 'in', ids).execute()) {
        const d = byId.get(row.device_id);
        if (d) Object.assign(d, { report: parseReport(row.data), receivedAt: row.updated_at });
      }
    }
  }

  /** How many of the devices the principal reaches have their agent connected now. */
  async onlineStats(principal: Principal): Promise<{ online: number; offline: number; total: number }> {
    const visible = await this.devices.listVisibleDevices(principal, this.scopingPermission(principal));
    const online = visible.filter((d) => this.agents.isConnected(d.deviceId)).length;
    return { online, offline: visible.length - online, total: visible.length };
  }
}
