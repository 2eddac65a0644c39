/**
 * The typed inventory an agent reports beside its system report: one payload per item type, in the
 * shapes qbee's agent reports (`{items: [...]}`, software with `pkg_manager`). The agent sends a
 * type only when its digest changed; the broker validates each payload against these schemas
 * (every string and list bounded) and drops what does not fit.
 */
import { z } from 'zod';
import { INVENTORY_LIMITS } from './inventory-limits.js';

/** Item types besides `system` (which is the agent's `inventory` report). */
export const INVENTORY_ITEM_TYPES = [
  'software',
  'docker_containers',
  'docker_images',
  'podman_containers',
  'podman_images',
  'users',
  'groups',
  'ports',
  'processes',
] as const;
export type InventoryItemType = (typeof INVENTORY_ITEM_TYPES)[number];

/** Every type `/inventoryreport/{id}?item_type=` serves. */
export const INVENTORY_REPORT_TYPES = ['system', ...INVENTORY_ITEM_TYPES] as const;
export type InventoryReportType = (typeof INVENTORY_REPORT_TYPES)[number];

export function isInventoryItemType(t: unknown): t is InventoryItemType {
  return typeof t === 'string' && (INVENTORY_ITEM_TYPES as readonly string[]).includes(t);
}

export { INVENTORY_LIMITS };

const short = z.string().max(INVENTORY_LIMITS.short);
const long = z.string().max(INVENTORY_LIMITS.long);
const id = z.number().int().min(0).max(4_294_967_295);

export const softwarePackage = z.object({
  name: short.min(1),
  version: short,
  arch: z.string().max(64).optional(),
  /** dpkg's source package, when it is not named like the package (libssl3 from openssl): advisories name source packages. */
  source: short.optional(),
});
export type SoftwarePackage = z.infer<typeof softwarePackage>;

export const dockerContainer = z.object({
  id: short,
  names: long,
  image: long,
  command: long,
  created_at: short,
  status: short,
  ports: long,
  size: short,
  mounts: long,
  networks: long,
});
export type DockerContainer = z.infer<typeof dockerContainer>;

export const dockerImage = z.object({ id: short, repository: long, tag: short, created_at: short, size: short });
export type DockerImage = z.infer<typeof dockerImage>;

export const systemUser = z.object({
  user: short.min(1),
  uid: id,
  gid: id,
  gecos: long,
  home: long,
  shell: long,
  /** "yes" when the account has a password (needs /etc/shadow; "" when unreadable) */
  has_pwd: z.enum(['yes', 'no', '']),
  /** qbee's numbering: 1 MD5, 2 bcrypt, 5 SHA-256, 6 SHA-512, 7 yescrypt; 0 none or unknown */
  pwd_alg: z.number().int().min(0).max(99),
  /** days since 1970-01-01 of the last password change; 0 unknown */
  pwd_age: z.number().int().min(0).max(1_000_000),
});
export type SystemUser = z.infer<typeof systemUser>;

export const systemGroup = z.object({
  group: short.min(1),
  gid: id,
  members: z.array(short).max(1_000),
});
export type SystemGroup = z.infer<typeof systemGroup>;

export const listeningPort = z.object({
  /** tcp, tcp6, udp, udp6 */
  proto: z.enum(['tcp', 'tcp6', 'udp', 'udp6']),
  /** address:port, e.g. "0.0.0.0:22" or "[::]:22" */
  socket: short,
  /** the process holding it, e.g. "/usr/sbin/sshd -D" ("" when the agent may not see it) */
  proc_info: long,
});
export type ListeningPort = z.infer<typeof listeningPort>;

export const runningProcess = z.object({
  pid: z.number().int().min(0).max(4_294_967_295),
  user: short,
  /** percent of memory */
  mem: z.number().min(0).max(100_000),
  /** percent of one CPU over the process lifetime */
  cpu: z.number().min(0).max(100_000),
  cmdline: long,
});
export type RunningProcess = z.infer<typeof runningProcess>;

/** One schema per item type: what the broker accepts (unknown fields are stripped). */
export const INVENTORY_PAYLOADS = {
  software: z.object({ pkg_manager: z.enum(['dpkg', 'rpm', 'opkg', 'apk', '']), items: z.array(softwarePackage).max(INVENTORY_LIMITS.packages) }),
  docker_containers: z.object({ items: z.array(dockerContainer).max(INVENTORY_LIMITS.containers) }),
  docker_images: z.object({ items: z.array(dockerImage).max(INVENTORY_LIMITS.images) }),
  podman_containers: z.object({ items: z.array(dockerContainer).max(INVENTORY_LIMITS.containers) }),
  podman_images: z.object({ items: z.array(dockerImage).max(INVENTORY_LIMITS.images) }),
  users: z.object({ items: z.array(systemUser).max(INVENTORY_LIMITS.users) }),
  groups: z.object({ items: z.array(systemGroup).max(INVENTORY_LIMITS.groups) }),
  ports: z.object({ items: z.array(listeningPort).max(INVENTORY_LIMITS.ports) }),
  processes: z.object({ items: z.array(runningProcess).max(INVENTORY_LIMITS.processes) }),
} satisfies Record<InventoryItemType, z.ZodType>;

export type InventoryPayload<T extends InventoryItemType> = z.infer<(typeof INVENTORY_PAYLOADS)[T]>;
export type SoftwareInventory = InventoryPayload<'software'>;
