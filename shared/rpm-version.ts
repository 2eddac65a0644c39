/**
 * RPM package versions, ordered the way rpm orders them (rpmvercmp and rpmVersionCompare):
 * `[epoch:]version[-release]`. The epoch compares as a number (missing = 0); version and release
 * each compare segment by segment: separators (anything not a letter, digit, `~` or `^`) are
 * skipped, `~` sorts before everything (even the end), `^` after the end but before anything
 * else, digit runs compare as numbers (leading zeros dropped) and beat letter runs, letter runs
 * compare as bytes. Used by CVE matching for devices whose package manager is rpm.
 */

const isDigit = (c: string | undefined) => c !== undefined && c >= '0' && c <= '9';
const isAlpha = (c: string | undefined) => c !== undefined && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'));
const isAlnum = (c: string | undefined) => isDigit(c) || isAlpha(c);

/** rpmvercmp: one version (or release) string against another; -1, 0 or 1. */
export function rpmvercmp(a: string, b: string): -1 | 0 | 1 {
  if (a === b) return 0;
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    while (i < a.length && !isAlnum(a[i]) && a[i] !== '~' && a[i] !== '^') i++;
    while (j < b.length && !isAlnum(b[j]) && b[j] !== '~' && b[j] !== '^') j++;
    // `~` sorts before everything else, the end included.
    if (a[i] === '~' || b[j] === '~') {
      if (a[i] !== '~') return 1;
      if (b[j] !== '~') return -1;
      i++;
      j++;
      continue;
    }
    // `^` sorts after the end of a version but before anything else.
    if (a[i] === '^' || b[j] === '^') {
      if (i >= a.length) return -1;
      if (j >= b.length) return 1;
      if (a[i] !== '^') return 1;
      if (b[j] !== '^') return -1;
      i++;
      j++;
      continue;
    }
    if (!(i < a.length && j < b.length)) break;
    const numeric = isDigit(a[i]);
    const take = numeric ? isDigit : isAlpha;
    let ei = i;
    let ej = j;
    while (ei < a.length && take(a[ei])) ei++;
    while (ej < b.length && take(b[ej])) ej++;
    // A digit run against a letter run: the digits are newer.
    if (ej === j) return numeric ? 1 : -1;
    let x = a.slice(i, ei);
    let y = b.slice(j, ej);
    if (numeric) {
      x = x.replace(/^0+/, '');
      y = y.replace(/^0+/, '');
      if (x.length !== y.length) return x.length > y.length ? 1 : -1;
    }
    if (x !== y) return x < y ? -1 : 1;
    i = ei;
    j = ej;
  }
  if (i >= a.length && j >= b.length) return 0;
  return i >= a.length ? -1 : 1;
}

export interface RpmVersion {
  epoch: number;
  version: string;
  release: string;
}

/** Splits `[epoch:]version[-release]`; a non-numeric "epoch" is kept in the version, as rpm does. */
export function parseRpmVersion(text: string): RpmVersion {
  let rest = text.trim();
  let epoch = 0;
  const colon = rest.indexOf(':');
  if (colon > 0 && /^\d{1,9}$/.test(rest.slice(0, colon))) {
    epoch = Number(rest.slice(0, colon));
    rest = rest.slice(colon + 1);
  }
  const hyphen = rest.lastIndexOf('-');
  return hyphen >= 0 ? { epoch, version: rest.slice(0, hyphen), release: rest.slice(hyphen + 1) } : { epoch, version: rest, release: '' };
}

/**
 * Compares two `[epoch:]version[-release]` strings as rpm's `rpm.vercmp` (rpmverCmp) does: epoch
 * (missing = 0), then version, then release, each with rpmvercmp — a missing release sorts before
 * any release, so `2.0` < `2.0-1`.
 */
export function compareRpmVersions(a: string, b: string): -1 | 0 | 1 {
  const x = parseRpmVersion(a);
  const y = parseRpmVersion(b);
  if (x.epoch !== y.epoch) return x.epoch < y.epoch ? -1 : 1;
  return rpmvercmp(x.version, y.version) || rpmvercmp(x.release, y.release);
}
