/**
 * The typed inventory of the device (shared/inventory.ts): installed packages (dpkg's or opkg's
 * status file read directly, rpm through `rpm -qa`), docker and podman containers and images
 * (through their CLIs, when present and answering), then users and groups (inventory-accounts.ts),
 * listening ports and the top processes (inventory-proc.ts), all collected by collectInventoryItems.
 * Parsers are pure; collectors read this machine and never write. Each payload is trimmed to the
 * broker's limits, so a big host reports a truncated list rather than none.
 */
import { INVENTORY_LIMITS } from '../shared/inventory-limits.js';
import type { DockerContainer, DockerImage, InventoryItemType, SoftwareInventory, SoftwarePackage } from '../shared/inventory.js';
import { parseGroups, parsePasswd } from './inventory-accounts.js';
import { collectPorts, collectProcesses } from './inventory-proc.js';
import { asRecord, clean, onPath, readText, run } from './inventory-read.js';
import { isoTime } from './iso-time.js';

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
    const created = typeof r.CreatedAt === 'string' ? r.CreatedAt : typeof r.Created === 'number' ? isoTime(r.Created * 1000) : '';
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
    const created = typeof r.CreatedAt === 'string' ? r.CreatedAt : typeof r.Created === 'number' ? isoTime(r.Created * 1000) : '';
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
