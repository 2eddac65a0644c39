/**
 * What the agent reports about its device: host name, OS, kernel, architecture, CPU, memory, disks,
 * network interfaces, agent version and uptime. Linux first; on other systems the fields that
 * need /proc or /etc fall back to what Node knows.
 */
import fs from 'node:fs';
import os from 'node:os';
import { isoTime } from './iso-time.js';

export interface InventoryReport {
  hostname: string;
  os: { name: string; version: string; id?: string; pretty_name?: string };
  kernel: string;
  kernel_version: string;
  arch: string;
  cpu: { model: string; cores: number };
  memory: { total: number; free: number };
  disks: { mount: string; device: string; fstype: string; size: number; free: number }[];
  network: { name: string; mac: string; addresses: { address: string; family: string; cidr: string | null }[] }[];
  agent_version: string;
  /** Seconds since boot, and since the agent process started. */
  uptime: number;
  agent_uptime: number;
  collected_at: string;
  [field: string]: unknown;
}

/** Pseudo and virtual file systems that say nothing about storage. */
const PSEUDO_FS = new Set([
  'proc',
  'sysfs',
  'devtmpfs',
  'devpts',
  'tmpfs',
  'cgroup',
  'cgroup2',
  'securityfs',
  'pstore',
  'bpf',
  'debugfs',
  'tracefs',
  'mqueue',
  'hugetlbfs',
  'configfs',
  'fusectl',
  'autofs',
  'binfmt_misc',
  'nsfs',
  'ramfs',
  'rpc_pipefs',
  'efivarfs',
  'selinuxfs',
  'squashfs',
  'fuse.gvfsd-fuse',
  'fuse.portal',
]);
const MAX_DISKS = 64;

/** KEY=value lines of /etc/os-release (values may be quoted). */
export function parseOsRelease(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim());
    if (!m) continue;
    let value = m[2].trim();
    if ((value.startsWith('"') && value.endsWith('"')) || (value.startsWith("'") && value.endsWith("'"))) value = value.slice(1, -1);
    out[m[1]] = value.replace(/\\(["'$`\\])/g, '$1');
  }
  return out;
}

/** The mounts of /proc/mounts worth reporting: real file systems, each mount point once. */
export function parseMounts(text: string): { device: string; mount: string; fstype: string }[] {
  const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_m, oct: string) => String.fromCharCode(parseInt(oct, 8)));
  const seen = new Set<string>();
  const out: { device: string; mount: string; fstype: string }[] = [];
  for (const line of text.split('\n')) {
    const [device, mount, fstype] = line.split(' ');
    if (!device || !mount || !fstype || PSEUDO_FS.has(fstype)) continue;
    const point = unescape(mount);
    if (seen.has(point)) continue;
    seen.add(point);
    out.push({ device: unescape(device), mount: point, fstype });
  }
  return out;
}

function osInfo(): InventoryReport['os'] {
  for (const file of ['/etc/os-release', '/usr/lib/os-release']) {
    try {
      const r = parseOsRelease(fs.readFileSync(file, 'utf8'));
      return { name: r.NAME ?? os.type(), version: r.VERSION_ID ?? r.VERSION ?? '', id: r.ID, pretty_name: r.PRETTY_NAME };
    } catch {
      // try the next
    }
  }
  return { name: os.type(), version: os.release() };
}

/** Available memory (what can be given to programs without swapping), else the kernel's free. */
function memory(): InventoryReport['memory'] {
  const total = os.totalmem();
  try {
    const m = /^MemAvailable:\s+(\d+) kB$/m.exec(fs.readFileSync('/proc/meminfo', 'utf8'));
    if (m) return { total, free: Number(m[1]) * 1024 };
  } catch {
    // not Linux
  }
  return { total, free: os.freemem() };
}

async function disks(): Promise<InventoryReport['disks']> {
  let mounts: { device: string; mount: string; fstype: string }[];
  try {
    mounts = parseMounts(fs.readFileSync('/proc/mounts', 'utf8'));
  } catch {
    mounts = [{ device: '', mount: '/', fstype: '' }];
  }
  const out: InventoryReport['disks'] = [];
  for (const m of mounts) {
    if (out.length >= MAX_DISKS) break;
    try {
      // Single files bind-mounted into containers (/etc/hosts…) are not disks.
      if (!(await fs.promises.stat(m.mount)).isDirectory()) continue;
      const s = await fs.promises.statfs(m.mount);
      if (s.blocks === 0) continue;
      out.push({ mount: m.mount, device: m.device, fstype: m.fstype, size: s.blocks * s.bsize, free: s.bavail * s.bsize });
    } catch {
      // unreadable mount point: skip it
    }
  }
  return out;
}

function network(): InventoryReport['network'] {
  return Object.entries(os.networkInterfaces()).map(([name, addrs]) => ({
    name,
    mac: addrs?.[0]?.mac ?? '',
    addresses: (addrs ?? []).map((a) => ({ address: a.address, family: String(a.family), cidr: a.cidr ?? null })),
  }));
}

export async function collectInventory(agentVersion: string, agentStartedAt: number): Promise<InventoryReport> {
  const cpus = os.cpus();
  return {
    hostname: os.hostname(),
    os: osInfo(),
    kernel: os.release(),
    kernel_version: os.version(),
    arch: os.machine(),
    cpu: { model: cpus[0]?.model.trim() || 'unknown', cores: cpus.length || os.availableParallelism() },
    memory: memory(),
    disks: await disks(),
    network: network(),
    agent_version: agentVersion,
    uptime: Math.round(os.uptime()),
    agent_uptime: Math.round((Date.now() - agentStartedAt) / 1000),
    collected_at: isoTime(),
  };
}
