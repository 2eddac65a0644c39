/**
 * Reading advisories in OSV's JSON format (https://ossf.github.io/osv-schema/), as the public OSV
 * database exports them per ecosystem (Debian, Ubuntu, Alpine, Rocky Linux, …): one advisory per
 * file, or an array of them. Only what matching and listing need is kept: ids and CVE aliases, the
 * summary, a score (computed from a CVSS vector) or a severity word, and per affected OS package
 * its ecosystem, name, ECOSYSTEM ranges and listed versions. Every string and list is bounded; an
 * affected entry of an ecosystem that is not an OS distribution (npm, PyPI, Go, …) is dropped.
 */
import { z } from 'zod';
import { cvss2BaseScore, cvss3BaseScore, severityOfScore, severityOfWord, type SeverityLevel } from './cvss.js';

/** Which version ordering an ecosystem uses: the package manager of the distributions it covers. */
export type PackageFamily = 'dpkg' | 'rpm' | 'apk';

/** OSV ecosystem name (before the first `:`) → os-release ID and ordering. */
const DISTROS: Record<string, { distro: string; family: PackageFamily }> = {
  debian: { distro: 'debian', family: 'dpkg' },
  ubuntu: { distro: 'ubuntu', family: 'dpkg' },
  alpine: { distro: 'alpine', family: 'apk' },
  wolfi: { distro: 'wolfi', family: 'apk' },
  chainguard: { distro: 'chainguard', family: 'apk' },
  'rocky linux': { distro: 'rocky', family: 'rpm' },
  almalinux: { distro: 'almalinux', family: 'rpm' },
  'red hat': { distro: 'rhel', family: 'rpm' },
  opensuse: { distro: 'opensuse', family: 'rpm' },
  suse: { distro: 'sles', family: 'rpm' },
  mageia: { distro: 'mageia', family: 'rpm' },
  openeuler: { distro: 'openeuler', family: 'rpm' },
};

export interface Ecosystem {
  family: PackageFamily;
  /** os-release ID of the distribution ("debian", "ubuntu", "alpine", "rocky", …). */
  distro: string;
  /** Its release ("12", "22.04", "3.18"); "" when the ecosystem names none. */
  release: string;
}

/** `Debian:12`, `Ubuntu:22.04:LTS`, `Ubuntu:Pro:18.04:LTS`, `Alpine:v3.18`, `Rocky Linux:9`, … ; undefined for other ecosystems. */
export function parseEcosystem(name: string): Ecosystem | undefined {
  const parts = name.split(':');
  const known = DISTROS[parts[0].trim().toLowerCase()];
  if (!known) return undefined;
  const release = parts
    .slice(1)
    .map((p) => /(\d+(?:\.\d+)*)/.exec(p)?.[1])
    .find((p) => p !== undefined);
  return { ...known, release: release ?? '' };
}

const text = (max: number) => z.string().max(max);
const event = z
  .object({ introduced: text(256).optional(), fixed: text(256).optional(), last_affected: text(256).optional(), limit: text(256).optional() })
  .passthrough();
const advisorySchema = z
  .object({
    id: z
      .string()
      .min(1)
      .max(128)
      .regex(/^[A-Za-z0-9._:+-]+$/, 'an OSV id: letters, digits and . _ : + -'),
    modified: text(64).optional(),
    published: text(64).optional(),
    withdrawn: text(64).optional(),
    aliases: z.array(text(128)).max(1000).optional(),
    upstream: z.array(text(128)).max(1000).optional(),
    summary: text(100_000).optional(),
    details: text(1_000_000).optional(),
    severity: z
      .array(z.object({ type: text(64), score: text(512) }).passthrough())
      .max(20)
      .optional(),
    affected: z
      .array(
        z
          .object({
            package: z
              .object({ ecosystem: text(256), name: text(256), purl: text(1024).optional() })
              .passthrough()
              .optional(),
            ranges: z
              .array(z.object({ type: text(64), events: z.array(event).max(1000) }).passthrough())
              .max(100)
              .optional(),
            versions: z.array(text(256)).max(20_000).optional(),
            severity: z
              .array(z.object({ type: text(64), score: text(512) }).passthrough())
              .max(20)
              .optional(),
            ecosystem_specific: z.unknown().optional(),
            database_specific: z.unknown().optional(),
          })
          .passthrough(),
      )
      .max(5000)
      .optional(),
    database_specific: z.unknown().optional(),
  })
  .passthrough();

export type RangeEvent = { introduced?: string; fixed?: string; last_affected?: string };

export interface AffectedPackage {
  ecosystem: string;
  name: string;
  /** ECOSYSTEM ranges: each a list of events. */
  ranges: RangeEvent[][];
  /** Versions listed as affected. */
  versions: string[];
}

export interface Advisory {
  id: string;
  /** The CVE ids it is listed by: its CVE aliases (upstream ids too), or its own id when it is a CVE or has none. */
  cveIds: string[];
  summary: string;
  score: number | null;
  severity: SeverityLevel;
  published: string | null;
  modified: string | null;
  affected: AffectedPackage[];
}

const CVE_ID = /^CVE-\d{4}-\d{4,}$/;

/** The best score of a list of OSV severity entries (CVSS v3 first, then v2); undefined when none scores. */
function scoreOf(entries: Array<{ type: string; score: string }> | undefined): number | undefined {
  let best: number | undefined;
  for (const e of entries ?? []) {
    const s = e.type === 'CVSS_V3' ? cvss3BaseScore(e.score) : e.type === 'CVSS_V2' ? cvss2BaseScore(e.score) : undefined;
    if (s !== undefined && (best === undefined || s > best)) best = s;
  }
  return best;
}

/** `database_specific.severity` (a word: "HIGH", "moderate", …), top-level or per affected package. */
function wordOf(v: unknown): SeverityLevel | undefined {
  if (v && typeof v === 'object' && 'severity' in v && typeof (v as { severity: unknown }).severity === 'string')
    return severityOfWord((v as { severity: string }).severity);
  return undefined;
}

const RANK: Record<SeverityLevel, number> = { critical: 5, high: 4, medium: 3, low: 2, none: 1, unknown: 0 };
export const severityRank = (s: SeverityLevel) => RANK[s];

export type ParseResult = { ok: true; advisory: Advisory | undefined } | { ok: false; error: string };

/**
 * One OSV advisory object → what is kept of it; `advisory` undefined when it concerns no OS
 * package (or is withdrawn). `ok: false` with a reason naming the field when it is malformed.
 */
export function parseAdvisory(raw: unknown): ParseResult {
  const parsed = advisorySchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const id = raw && typeof raw === 'object' && typeof (raw as { id?: unknown }).id === 'string' ? ` (${(raw as { id: string }).id.slice(0, 128)})` : '';
    return { ok: false, error: `${issue.path.join('.') || 'advisory'}${id}: ${issue.message}` };
  }
  const a = parsed.data;
  if (a.withdrawn) return { ok: true, advisory: undefined };
  const affected: AffectedPackage[] = [];
  let packageScore: number | undefined;
  let packageWord: SeverityLevel | undefined;
  for (const entry of a.affected ?? []) {
    if (!entry.package || !parseEcosystem(entry.package.ecosystem)) continue;
    const ranges = (entry.ranges ?? [])
      .filter((r) => r.type === 'ECOSYSTEM')
      .map((r) =>
        r.events.map((e) => {
          const out: RangeEvent = {};
          if (e.introduced !== undefined) out.introduced = e.introduced;
          if (e.fixed !== undefined) out.fixed = e.fixed;
          if (e.last_affected !== undefined) out.last_affected = e.last_affected;
          return out;
        }),
      )
      .filter((events) => events.length > 0);
    const versions = entry.versions ?? [];
    if (ranges.length === 0 && versions.length === 0) continue;
    affected.push({ ecosystem: entry.package.ecosystem, name: entry.package.name, ranges, versions });
    const s = scoreOf(entry.severity);
    if (s !== undefined && (packageScore === undefined || s > packageScore)) packageScore = s;
    const w = wordOf(entry.database_specific) ?? wordOf(entry.ecosystem_specific);
    if (w && (!packageWord || RANK[w] > RANK[packageWord])) packageWord = w;
  }
  if (affected.length === 0) return { ok: true, advisory: undefined };
  const score = scoreOf(a.severity) ?? packageScore;
  const word = wordOf(a.database_specific) ?? packageWord;
  const cves = [...new Set([a.id, ...(a.aliases ?? []), ...(a.upstream ?? [])].filter((id) => CVE_ID.test(id)))];
  const summary = (a.summary || a.details || '').replace(/\s+/g, ' ').trim().slice(0, 500);
  return {
    ok: true,
    advisory: {
      id: a.id,
      cveIds: cves.length > 0 ? cves.slice(0, 50) : [a.id],
      summary,
      score: score ?? null,
      severity: score !== undefined ? severityOfScore(score) : (word ?? 'unknown'),
      published: a.published ?? null,
      modified: a.modified ?? null,
      affected,
    },
  };
}

/**
 * The advisories of one JSON document: an advisory, or an array of them (some tools bundle them).
 * A document that is not JSON, or any advisory in it that is malformed, fails the whole document.
 */
export function parseDocument(json: string): { ok: true; advisories: Advisory[]; skipped: number } | { ok: false; error: string } {
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch (err) {
    return { ok: false, error: `not JSON: ${(err as Error).message}` };
  }
  const list = Array.isArray(value) ? value : [value];
  const advisories: Advisory[] = [];
  let skipped = 0;
  for (const [i, item] of list.entries()) {
    const r = parseAdvisory(item);
    if (!r.ok) return { ok: false, error: Array.isArray(value) ? `[${i}] ${r.error}` : r.error };
    if (r.advisory) advisories.push(r.advisory);
    else skipped++;
  }
  return { ok: true, advisories, skipped };
}
