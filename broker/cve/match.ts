/**
 * Matching installed packages against advisories, in memory: an index from package name to the
 * affected entries naming it, each with its ecosystem's ordering (dpkg, rpm or apk). A device is
 * matched by looking up each installed package by name (a hash lookup), then evaluating the few
 * entries found; the outcome of (entry, installed version) is memoised, since a fleet runs few
 * distinct versions of a package. No database access here.
 */
import { compareApkVersions } from '../../shared/apk-version.js';
import { compareDpkgVersions } from '../../shared/dpkg-version.js';
import { compareRpmVersions } from '../../shared/rpm-version.js';
import { parseEcosystem, type Ecosystem, type PackageFamily, type RangeEvent } from './osv.js';

export const COMPARE: Record<PackageFamily, (a: string, b: string) => -1 | 0 | 1> = {
  dpkg: compareDpkgVersions,
  rpm: compareRpmVersions,
  apk: compareApkVersions,
};

/** A device's package manager → the ordering of its versions (opkg uses dpkg's). */
export function familyOfManager(pkgManager: string): PackageFamily | undefined {
  switch (pkgManager) {
    case 'dpkg':
    case 'opkg':
      return 'dpkg';
    case 'rpm':
      return 'rpm';
    case 'apk':
      return 'apk';
    default:
      return undefined;
  }
}

/**
 * Is `version` affected by one OSV range? The events are put in version order ("0" first) and
 * walked: `introduced` at or below the version opens, `fixed` at or below it closes, a
 * `last_affected` below it closes. Returns the first fix above the version when affected
 * (null when none is known), or false.
 */
export function inRange(version: string, events: RangeEvent[], cmp: (a: string, b: string) => number): string | null | false {
  const keyed = events
    .map((e) => {
      const v = e.introduced ?? e.fixed ?? e.last_affected ?? '';
      return { e, v };
    })
    .filter((x) => x.v !== '');
  const order = (a: string, b: string) => (a === '0' ? (b === '0' ? 0 : -1) : b === '0' ? 1 : cmp(a, b));
  keyed.sort((x, y) => order(x.v, y.v));
  let affected = false;
  for (const { e, v } of keyed) {
    if (e.introduced !== undefined) {
      if (v === '0' || cmp(version, v) >= 0) affected = true;
    } else if (e.fixed !== undefined) {
      if (cmp(version, v) >= 0) affected = false;
    } else if (e.last_affected !== undefined) {
      if (cmp(version, v) > 0) affected = false;
    }
  }
  if (!affected) return false;
  const fix = keyed.find(({ e, v }) => e.fixed !== undefined && cmp(version, v) < 0);
  return fix ? fix.v : null;
}

export interface IndexedEntry {
  advisoryId: string;
  cveIds: string[];
  eco: Ecosystem;
  ranges: RangeEvent[][];
  versions: Set<string>;
  /** installed version → fixed version (null: no fix known) or false (not affected). */
  memo: Map<string, string | null | false>;
}

export interface DeviceFacts {
  deviceId: string;
  /** os-release ID and VERSION_ID from the system inventory, when known. */
  osId?: string;
  osVersion?: string;
}

export interface InstalledPackage {
  name: string;
  version: string;
  pkg_manager: string;
  /** Its source package when named otherwise (dpkg): advisories of Debian and Ubuntu name source packages. */
  source?: string | null;
}

export interface Match {
  device_id: string;
  cve_id: string;
  advisory_id: string;
  package: string;
  version: string;
  fixed_version: string | null;
}

/** Does an entry's ecosystem apply to a device: its distribution when known, its release when both are known. */
export function ecosystemApplies(eco: Ecosystem, facts: DeviceFacts): boolean {
  const id = facts.osId?.toLowerCase();
  if (id) {
    const same = eco.distro === id || (eco.distro === 'opensuse' && id.startsWith('opensuse')) || (eco.distro === 'sles' && id.startsWith('sle'));
    if (!same) return false;
  }
  if (id && eco.release && facts.osVersion) {
    const v = facts.osVersion.replace(/^v/, '');
    if (v !== eco.release && !v.startsWith(`${eco.release}.`)) return false;
  }
  return true;
}

export class MatchIndex {
  private readonly byName = new Map<string, IndexedEntry[]>();
  private readonly ecosystems = new Map<string, Ecosystem | undefined>();
  size = 0;

  add(advisoryId: string, cveIds: string[], ecosystem: string, name: string, ranges: RangeEvent[][], versions: string[]): void {
    if (!this.ecosystems.has(ecosystem)) this.ecosystems.set(ecosystem, parseEcosystem(ecosystem));
    const eco = this.ecosystems.get(ecosystem);
    if (!eco) return;
    const entry: IndexedEntry = { advisoryId, cveIds, eco, ranges, versions: new Set(versions), memo: new Map() };
    const list = this.byName.get(name);
    if (list) list.push(entry);
    else this.byName.set(name, [entry]);
    this.size++;
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  /** Does any advisory name this package, or its source package? */
  concerns(p: InstalledPackage): boolean {
    return this.byName.has(p.name) || (!!p.source && this.byName.has(p.source));
  }

  /** The matches of one device's packages. */
  matchDevice(facts: DeviceFacts, packages: InstalledPackage[]): Match[] {
    const out: Match[] = [];
    // Whether an ecosystem applies is decided once per device (a feed names few ecosystems).
    const applies = new Map<Ecosystem, boolean>();
    for (const p of packages) {
      const own = this.byName.get(p.name);
      const bySource = p.source && p.source !== p.name ? this.byName.get(p.source) : undefined;
      const entries = own && bySource ? [...own, ...bySource] : (own ?? bySource);
      if (!entries) continue;
      const family = familyOfManager(p.pkg_manager);
      if (!family) continue;
      // Two advisories naming the same CVE for one package give one finding.
      const seen = entries.length > 1 ? new Set<string>() : undefined;
      for (const entry of entries) {
        if (entry.eco.family !== family) continue;
        let ok = applies.get(entry.eco);
        if (ok === undefined) {
          ok = ecosystemApplies(entry.eco, facts);
          applies.set(entry.eco, ok);
        }
        if (!ok) continue;
        let result = entry.memo.get(p.version);
        if (result === undefined) {
          result = evaluate(entry, p.version);
          if (entry.memo.size < 10_000) entry.memo.set(p.version, result);
        }
        if (result === false) continue;
        for (const cve of entry.cveIds) {
          if (seen) {
            if (seen.has(cve)) continue;
            seen.add(cve);
          }
          out.push({ device_id: facts.deviceId, cve_id: cve, advisory_id: entry.advisoryId, package: p.name, version: p.version, fixed_version: result });
        }
      }
    }
    return out;
  }
}

function evaluate(entry: IndexedEntry, version: string): string | null | false {
  const cmp = COMPARE[entry.eco.family];
  let hit: string | null | false = false;
  for (const events of entry.ranges) {
    const r = inRange(version, events, cmp);
    if (r === false) continue;
    // Prefer a range that names a fix.
    if (hit === false || (hit === null && r !== null)) hit = r;
  }
  if (hit === false && entry.versions.has(version)) hit = null;
  return hit;
}
