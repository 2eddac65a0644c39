/**
 * The typed inventory of the device (shared/inventory.ts): installed packages (dpkg's or opkg's
 * status file read directly, rpm through `rpm -qa`), docker and podman containers and images
 * (through their CLIs, when present and answering), users and groups (/etc/passwd, /etc/shadow when
 * readable, /etc/group), listening ports (/proc/net) and the top processes by CPU and memory
 * (/proc). Parsers are pure; collectors read this machine and never write. Each payload is trimmed
 * to the broker's limits, so a big host reports a truncated list rather than none.
 */
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import {
  INVENTORY_LIMITS,
  type DockerContainer,
  type DockerImage,
  type InventoryItemType,
  type ListeningPort,
  type RunningProcess,
  type SoftwareInventory,
  type SoftwarePackage,
  type SystemGroup,
  type SystemUser,
} from '../shared/inventory.js';

const COMMAND_TIMEOUT_MS = 15_000;
const COMMAND_MAX_BYTES = 32 * 1024 * 1024;

const clip = (s: string, max: number = INVENTORY_LIMITS.short) => (s.length > max ? s.slice(0, max) : s);
const clipLong = (s: string) => clip(s, INVENTORY_LIMITS.long);
// Control characters are replaced: the broker shows these strings to people.
const clean = (s: unknown, max: number = INVENTORY_LIMITS.short) =>
  clip(
    (typeof s === 'string' ? s : typeof s === 'number' ? String(s) : Array.isArray(s) ? s.join(',') : '').replace(/[\u0000-\u001f\u007f-\u009f]/g, ' '),
    max,
  );

function run(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: COMMAND_TIMEOUT_MS, maxBuffer: COMMAND_MAX_BYTES, env: { ...process.env, LC_ALL: 'C' } }, (err, stdout) =>
      err ? reject(err) : resolve(stdout),
    );
  });
}

function readText(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/** Is `cmd` an executable somewhere on PATH? */
function onPath(cmd: string): boolean {
  for (const dir of (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(':')) {
    try {
      fs.accessSync(`${dir}/${cmd}`, fs.constants.X_OK);
      return true;
    } catch {
      // next
    }
  }
  return false;
}

// ---- software ---------------------------------------------------------------------------------

/**
 * The installed packages of a dpkg (or opkg) status file: paragraphs of `Field: value` lines;
 * a package counts when its Status says `installed` (held packages too), as `dpkg-query` would.
 */
export function parseDpkgStatus(text: string): SoftwarePackage[] {
  const out: SoftwarePackage[] = [];
  for (const paragraph of text.split(/\n\s*\n/)) {
    const fields: Record<string, string> = {};
    for (const line of paragraph.split('\n')) {
      if (line.startsWith(' ') || line.startsWith('\t')) continue; // continuation
      const colon = line.indexOf(':');
      if (colon <= 0) continue;
      fields[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
    }
    const status = (fields.status ?? '').split(/\s+/);
    if (!fields.package || status[2] !== 'installed') continue;
    // `Source: name` or `Source: name (version)`; kept when it differs from the package's name.
    const source = fields.source ? clean(fields.source.split(/\s+/)[0]) : '';
    out.push({
      name: clean(fields.package),
      version: clean(fields.version ?? ''),
      ...(fields.architecture ? { arch: clean(fields.architecture, 64) } : {}),
      ...(source && source !== fields.package ? { source } : {}),
    });
  }
  out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : (a.arch ?? '') < (b.arch ?? '') ? -1 : 1));
  return out.slice(0, INVENTORY_LIMITS.packages);
}

/** `rpm -qa` lines of `name\tepoch:version-release\tarch` (epoch `(none)` left out). */
export function parseRpmList(text: string): SoftwarePackage[] {
  const out: SoftwarePackage[] = [];
  for (const line of text.split('\n')) {
    const [name, evr, arch] = line.split('\t');
    if (!name || !evr) continue;
    const version = evr.replace(/^\(none\):/, '');
    out.push({ name: clean(name), version: clean(version), ...(arch && arch !== '(none)' ? { arch: clean(arch, 64) } : {}) });
  }
  out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return out.slice(0, INVENTORY_LIMITS.packages);
}

export const DPKG_STATUS = '/var/lib/dpkg/status';
const OPKG_STATUS = ['/usr/lib/opkg/status', '/var/lib/opkg/status'];

/** The packages of this machine's package manager (dpkg first, then opkg, then rpm); undefined without one. */
export async function collectSoftware(): Promise<SoftwareInventory | undefined> {
  const dpkg = readText(DPKG_STATUS);
  if (dpkg !== undefined) return { pkg_manager: 'dpkg', items: parseDpkgStatus(dpkg) };
  for (const file of OPKG_STATUS) {
    const opkg = readText(file);
    if (opkg !== undefined) return { pkg_manager: 'opkg', items: parseDpkgStatus(opkg) };
  }
  if (onPath('rpm'))
    return { pkg_manager: 'rpm', items: parseRpmList(await run('rpm', ['-qa', '--queryformat', '%{NAME}\\t%{EPOCH}:%{VERSION}-%{RELEASE}\\t%{ARCH}\\n'])) };
  return undefined;
}

// ---- containers -------------------------------------------------------------------------------

const asRecord = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {});

/** `docker container ls --format '{{json .}}'` lines, or podman's JSON array, in qbee's DockerContainer shape. */
export function parseContainers(text: string): DockerContainer[] {
  const records = parseJsonRecords(text);
  return records.slice(0, INVENTORY_LIMITS.containers).map((r) => {
    const ports = Array.isArray(r.Ports)
      ? r.Ports.map(asRecord)
          .map(
            (p) =>
              `${p.host_port ? `${String(p.host_ip || '0.0.0.0')}:${String(p.host_port)}->` : ''}${String(p.container_port ?? '')}/${String(p.protocol ?? 'tcp')}`,
          )
          .join(', ')
      : r.Ports;
    const created = typeof r.CreatedAt === 'string' ? r.CreatedAt : typeof r.Created === 'number' ? new Date(r.Created * 1000).toISOString() : '';
    return {
      id: clean(r.ID ?? r.Id),
      names: clean(r.Names, INVENTORY_LIMITS.long),
      image: clean(r.Image, INVENTORY_LIMITS.long),
      command: clean(Array.isArray(r.Command) ? r.Command.join(' ') : r.Command, INVENTORY_LIMITS.long),
      created_at: clean(created),
      status: clean(r.Status ?? r.State),
      ports: clean(ports, INVENTORY_LIMITS.long),
      size: clean(r.Size),
      mounts: clean(r.Mounts, INVENTORY_LIMITS.long),
      networks: clean(r.Networks, INVENTORY_LIMITS.long),
    };
  });
}

/** `docker image ls --format '{{json .}}'` lines, or podman's JSON array, in qbee's DockerImage shape. */
export function parseImages(text: string): DockerImage[] {
  const out: DockerImage[] = [];
  for (const r of parseJsonRecords(text)) {
    const id = clean(r.ID ?? r.Id);
    const created = typeof r.CreatedAt === 'string' ? r.CreatedAt : typeof r.Created === 'number' ? new Date(r.Created * 1000).toISOString() : '';
    const size = clean(r.Size);
    // podman: one record per image, with its names as repository:tag
    const names = Array.isArray(r.Names) ? r.Names.filter((n): n is string => typeof n === 'string') : undefined;
    if (names && r.Repository === undefined) {
      for (const name of names.length ? names : ['<none>:<none>']) {
        const at = name.lastIndexOf(':');
        const slash = name.lastIndexOf('/');
        const [repository, tag] = at > slash ? [name.slice(0, at), name.slice(at + 1)] : [name, 'latest'];
        out.push({ id, repository: clean(repository, INVENTORY_LIMITS.long), tag: clean(tag), created_at: clean(created), size });
      }
    } else {
      out.push({ id, repository: clean(r.Repository, INVENTORY_LIMITS.long), tag: clean(r.Tag), created_at: clean(created), size });
    }
  }
  return out.slice(0, INVENTORY_LIMITS.images);
}

function parseJsonRecords(text: string): Record<string, unknown>[] {
  const trimmed = text.trim();
  if (!trimmed) return [];
  if (trimmed.startsWith('[')) {
    const v: unknown = JSON.parse(trimmed);
    return Array.isArray(v) ? v.map(asRecord) : [];
  }
  return trimmed
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => asRecord(JSON.parse(l)));
}

/** Containers and images of docker or podman; undefined when the CLI is absent or its daemon does not answer. */
export async function collectContainers(engine: 'docker' | 'podman'): Promise<{ containers: DockerContainer[]; images: DockerImage[] } | undefined> {
  if (!onPath(engine)) return undefined;
  const json = engine === 'docker' ? ['--format', '{{json .}}'] : ['--format', 'json'];
  try {
    const [containers, images] = await Promise.all([
      run(engine, ['container', 'ls', '--all', '--no-trunc', ...json]),
      run(engine, ['image', 'ls', '--all', '--no-trunc', ...json]),
    ]);
    return { containers: parseContainers(containers), images: parseImages(images) };
  } catch {
    return undefined; // installed but not running (no daemon, no permission)
  }
}

// ---- users and groups -------------------------------------------------------------------------

/** qbee's password algorithm numbers, from the `$id$` prefix of a shadow hash. */
function passwordAlgorithm(hash: string): number {
  const m = /^\$(\w+)\$/.exec(hash);
  switch (m?.[1]) {
    case '1':
      return 1;
    case '2':
    case '2a':
    case '2b':
    case '2y':
      return 2;
    case '5':
      return 5;
    case '6':
      return 6;
    case 'y':
      return 7;
    default:
      return 0;
  }
}

/** /etc/passwd, with /etc/shadow's facts when it could be read (no hash ever leaves this function). */
export function parsePasswd(passwd: string, shadow?: string): SystemUser[] {
  const shadowed = new Map<string, { hash: string; changed: number }>();
  for (const line of (shadow ?? '').split('\n')) {
    const [name, hash, changed] = line.split(':');
    if (name && hash !== undefined) shadowed.set(name, { hash, changed: Number(changed) || 0 });
  }
  const out: SystemUser[] = [];
  for (const line of passwd.split('\n')) {
    if (!line || line.startsWith('#') || line.startsWith('+') || line.startsWith('-')) continue;
    const [user, , uid, gid, gecos = '', home = '', shell = ''] = line.split(':');
    if (!user || !/^\d+$/.test(uid ?? '') || !/^\d+$/.test(gid ?? '')) continue;
    const s = shadow === undefined ? undefined : shadowed.get(user);
    const hasPassword = s ? s.hash.length > 0 && !s.hash.startsWith('!') && !s.hash.startsWith('*') : false;
    out.push({
      user: clean(user),
      uid: Math.min(Number(uid), 4_294_967_295),
      gid: Math.min(Number(gid), 4_294_967_295),
      gecos: clean(gecos, INVENTORY_LIMITS.long),
      home: clean(home, INVENTORY_LIMITS.long),
      shell: clean(shell, INVENTORY_LIMITS.long),
      has_pwd: shadow === undefined ? '' : hasPassword ? 'yes' : 'no',
      pwd_alg: s && hasPassword ? passwordAlgorithm(s.hash) : 0,
      pwd_age: s ? Math.min(s.changed, 1_000_000) : 0,
    });
    if (out.length >= INVENTORY_LIMITS.users) break;
  }
  return out;
}

export function parseGroups(text: string): SystemGroup[] {
  const out: SystemGroup[] = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#') || line.startsWith('+') || line.startsWith('-')) continue;
    const [group, , gid, members = ''] = line.split(':');
    if (!group || !/^\d+$/.test(gid ?? '')) continue;
    out.push({
      group: clean(group),
      gid: Math.min(Number(gid), 4_294_967_295),
      members: members
        .split(',')
        .filter(Boolean)
        .slice(0, 1_000)
        .map((m) => clean(m)),
    });
    if (out.length >= INVENTORY_LIMITS.groups) break;
  }
  return out;
}

// ---- listening ports --------------------------------------------------------------------------

/** The address of /proc/net's hex notation: IPv4 as one little-endian word, IPv6 as four. */
export function procNetAddress(hex: string): string {
  if (hex.length === 8) {
    const n = parseInt(hex, 16);
    return [n & 0xff, (n >>> 8) & 0xff, (n >>> 16) & 0xff, (n >>> 24) & 0xff].join('.');
  }
  const bytes: number[] = [];
  for (let w = 0; w < 4; w++) {
    const word = hex.slice(w * 8, w * 8 + 8);
    for (let b = 3; b >= 0; b--) bytes.push(parseInt(word.slice(b * 2, b * 2 + 2), 16));
  }
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i] << 8) | bytes[i + 1]).toString(16));
  // the longest run of zero groups becomes ::
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j;
  }
  if (bestLen < 2) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

/** Listening sockets of one /proc/net table: TCP in LISTEN, UDP unconnected. Inodes for the owner lookup. */
export function parseProcNet(text: string, proto: ListeningPort['proto']): Array<{ proto: ListeningPort['proto']; socket: string; inode: string }> {
  const out: Array<{ proto: ListeningPort['proto']; socket: string; inode: string }> = [];
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10) continue;
    const [local, remote, state, inode] = [f[1], f[2], f[3], f[9]];
    const tcp = proto.startsWith('tcp');
    if (tcp ? state !== '0A' : state !== '07' || !/^[0:]+$/.test(remote)) continue;
    const [addrHex, portHex] = local.split(':');
    if (!addrHex || !portHex) continue;
    const address = procNetAddress(addrHex);
    const port = parseInt(portHex, 16);
    out.push({ proto, socket: proto.endsWith('6') ? `[${address}]:${port}` : `${address}:${port}`, inode });
  }
  return out;
}

function commandLine(pid: string): string {
  const raw = readText(`/proc/${pid}/cmdline`);
  if (raw) return clipLong(raw.replace(/\0+$/, '').replace(/\0/g, ' '));
  const comm = readText(`/proc/${pid}/comm`);
  return comm ? `[${comm.trim()}]` : '';
}

const numericDirs = (dir: string) => {
  try {
    return fs.readdirSync(dir).filter((d) => /^\d+$/.test(d));
  } catch {
    return [];
  }
};

/** Socket inode → the command holding it, for the processes this agent may look into. */
function socketOwners(): Map<string, string> {
  const owners = new Map<string, string>();
  for (const pid of numericDirs('/proc')) {
    let fds: string[];
    try {
      fds = fs.readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    let cmd: string | undefined;
    for (const fd of fds) {
      let link: string;
      try {
        link = fs.readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(link);
      if (m && !owners.has(m[1])) owners.set(m[1], (cmd ??= commandLine(pid)));
    }
  }
  return owners;
}

export function collectPorts(): ListeningPort[] | undefined {
  const sockets: ReturnType<typeof parseProcNet> = [];
  let any = false;
  for (const proto of ['tcp', 'tcp6', 'udp', 'udp6'] as const) {
    const text = readText(`/proc/net/${proto}`);
    if (text === undefined) continue;
    any = true;
    sockets.push(...parseProcNet(text, proto));
  }
  if (!any) return undefined;
  const owners = socketOwners();
  const seen = new Set<string>();
  const out: ListeningPort[] = [];
  for (const s of sockets) {
    const key = `${s.proto} ${s.socket}`;
    if (seen.has(key)) continue; // SO_REUSEPORT: one line per listener
    seen.add(key);
    out.push({ proto: s.proto, socket: s.socket, proc_info: owners.get(s.inode) ?? '' });
  }
  out.sort((a, b) => (a.proto + a.socket < b.proto + b.socket ? -1 : 1));
  return out.slice(0, INVENTORY_LIMITS.ports);
}

// ---- processes --------------------------------------------------------------------------------

const CLOCK_TICKS = 100; // USER_HZ on Linux

/** utime+stime and start time (clock ticks) from /proc/<pid>/stat; the command may hold spaces and parentheses. */
export function parseProcStat(text: string): { ticks: number; start: number } | undefined {
  const close = text.lastIndexOf(')');
  if (close < 0) return undefined;
  const f = text
    .slice(close + 2)
    .trim()
    .split(/\s+/);
  // f[0] is field 3 (state): utime is field 14, stime 15, starttime 22.
  const utime = Number(f[11]);
  const stime = Number(f[12]);
  const start = Number(f[19]);
  if (![utime, stime, start].every(Number.isFinite)) return undefined;
  return { ticks: utime + stime, start };
}

/** The processes using the most CPU (lifetime average, as `ps` shows) and the most memory, `perKind` of each. */
export function collectProcesses(perKind = INVENTORY_LIMITS.processes / 2): RunningProcess[] | undefined {
  const uptimeText = readText('/proc/uptime');
  const meminfo = readText('/proc/meminfo');
  if (!uptimeText || !meminfo) return undefined;
  const uptime = Number(uptimeText.split(' ')[0]);
  const memTotalKb = Number(/^MemTotal:\s+(\d+)/m.exec(meminfo)?.[1] ?? 0) || os.totalmem() / 1024;
  const names = new Map(parsePasswd(readText('/etc/passwd') ?? '').map((u) => [u.uid, u.user]));
  const all: RunningProcess[] = [];
  for (const pid of numericDirs('/proc')) {
    const stat = parseProcStat(readText(`/proc/${pid}/stat`) ?? '');
    const status = readText(`/proc/${pid}/status`);
    if (!stat || !status) continue;
    const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1);
    const rssKb = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
    const elapsed = uptime - stat.start / CLOCK_TICKS;
    const cpu = elapsed > 0 ? (100 * stat.ticks) / CLOCK_TICKS / elapsed : 0;
    all.push({
      pid: Number(pid),
      user: names.get(uid) ?? (uid >= 0 ? String(uid) : ''),
      mem: Math.round((1000 * rssKb) / memTotalKb) / 10,
      cpu: Math.round(cpu * 10) / 10,
      cmdline: commandLine(pid),
    });
  }
  const chosen = new Map<number, RunningProcess>();
  for (const p of [...all].sort((a, b) => b.cpu - a.cpu).slice(0, perKind)) chosen.set(p.pid, p);
  for (const p of [...all].sort((a, b) => b.mem - a.mem).slice(0, perKind)) chosen.set(p.pid, p);
  return [...chosen.values()].sort((a, b) => b.cpu - a.cpu || b.mem - a.mem || a.pid - b.pid).slice(0, INVENTORY_LIMITS.processes);
}

// ---- all of it, and what changed --------------------------------------------------------------

export type InventoryItems = Partial<Record<InventoryItemType, unknown>>;

/** Every item type this machine has; a collector that fails leaves its type out (and says why). */
export async function collectInventoryItems(onError: (type: string, err: Error) => void = () => {}): Promise<InventoryItems> {
  const out: InventoryItems = {};
  const guard = async <T>(type: string, f: () => Promise<T> | T): Promise<T | undefined> => {
    try {
      return await f();
    } catch (err) {
      onError(type, err as Error);
      return undefined;
    }
  };
  const software = await guard('software', collectSoftware);
  if (software) out.software = software;
  for (const engine of ['docker', 'podman'] as const) {
    const c = await guard(engine, () => collectContainers(engine));
    if (c) {
      out[`${engine}_containers`] = { items: c.containers };
      out[`${engine}_images`] = { items: c.images };
    }
  }
  const passwd = readText('/etc/passwd');
  if (passwd !== undefined) out.users = { items: parsePasswd(passwd, readText('/etc/shadow')) };
  const group = readText('/etc/group');
  if (group !== undefined) out.groups = { items: parseGroups(group) };
  const ports = await guard('ports', collectPorts);
  if (ports) out.ports = { items: ports };
  const processes = await guard('processes', () => collectProcesses());
  if (processes) out.processes = { items: processes };
  return out;
}

/**
 * The digest that decides whether a type is sent again. Processes are compared by who runs what and
 * their whole-percent CPU and memory, so a tenth of a percent of drift is not a change.
 */
export function inventoryDigest(type: string, data: unknown): string {
  let view = data;
  if (type === 'processes') {
    const items = (data as { items?: RunningProcess[] }).items ?? [];
    view = items.map((p) => [p.pid, p.user, p.cmdline, Math.round(p.cpu), Math.round(p.mem)]);
  } else if (type === 'system') {
    view = stableSystemView(data as Record<string, unknown>);
  }
  return crypto.createHash('sha256').update(JSON.stringify(view)).digest('hex');
}

/** The system report without what changes by itself (uptime, free memory and disk, collection time). */
function stableSystemView(r: Record<string, unknown>): Record<string, unknown> {
  const { uptime: _u, agent_uptime: _a, collected_at: _c, memory, disks, ...rest } = r;
  return {
    ...rest,
    memory_total: asRecord(memory).total,
    disks: Array.isArray(disks) ? disks.map((d) => ({ ...asRecord(d), free: undefined })) : disks,
  };
}
