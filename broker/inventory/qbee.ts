/**
 * The inventory in qbee's vocabulary: the `system` record qbee clients decode (SystemInfo, all
 * strings but the interface maps), and the filters of qbee's inventory search. Pure functions:
 * the service feeds them the device row, its scope and its last report.
 */
import { z } from 'zod';

/** qbee's InventoryListSearch. A field not listed here answers 400 (parseJsonSearch). */
export const inventorySearch = z.object({
  node_id: z.string().max(64).optional().describe('Exact device id'),
  uuid: z.string().max(64).optional().describe('Exact device id (qbee’s legacy id; the same value here)'),
  title: z.string().max(255).optional().describe('Part of the title, host name or last address (case-insensitive)'),
  flavor: z.string().max(255).optional().describe('Part of the OS flavor, e.g. "ubuntu_22"'),
  arch: z.string().max(64).optional().describe('Part of the architecture, e.g. "x86_64"'),
  ip: z.string().max(64).optional().describe('Exact IP address: of an interface, or the one the device last came from'),
  mac: z.string().max(64).optional().describe('Exact MAC address of an interface (case-insensitive)'),
  description: z.string().max(1024).optional(),
  latitude: z.string().max(64).optional(),
  longitude: z.string().max(64).optional(),
  country: z.string().max(1024).optional(),
  city: z.string().max(1024).optional(),
  zip: z.string().max(1024).optional(),
  address: z.string().max(1024).optional(),
  device_attribute: z
    .string()
    .max(1024)
    .optional()
    .describe('Part of any of: flavor, arch, description, coordinates, country, city, zip, address, IP addresses'),
  unassigned: z.boolean().optional().describe('true: only devices in unassigned_group'),
  ancestor_ids: z.array(z.string().max(64)).max(100).optional().describe('Groups (or the device itself) every result is in'),
  tags: z.array(z.string().max(64)).max(100).optional().describe('Tags every result carries (its own or inherited)'),
  commit_sha: z
    .string()
    .max(64)
    .optional()
    .describe('Part of the sha of the configuration commit the device’s agent last applied (`device_commit_sha`), case-insensitive'),
  // Beyond qbee's fields: the typed inventory.
  package: z
    .string()
    .min(1)
    .max(256)
    .optional()
    .describe('Exact name of an installed package (dpkg, rpm, opkg); each result lists its `packages` of that name'),
  package_version: z
    .string()
    .max(300)
    .optional()
    .describe('With `package`: a version constraint in dpkg ordering, e.g. "<3.0.13", ">=1:2.0-1", "!=1.0" (a bare version means =)'),
  container_image: z
    .string()
    .min(1)
    .max(512)
    .optional()
    .describe('Part of the image of a docker or podman container, or of a docker or podman image (repository:tag)'),
});
export type InventorySearch = z.infer<typeof inventorySearch>;

/** What a device is matched and described with. */
export interface InventoryDevice {
  deviceId: string;
  title: string;
  /** Node ids from the device itself up to root. */
  nodeIds: string[];
  tags: string[];
  hostname: string;
  lastIp: string | null;
  lastSeen: string | null;
  agentVersion: string | null;
  attributes: Record<string, unknown>;
  /** The last report, {} before the first. */
  report: Record<string, unknown>;
  /** The configuration commit the agent last applied ('' before the first) and when (ISO 8601, null before). */
  deviceCommitSha?: string;
  appliedAt?: string | null;
}

/** Keys of qbee's inventory records that this broker fills itself; a report's own values for them are dropped. */
export const QBEE_INVENTORY_KEYS = [
  'node_id',
  'pub_key_digest',
  'uuid',
  'system',
  'settings',
  'pushed_config',
  'config_propagated',
  'device_commit_sha',
  'last_reported',
  'last_reported_time',
  'exp_soft',
  'exp_hard',
  'ancestors',
  'ancestors_titles',
  'attributes',
  'title',
  'agentinterval',
  'status',
  'tags',
] as const;

const str = (v: unknown): string => (typeof v === 'string' ? v : typeof v === 'number' ? String(v) : '');

interface ReportInterface {
  name: string;
  mac: string;
  addresses: { address: string; family: string }[];
}

function interfaces(report: Record<string, unknown>): ReportInterface[] {
  if (!Array.isArray(report.network)) return [];
  return report.network
    .filter((n): n is Record<string, unknown> => !!n && typeof n === 'object')
    .map((n) => ({
      name: str(n.name),
      mac: str(n.mac),
      addresses: Array.isArray(n.addresses)
        ? n.addresses.filter((a): a is Record<string, unknown> => !!a && typeof a === 'object').map((a) => ({ address: str(a.address), family: str(a.family) }))
        : [],
    }));
}

const isIpv4 = (family: string) => family === 'IPv4' || family === '4';
const isLoopback = (address: string) => address.startsWith('127.') || address === '::1';

/** qbee's SystemInfo from the report: strings (counts and times too), maps keyed by interface. */
export function systemInfo(d: InventoryDevice): Record<string, unknown> {
  const r = d.report;
  const os = r.os && typeof r.os === 'object' ? (r.os as Record<string, unknown>) : {};
  const nics = interfaces(r);
  const hardwareMac: Record<string, string> = {};
  const ipv4: Record<string, string> = {};
  const addresses: string[] = [];
  for (const nic of nics) {
    // qbee canonifies interface names in these keys (wlan0.1 → wlan0_1).
    const key = nic.name.replace(/[^A-Za-z0-9_]/g, '_');
    if (nic.mac) hardwareMac[key] = nic.mac;
    const v4 = nic.addresses.find((a) => isIpv4(a.family));
    if (v4) ipv4[key] = v4.address;
    for (const a of nic.addresses) if (!isLoopback(a.address)) addresses.push(a.address);
  }
  const hostname = str(r.hostname) || d.hostname;
  const osId = str(os.id);
  const osVersion = str(os.version);
  const uptime = typeof r.uptime === 'number' ? r.uptime : undefined;
  const collected = Date.parse(str(r.collected_at));
  const bootTime = uptime !== undefined && !Number.isNaN(collected) ? String(Math.floor(collected / 1000 - uptime)) : '';
  const cpu = r.cpu && typeof r.cpu === 'object' ? (r.cpu as Record<string, unknown>) : {};
  const applied = d.appliedAt ? Date.parse(d.appliedAt) : NaN;
  const appliedSeconds = Number.isNaN(applied) ? '' : String(Math.floor(applied / 1000));
  return {
    class: 'linux',
    os: str(os.name).toLowerCase() === 'linux' || osId ? 'linux' : str(os.name).toLowerCase(),
    ostype: str(r.arch) ? `linux_${str(r.arch)}` : '',
    version: str(r.kernel_version),
    arch: str(r.arch),
    long_arch: '',
    release: str(r.kernel),
    flavor: osId ? `${osId}_${osVersion.split('.')[0]}`.replace(/_$/, '') : '',
    boot_time: bootTime,
    cpus: typeof cpu.cores === 'number' ? String(cpu.cores) : '',
    cpu_sn: '',
    cpu_rev: '',
    cpu_hw: str(cpu.model),
    host: hostname,
    fqhost: hostname,
    uqhost: hostname.split('.')[0],
    interface: nics.find((n) => n.addresses.some((a) => isIpv4(a.family) && !isLoopback(a.address)))?.name ?? '',
    hardware_mac: hardwareMac,
    interface_flags: {},
    ipv4,
    ip_addresses: addresses.join(' '),
    ipv4_first: Object.values(ipv4).find((a) => !isLoopback(a)) ?? '',
    remoteaddr: d.lastIp ?? '',
    // When the agent last applied its configuration, and which commit (qbee's policy run).
    last_policy_update: appliedSeconds,
    last_config_update: appliedSeconds,
    last_config_commit_id: d.deviceCommitSha ?? '',
    vpn_idx: '',
    // qbee's agent version; here the version the device's agent reports.
    cf_version: str(r.agent_version) || d.agentVersion || '',
    tpm_enabled: false,
  };
}

const has = (haystack: string, needle: string) => haystack.toLowerCase().includes(needle.toLowerCase());

/** Does the device pass every filter of the search? */
export function matchesSearch(d: InventoryDevice, s: InventorySearch): boolean {
  const sys = systemInfo(d) as Record<string, unknown> & { hardware_mac: Record<string, string>; ipv4: Record<string, string> };
  const attr = (k: string) => str(d.attributes[k]);
  if (s.node_id && s.node_id !== d.deviceId) return false;
  if (s.uuid && s.uuid !== d.deviceId) return false;
  if (s.title && !(has(d.title, s.title) || has(d.hostname, s.title) || has(d.lastIp ?? '', s.title))) return false;
  if (s.flavor && !has(str(sys.flavor), s.flavor)) return false;
  if (s.arch && !has(str(sys.arch), s.arch)) return false;
  const ips = [str(sys.ipv4_first), ...str(sys.ip_addresses).split(' '), str(sys.remoteaddr), ...Object.values(sys.ipv4)].filter(Boolean);
  if (s.ip && !ips.includes(s.ip)) return false;
  if (s.mac && !Object.values(sys.hardware_mac).some((m) => m.toLowerCase() === s.mac?.toLowerCase())) return false;
  for (const field of ['description', 'latitude', 'longitude', 'country', 'city', 'zip', 'address'] as const) {
    const wanted = s[field];
    if (wanted && !has(attr(field), wanted)) return false;
  }
  if (s.device_attribute) {
    const fields = [str(sys.flavor), str(sys.arch), ...['description', 'latitude', 'longitude', 'country', 'city', 'zip', 'address'].map(attr), ...ips];
    if (!fields.some((f) => has(f, s.device_attribute as string))) return false;
  }
  if (s.unassigned && d.nodeIds[1] !== 'unassigned_group') return false;
  if (s.ancestor_ids && !s.ancestor_ids.every((id) => d.nodeIds.includes(id))) return false;
  if (s.tags && !s.tags.every((t) => d.tags.includes(t))) return false;
  if (s.commit_sha && !has(d.deviceCommitSha ?? '', s.commit_sha)) return false;
  return true;
}

/** Filters that need the device's report, not just its row. */
export function searchNeedsReport(s: InventorySearch): boolean {
  return Boolean(s.flavor || s.arch || s.ip || s.mac || s.device_attribute);
}
