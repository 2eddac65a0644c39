import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { AgentLocator } from '../agents/locator.js';
import type { Db } from '../db/database.js';
import type { DevicesService } from '../devices/service.js';
import { ApiError, notFound } from '../http/errors.js';

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

  /** One device's last report. 404 when the device is unknown or has not reported yet. */
  async get(principal: Principal, deviceId: string): Promise<InventoryItem> {
    if (this.scopingPermission(principal) === 'device:read') await this.access.require(principal, 'device:read', deviceId);
    else if (!(await this.devices.getDevice(deviceId))?.node) throw notFound(`Device ${deviceId}`);
    const row = await this.db.selectFrom('inventory').selectAll().where('device_id', '=', deviceId).executeTakeFirst();
    if (!row) throw new ApiError(404, 'no_inventory', `Device ${deviceId} has not reported its inventory yet (its agent reports when it connects).`);
    return { ...parseReport(row.data), device_id: deviceId, received_at: row.updated_at };
  }

  /** Devices whose inventory the principal reaches, by title, each with its last report (if any). */
  async list(principal: Principal, query: { offset: number; items_per_page: number; search?: string }): Promise<{ items: InventoryListItem[]; total: number }> {
    const search = query.search?.toLowerCase();
    const visible = (await this.devices.listVisibleDevices(principal, this.scopingPermission(principal)))
      .filter((d) => !search || d.title.toLowerCase().includes(search) || d.deviceId.startsWith(search))
      .sort((a, b) => (a.title < b.title ? -1 : a.title > b.title ? 1 : a.deviceId < b.deviceId ? -1 : 1));
    const page = visible.slice(query.offset, query.offset + query.items_per_page);
    const ids = page.map((d) => d.deviceId);
    const db = this.db;
    const reports = new Map<string, { data: string; updated_at: string }>();
    const lastSeen = new Map<string, string | null>();
    if (ids.length > 0) {
      for (const row of await db.selectFrom('inventory').selectAll().where('device_id', 'in', ids).execute()) reports.set(row.device_id, row);
      for (const row of await db.selectFrom('devices').select(['device_id', 'last_seen']).where('device_id', 'in', ids).execute())
        lastSeen.set(row.device_id, row.last_seen);
    }
    const items = page.map((d): InventoryListItem => {
      const report = reports.get(d.deviceId);
      return {
        ...(report ? parseReport(report.data) : {}),
        device_id: d.deviceId,
        title: d.title,
        connected: this.agents.isConnected(d.deviceId),
        last_seen: lastSeen.get(d.deviceId) ?? null,
        received_at: report?.updated_at ?? null,
      };
    });
    return { items, total: visible.length };
  }

  /** How many of the devices the principal reaches have their agent connected now. */
  async onlineStats(principal: Principal): Promise<{ online: number; offline: number; total: number }> {
    const visible = await this.devices.listVisibleDevices(principal, this.scopingPermission(principal));
    const online = visible.filter((d) => this.agents.isConnected(d.deviceId)).length;
    return { online, offline: visible.length - online, total: visible.length };
  }
}
