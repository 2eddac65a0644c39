/**
 * A device's inventory as the inventory routes answer it: the zod schemas the broker declares as
 * `response` (validation in tests, the OpenAPI document) and their types for the console, which
 * imports types only (`import type`), so no zod reaches the browser bundle.
 */
import { z } from 'zod';
import { INVENTORY_REPORT_TYPES } from '../inventory.js';
import { deviceAttributes } from './nodes.js';

/** qbee's SystemInfo: every value a string but the interface maps (and tpm_enabled). */
export const systemInfo = z
  .object({
    class: z.string(),
    os: z.string(),
    ostype: z.string(),
    version: z.string(),
    arch: z.string(),
    release: z.string(),
    flavor: z.string(),
    boot_time: z.string().describe('Unix seconds, as a string'),
    cpus: z.string(),
    cpu_hw: z.string(),
    host: z.string(),
    fqhost: z.string(),
    uqhost: z.string(),
    hardware_mac: z.record(z.string(), z.string()),
    ipv4: z.record(z.string(), z.string()),
    ip_addresses: z.string().describe('Space-separated'),
    ipv4_first: z.string(),
    remoteaddr: z.string().describe('The address the agent last connected from'),
    cf_version: z.string().describe('The version the device agent reports'),
    tpm_enabled: z.boolean(),
    long_arch: z.string(),
    cpu_sn: z.string(),
    cpu_rev: z.string(),
    interface: z.string().describe('The first interface with an IPv4 address'),
    interface_flags: z.record(z.string(), z.string()),
    last_policy_update: z.string().describe('Unix seconds (as a string) when the agent last applied its configuration; "" before'),
    last_config_update: z.string().describe('As last_policy_update'),
    last_config_commit_id: z.string().describe('The commit the agent last applied (device_commit_sha)'),
    vpn_idx: z.string(),
  })
  .describe("qbee's SystemInfo, derived from the report");

const report = z
  .object({
    device_id: z.string(),
    received_at: z.string().nullable().describe('When the broker received the report, ISO 8601; null before the first one'),
    hostname: z.string().optional(),
    os: z.object({ name: z.string(), version: z.string(), id: z.string().optional(), pretty_name: z.string().optional() }).optional(),
    kernel: z.string().optional(),
    arch: z.string().optional(),
    cpu: z.object({ model: z.string(), cores: z.number() }).optional(),
    memory: z.object({ total: z.number(), free: z.number() }).optional().describe('Bytes'),
    disks: z
      .array(z.object({ mount: z.string(), fstype: z.string().optional(), size: z.number(), free: z.number() }))
      .optional()
      .describe('Bytes'),
    network: z
      .array(
        z.object({
          name: z.string(),
          mac: z.string(),
          addresses: z.array(z.object({ address: z.string(), family: z.string(), cidr: z.string().nullable().optional() })),
        }),
      )
      .optional(),
    agent_version: z.string().optional(),
    uptime: z.number().optional().describe('Seconds since the device booted'),
    system: systemInfo,
    attributes: deviceAttributes,
    tags: z.array(z.string()).describe('Own and inherited tags'),
    status: z.enum(['online', 'offline']),
  })
  .loose();

/** qbee's config.Pushed. */
const pushedConfig = z
  .object({
    commit_id: z.string().describe('The commit of the configuration the device should run'),
    bundles: z.array(z.string()),
    bundle_data: z.record(z.string(), z.unknown()).describe('Enabled bundles as the agent gets them; secret parameter values as references'),
  })
  .describe(
    'The configuration the broker pushes to the device (qbee’s PushedConfig). Bundles only for a caller whose configuration:read reaches the device (see GET /config/{device_id}); empty otherwise.',
  );

/** GET /inventory/{device_id}: the last report with qbee's DeviceInventory fields. */
export const inventoryRecord = report.extend({
  pub_key_digest: z.string().describe('The device id (qbee)'),
  last_reported: z.number().int().describe('Last contact, Unix seconds'),
  exp_soft: z.number().int().describe('Unix seconds: last contact plus one agent heartbeat (AGENT_HEARTBEAT_MS); 0 before the first contact'),
  exp_hard: z.number().int().describe('Unix seconds: last contact plus three heartbeats, when a silent agent is cut off; 0 before the first contact'),
  device_commit_sha: z.string().describe('The configuration commit the agent last applied; "" before'),
  config_propagated: z.boolean().describe('The agent applied the commit the device should run (pushed_config.commit_id)'),
  pushed_config: pushedConfig,
  settings: z.record(z.string(), z.unknown()).describe('qbee’s deprecated copy of pushed_config.bundle_data.settings (zero values without it)'),
});

/** An item of GET /inventory: a device with its last report. */
export const inventoryListItem = report.extend({
  title: z.string(),
  connected: z.boolean(),
  last_seen: z.string().nullable(),
  node_id: z.string(),
  pub_key_digest: z.string(),
  uuid: z.string().describe('The device id (qbee’s legacy id)'),
  last_reported_time: z.number().int().describe('Last contact, Unix seconds; 0 if never'),
  ancestors: z.array(z.string()).describe('Node ids from root down to the device itself'),
});

/** GET /inventoryreport/{device_id}: one item type of a device inventory. */
export const inventoryItemReport = z
  .object({
    node_id: z.string(),
    item_type: z.enum(INVENTORY_REPORT_TYPES),
    received_at: z.string().nullable(),
    system: systemInfo.optional().describe('item_type system'),
    pkg_manager: z.string().optional().describe('item_type software: dpkg, rpm or opkg'),
    items: z.array(z.record(z.string(), z.unknown())).optional().describe('Every other item_type'),
    total: z.number().optional(),
  })
  .describe('One item type of a device inventory');

export type InventoryRecord = z.infer<typeof inventoryRecord>;
export type InventoryItemReport = z.infer<typeof inventoryItemReport>;
export type InventoryListItem = z.infer<typeof inventoryListItem>;
