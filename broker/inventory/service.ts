import type { AccessService } from '../access/access.js';
import type { Principal } from '../access/principal.js';
import type { AgentLocator } from '../agents/locator.js';
import type { Db } from '../db/database.js';
import type { DevicesService } from '../devices/service.js';
import { DomainError, invalid, notFound } from '../errors.js';
import type { DeviceScope } from '../../shared/resources.js';
import { readAttributes } from '../devices/attributes.js';
import { deviceHostRows, deviceState, nodeExists } from '../devices/directory.js';
import { deviceConfigStates } from '../config/device-rows.js';
import { unixSeconds } from '../devices/tree.js';
import { parseJsonSearch } from '../http/search.js';
import { parseVersionConstraint, satisfies } from '../../shared/dpkg-version.js';
import { isInventoryItemType, type InventoryReportType } from '../../shared/inventory.js';
import {
  checkItem,
  countGroups,
  forgetOtherTypes,
  ItemRate,
  keyText,
  packageCounts,
  packagesNamed,
  readItem,
  readItems,
  reportedDevices,
  saveItem,
  SUMMARY_KEYS,
  type PackageRow,
  type StoredItem,
} from './items.js';
import { readReport, readReports, saveReport } from './store.js';
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
  sort_field?: 'title' | 'device_name' | 'last_reported_time' | 'last_policy_update' | 'commit_sha';
  sort_direction?: 'asc' | 'desc';
}

type DescribedDevice = InventoryDevice & { receivedAt: string | null };

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
  private readonly itemRate = new ItemRate();

  constructor(
    private readonly db: Db,
    private readonly access: Pick<AccessService, 'require' | 'inventoryScope' | 'coversTarget'>,
    private readonly devices: Pick<DevicesService, 'getDevice' | 'listVisibleDevices'>,
    private readonly agents: Pick<AgentLocator, 'isConnected'>,
    /** Told when a device's packages or OS may have changed (CVE matching); its failure is logged, never the report's. */
    private readonly hooks: { packagesChanged?: (deviceId: string) => Promise<void>; logger?: { warn(obj: object, msg: string): void } } = {},
  ) {}

  private notifyPackages(deviceId: string): Promise<void> {
    const hook = this.hooks.packagesChanged;
    if (!hook) return Promise.resolve();
    return hook(deviceId).catch((err: unknown) => this.hooks.logger?.warn({ err, deviceId }, 'CVE findings not updated'));
  }

  async init(): Promise<void> {}

  async close(): Promise<void> {}

  /** Stores an agent's report (the hub calls this), replacing the previous one. */
  async record(deviceId: string, data: Record<string, unknown>): Promise<void> {
    const json = JSON.stringify(data);
    if (json.length > MAX_INVENTORY_BYTES) throw new Error(`inventory report of ${json.length} bytes exceeds ${MAX_INVENTORY_BYTES}`);
    const now = new Date().toISOString();
    const db = this.db;
    // Only approved devices in the tree keep an inventory (a removed device's late report is dropped).
    if ((await deviceState(db, deviceId)) !== 'approved') return;
    await saveReport(db, deviceId, json, now);
    // `inventory_types`: the item types the agent found this time; those it no longer finds go.
    if (Array.isArray(data.inventory_types)) await forgetOtherTypes(db, deviceId, data.inventory_types.filter(isInventoryItemType));
    // The OS release (or a package manager gone) decides which advisories apply.
    await this.notifyPackages(deviceId);
  }

  /** The permission whose resources limit which devices' inventory a caller reaches (decided in access). */
  private scopingPermission(principal: Principal): 'device:read' | 'inventory:read' {
    return this.access.inventoryScope(principal);
  }

  /** 403/404 unless the principal reaches this device's inventory. */
  private async reach(principal: Principal, deviceId: string): Promise<void> {
    if (this.scopingPermission(principal) === 'device:read') await this.access.require(principal, 'device:read', deviceId);
    else if (!(await this.devices.getDevice(deviceId))?.node) throw notFound(`Device ${deviceId}`);
  }

  /** One device's last report, with qbee's DeviceInventory fields. 404 when the device is unknown or has not reported yet. */
  async get(principal: Principal, deviceId: string): Promise<InventoryItem> {
    await this.reach(principal, deviceId);
    const row = await readReport(this.db, deviceId);
    if (!row) throw new DomainError('not_found', 'no_inventory', `Device ${deviceId} has not reported its inventory yet (its agent reports when it connects).`);
    const scope = (await this.devices.listVisibleDevices(principal, this.scopingPermission(principal))).find((d) => d.deviceId === deviceId);
    const [device] = await this.describe(scope ? [scope] : [{ deviceId, nodeIds: [deviceId], tags: [], title: deviceId.slice(0, 12) }], true);
    const [applied] = await deviceConfigStates(this.db, [deviceId]);
    // One read of the applied commit answers all three fields: the agent may report it between two reads.
    return {
      ...withoutQbeeKeys(parseReport(row.data)),
      device_id: deviceId,
      received_at: row.updated_at,
      pub_key_digest: deviceId,
      system: systemInfo({ ...device, deviceCommitSha: applied?.device_commit_sha ?? '' }),
      // The commit the agent last applied; propagated when it is the commit the device should run.
      device_commit_sha: applied?.device_commit_sha ?? '',
      config_propagated: !!applied && applied.device_commit_sha !== null && applied.device_commit_sha === (applied.commit_sha ?? ''),
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
    let visible = (await this.devices.listVisibleDevices(principal, this.scopingPermission(principal))).filter(
      (d) => !text || d.title.toLowerCase().includes(text) || d.deviceId.startsWith(text),
    );
    const packages = await this.packageFilter(search, visible);
    if (packages) visible = visible.filter((d) => packages.has(d.deviceId));
    if (search.container_image) {
      const images = await this.imageFilter(search.container_image, visible);
      visible = visible.filter((d) => images.has(d.deviceId));
    }
    const field = query.sort_field ?? 'title';
    // Reports are read for every device only when a filter or the order needs them; else for the page only.
    const wholeReports = searchNeedsReport(search);
    const described = await this.describe(visible, wholeReports);
    const matched = described.filter((d) => matchesSearch(d, search));
    const key = (d: InventoryDevice): string | number =>
      field === 'last_reported_time'
        ? (unixSeconds(d.lastSeen) ?? 0)
        : field === 'last_policy_update'
          ? (unixSeconds(d.appliedAt ?? null) ?? 0)
          : field === 'commit_sha'
            ? (d.deviceCommitSha ?? '')
            : field === 'device_name'
              ? String(d.attributes.device_name ?? '')
              : d.title;
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
        ...(packages
          ? { packages: (packages.get(d.deviceId) ?? []).map((p) => ({ name: p.name, version: p.version, arch: p.arch, pkg_manager: p.pkg_manager })) }
          : {}),
      };
    });
    return { items, total: matched.length };
  }

  /** The devices' rows (and, with `reports`, their last reports) in the shape the qbee mapping reads. */
  private async describe(scopes: Array<DeviceScope & { title: string }>, reports: boolean): Promise<DescribedDevice[]> {
    const ids = scopes.map((d) => d.deviceId);
    const applied = new Map((await deviceConfigStates(this.db, ids)).map((r) => [r.device_id, r]));
    const rows = new Map((await deviceHostRows(this.db, ids)).map((r) => [r.device_id, r]));
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
        deviceCommitSha: applied.get(d.deviceId)?.device_commit_sha ?? '',
        appliedAt: applied.get(d.deviceId)?.applied_at ?? null,
      };
    });
    if (reports) await this.readReports(out);
    return out;
  }

  private async readReports(devices: DescribedDevice[]): Promise<void> {
    const byId = new Map(devices.map((d) => [d.deviceId, d]));
    for (const row of await readReports(this.db, [...byId.keys()])) {
      const d = byId.get(row.device_id);
      if (d) Object.assign(d, { report: parseReport(row.data), receivedAt: row.updated_at });
    }
  }

  /** How many of the devices the principal reaches have their agent connected now. */
  async onlineStats(principal: Principal): Promise<{ online: number; offline: number; total: number }> {
    const visible = await this.devices.listVisibleDevices(principal, this.scopingPermission(principal));
    const online = visible.filter((d) => this.agents.isConnected(d.deviceId)).length;
    return { online, offline: visible.length - online, total: visible.length };
  }

  // ---- the typed inventory (shared/inventory.ts) ------------------------------------------------

  /**
   * Stores one typed payload of an agent (the hub hands `inventory_item` messages here). An unknown
   * type is dropped silently (a newer agent); a malformed payload is refused whole, changing nothing.
   */
  async recordItem(deviceId: string, msg: { type?: unknown; digest?: unknown; data?: unknown }): Promise<void> {
    if (!this.itemRate.take(deviceId)) throw new Error('inventory item refused: more than 100 payloads in a minute');
    const item = checkItem(msg);
    if (!item.ok) {
      if (item.reason === 'unknown item type') return;
      throw new Error(`inventory item refused: ${item.reason}`);
    }
    if ((await deviceState(this.db, deviceId)) !== 'approved') return;
    await saveItem(this.db, deviceId, item, new Date().toISOString());
    if (item.type === 'software') await this.notifyPackages(deviceId);
  }

  /** `/inventoryreport/{id}`: one item type of one device, its items filtered by `search` and paged. */
  async report(principal: Principal, deviceId: string, q: ReportQuery): Promise<Record<string, unknown>> {
    await this.reach(principal, deviceId);
    if (q.item_type === 'system') {
      const inv = await this.get(principal, deviceId);
      return { node_id: deviceId, item_type: 'system', received_at: inv.received_at, system: inv.system };
    }
    const stored = await readItem(this.db, deviceId, q.item_type);
    if (!stored)
      throw new DomainError(
        'not_found',
        'no_inventory',
        `Device ${deviceId} has not reported its ${q.item_type} inventory (its agent reports what it finds when it connects).`,
      );
    const all = Array.isArray(stored.data.items) ? (stored.data.items as Record<string, unknown>[]) : [];
    const needle = q.search?.toLowerCase();
    const matched = needle ? all.filter((item) => Object.values(item).some((v) => String(v).toLowerCase().includes(needle))) : all;
    return {
      node_id: deviceId,
      item_type: q.item_type,
      received_at: stored.updated_at,
      ...(typeof stored.data.pkg_manager === 'string' ? { pkg_manager: stored.data.pkg_manager } : {}),
      items: matched.slice(q.offset, q.offset + q.items_per_page),
      total: matched.length,
    };
  }

  /** `/inventoryreport/docker/{id}`: the device's docker and podman containers and images; null for what it never reported. */
  async containersReport(principal: Principal, deviceId: string): Promise<Record<string, unknown>> {
    await this.reach(principal, deviceId);
    const out: Record<string, unknown> = { node_id: deviceId };
    for (const type of ['docker_containers', 'docker_images', 'podman_containers', 'podman_images'] as const) {
      const stored = await readItem(this.db, deviceId, type);
      out[type] = stored ? { received_at: stored.updated_at, items: stored.data.items ?? [] } : null;
    }
    return out;
  }

  /**
   * `/inventorysummarybytype/{node_id}`: the items of one type across the devices at or below a node
   * that the principal reaches, grouped (software by name, version and arch; images by repository and
   * tag; …) with how many devices have each. A node the principal reaches nothing below answers 404
   * unless their resources cover it.
   */
  async summaryByType(principal: Principal, nodeId: string, q: ReportQuery): Promise<Record<string, unknown>> {
    const permission = this.scopingPermission(principal);
    const below = (await this.devices.listVisibleDevices(principal, permission)).filter((d) => d.nodeIds.includes(nodeId));
    if (below.length === 0 && nodeId !== 'root') {
      if (!(await nodeExists(this.db, nodeId)) || !(await this.access.coversTarget(principal, permission, `node:${nodeId}`))) throw notFound(`Node ${nodeId}`);
    }
    const ids = below.map((d) => d.deviceId);
    const needle = q.search?.toLowerCase();
    let groups: Array<Record<string, string | number> & { devices: number }>;
    let reported: number;
    if (q.item_type === 'software') {
      groups = [...(await packageCounts(this.db, ids, q.search)).values()];
      reported = (await reportedDevices(this.db, ids, 'software')).size;
    } else if (q.item_type === 'system') {
      const described = await this.describe(below, true);
      const withReport = described.filter((d) => Object.keys(d.report).length > 0);
      reported = withReport.length;
      groups = countGroups(
        withReport.map((d) => {
          const sys = systemInfo(d);
          return [{ flavor: String(sys.flavor), arch: String(sys.arch) }];
        }),
        needle,
      );
    } else {
      const keyOf = SUMMARY_KEYS[q.item_type];
      const items = await readItems(this.db, ids, q.item_type);
      reported = items.size;
      groups = countGroups(
        [...items.values()].map((stored: StoredItem) => (Array.isArray(stored.data.items) ? (stored.data.items as Record<string, unknown>[]) : []).map(keyOf)),
        needle,
      );
    }
    groups.sort((a, b) => b.devices - a.devices || keyText(a).localeCompare(keyText(b)));
    return {
      node_id: nodeId,
      item_type: q.item_type,
      devices_total: ids.length,
      devices_reported: reported,
      items: groups.slice(q.offset, q.offset + q.items_per_page),
      total: groups.length,
    };
  }

  /** For `package` searches: device → its packages of that name passing `package_version`; undefined without `package`. */
  private async packageFilter(search: InventorySearch, visible: DeviceScope[]): Promise<Map<string, PackageRow[]> | undefined> {
    if (search.package_version !== undefined && !search.package)
      throw invalid('`package_version` needs `package`: the name of the package to compare.', { field: 'search' });
    if (!search.package) return undefined;
    const constraint = search.package_version !== undefined ? parseVersionConstraint(search.package_version) : undefined;
    if (search.package_version !== undefined && !constraint)
      throw invalid(`\`package_version\` "${search.package_version}" is not a version constraint: write e.g. "<3.0.13", ">=1:2.0-1" or "1.0-1".`, {
        field: 'search',
      });
    const out = new Map<string, PackageRow[]>();
    for (const row of await packagesNamed(
      this.db,
      search.package,
      visible.map((d) => d.deviceId),
    )) {
      if (constraint && !satisfies(row.version, constraint)) continue;
      out.set(row.device_id, [...(out.get(row.device_id) ?? []), row]);
    }
    return out;
  }

  /** Devices with a container or image whose image name contains `image` (case-insensitive). */
  private async imageFilter(image: string, visible: DeviceScope[]): Promise<Set<string>> {
    const needle = image.toLowerCase();
    const ids = visible.map((d) => d.deviceId);
    const out = new Set<string>();
    for (const type of ['docker_containers', 'podman_containers', 'docker_images', 'podman_images'] as const) {
      for (const [deviceId, stored] of await readItems(this.db, ids, type)) {
        const items = Array.isArray(stored.data.items) ? (stored.data.items as Record<string, unknown>[]) : [];
        const names = items.map((i) => (type.endsWith('containers') ? String(i.image ?? '') : `${String(i.repository ?? '')}:${String(i.tag ?? '')}`));
        if (names.some((n) => n.toLowerCase().includes(needle))) out.add(deviceId);
      }
    }
    return out;
  }
}

export interface ReportQuery {
  item_type: InventoryReportType;
  search?: string;
  offset: number;
  items_per_page: number;
}
