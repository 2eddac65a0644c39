/**
 * Debian package versions, ordered the way dpkg orders them (deb-version(7)):
 * `[epoch:]upstream_version[-debian_revision]`. The epoch compares as a number; the upstream part
 * and the revision compare alternately by non-digit runs (letters before other characters, `~`
 * before everything, even the end of the string) and by digit runs as numbers. A missing revision
 * equals `0`. The broker's fleet search ("openssl < 3.0.13") and, later, CVE matching use it.
 */

/** Characters a version may hold (dpkg refuses others); `:` and `-` only where they split the parts. */
const VERSION_CHARS = /^[A-Za-z0-9.+~:-]+$/;

export interface DpkgVersion {
  epoch: number;
  upstream: string;
  revision: string;
}

/** Splits a version into its parts; undefined when dpkg would refuse it (empty, bad epoch, bad characters). */
export function parseDpkgVersion(text: string): DpkgVersion | undefined {
  const v = text.trim();
  if (!v || !VERSION_CHARS.test(v)) return undefined;
  let epoch = 0;
  let rest = v;
  const colon = v.indexOf(':');
  if (colon >= 0) {
    const e = v.slice(0, colon);
    if (!/^\d+$/.test(e) || e.length > 9) return undefined;
    epoch = Number(e);
    rest = v.slice(colon + 1);
  }
  const hyphen = rest.lastIndexOf('-');
  const upstream = hyphen >= 0 ? rest.slice(0, hyphen) : rest;
  const revision = hyphen >= 0 ? rest.slice(hyphen + 1) : '';
  // dpkg warns about an upstream part not starting with a digit but compares it; an empty part is an error.
  if (!upstream || (hyphen >= 0 && !revision) || upstream.includes(':') || revision.includes(':')) return undefined;
  return { epoch, upstream, revision };
}

const isDigit = (c: string | undefined) => c !== undefined && c >= '0' && c <= '9';
const isLetter = (c: string) => (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');

/** The weight of one character in a non-digit run: `~` lowest, then the end (and digits), letters, then the rest. */
function order(c: string | undefined): number {
  if (c === undefined || isDigit(c)) return 0;
  if (c === '~') return -1;
  if (isLetter(c)) return c.charCodeAt(0);
  return c.charCodeAt(0) + 256;
}

/** dpkg's verrevcmp: one part (upstream or revision) against another; <0, 0, >0. */
function compareParts(a: string, b: string): number {
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    while ((i < a.length && !isDigit(a[i])) || (j < b.length && !isDigit(b[j]))) {
      const ac = order(a[i]);
      const bc = order(b[j]);
      if (ac !== bc) return ac - bc;
      i++;
      j++;
    }
    while (a[i] === '0') i++;
    while (b[j] === '0') j++;
    let firstDiff = 0;
    while (isDigit(a[i]) && isDigit(b[j])) {
      if (!firstDiff) firstDiff = a.charCodeAt(i) - b.charCodeAt(j);
      i++;
      j++;
    }
    if (isDigit(a[i])) return 1;
    if (isDigit(b[j])) return -1;
    if (firstDiff) return firstDiff;
  }
  return 0;
}

/**
 * Compares two versions as `dpkg --compare-versions` does: -1, 0 or 1. A version dpkg would refuse
 * sorts before every valid one (two refused versions compare as strings), so a hostile report
 * cannot make a comparison throw.
 */
export function compareDpkgVersions(a: string, b: string): -1 | 0 | 1 {
  const x = parseDpkgVersion(a);
  const y = parseDpkgVersion(b);
  if (!x || !y) {
    if (x) return 1;
    if (y) return -1;
    return a < b ? -1 : a > b ? 1 : 0;
  }
  const c = x.epoch - y.epoch || compareParts(x.upstream, y.upstream) || compareParts(x.revision, y.revision);
  return c < 0 ? -1 : c > 0 ? 1 : 0;
}

export type VersionOperator = '<' | '<=' | '=' | '>=' | '>' | '!=';

export interface VersionConstraint {
  op: VersionOperator;
  version: string;
}

/** `<3.0.13`, `>= 1:2.0-1`, `=1.0` or a bare version (meaning `=`); undefined when malformed. */
export function parseVersionConstraint(text: string): VersionConstraint | undefined {
  const m = /^\s*(<=|>=|!=|<<|>>|<|>|==|=)?\s*(\S+)\s*$/.exec(text);
  if (!m) return undefined;
  const ops: Record<string, VersionOperator> = { '<': '<', '<<': '<', '<=': '<=', '=': '=', '==': '=', '>=': '>=', '>': '>', '>>': '>', '!=': '!=' };
  const op = ops[m[1] ?? '='];
  if (!parseDpkgVersion(m[2])) return undefined;
  return { op, version: m[2] };
}

/** Does `version` satisfy the constraint (dpkg ordering)? */
export function satisfies(version: string, c: VersionConstraint): boolean {
  const r = compareDpkgVersions(version, c.version);
  switch (c.op) {
    case '<':
      return r < 0;
    case '<=':
      return r <= 0;
    case '=':
      return r === 0;
    case '>=':
      return r >= 0;
    case '>':
      return r > 0;
    case '!=':
      return r !== 0;
  }
}
