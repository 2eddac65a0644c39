/**
 * Alpine (apk) package versions, ordered the way `apk version -t` orders them:
 * `digits(.digits)*[letter](_suffix[digits])*[~hash][-r digits]`. Numbers compare as numbers (a
 * later part starting with `0` compares as a decimal fraction, as Gentoo's rules that apk follows
 * say); more parts are newer; a letter after the numbers is newer than none; suffixes `_alpha`,
 * `_beta`, `_pre`, `_rc` come before the release and `_cvs`, `_svn`, `_git`, `_hg`, `_p` after;
 * the `-rN` package revision breaks ties. Checked against the pairs of apk-tools' own test data.
 */

const SUFFIXES = ['alpha', 'beta', 'pre', 'rc', '', 'cvs', 'svn', 'git', 'hg', 'p'] as const;
const RELEASE = SUFFIXES.indexOf('');

export interface ApkVersion {
  numbers: string[];
  letter: string;
  suffixes: Array<{ rank: number; n: bigint }>;
  revision: bigint;
}

const PATTERN = /^(\d+(?:\.\d+)*)([a-z]?)((?:_(?:alpha|beta|pre|rc|cvs|svn|git|hg|p)\d*)*)(?:~[0-9a-f]+)?(?:-r(\d+))?$/;

/** Splits an apk version into its parts; undefined when apk would refuse it. */
export function parseApkVersion(text: string): ApkVersion | undefined {
  const m = PATTERN.exec(text.trim());
  if (!m) return undefined;
  const suffixes = [...m[3].matchAll(/_([a-z]+)(\d*)/g)].map((s) => ({ rank: SUFFIXES.indexOf(s[1] as (typeof SUFFIXES)[number]), n: BigInt(s[2] || '0') }));
  return { numbers: m[1].split('.'), letter: m[2], suffixes, revision: BigInt(m[4] ?? '0') };
}

const sign = (n: number): -1 | 0 | 1 => (n < 0 ? -1 : n > 0 ? 1 : 0);
const cmpBig = (a: bigint, b: bigint): -1 | 0 | 1 => (a < b ? -1 : a > b ? 1 : 0);

/** One number part: the first, or one without a leading zero, as a number; else as a decimal fraction. */
function compareNumber(a: string, b: string, first: boolean): -1 | 0 | 1 {
  if (first || (!a.startsWith('0') && !b.startsWith('0'))) return cmpBig(BigInt(a), BigInt(b));
  const x = a.replace(/0+$/, '');
  const y = b.replace(/0+$/, '');
  return x === y ? 0 : x < y ? -1 : 1;
}

/** The longest start of an invalid version that apk would accept ("23" of "23_foo"); undefined when none. */
function validPrefix(text: string): ApkVersion | undefined {
  for (let end = Math.min(text.length, 256) - 1; end > 0; end--) {
    const v = parseApkVersion(text.slice(0, end));
    if (v) return v;
  }
  return undefined;
}

/**
 * Compares two apk versions: -1, 0 or 1. Like apk, a version that turns invalid part-way compares
 * by its valid start first (`23_foo` > `4_beta`); when that ties, or nothing is valid, as strings.
 */
export function compareApkVersions(a: string, b: string): -1 | 0 | 1 {
  const x = parseApkVersion(a);
  const y = parseApkVersion(b);
  if (!x || !y) {
    const px = x ?? validPrefix(a);
    const py = y ?? validPrefix(b);
    if (px && !py) return 1;
    if (py && !px) return -1;
    const c = px && py ? compareParsed(px, py) : 0;
    return c || (a < b ? -1 : a > b ? 1 : 0);
  }
  return compareParsed(x, y);
}

function compareParsed(x: ApkVersion, y: ApkVersion): -1 | 0 | 1 {
  const n = Math.min(x.numbers.length, y.numbers.length);
  for (let i = 0; i < n; i++) {
    const c = compareNumber(x.numbers[i], y.numbers[i], i === 0);
    if (c) return c;
  }
  if (x.numbers.length !== y.numbers.length) return x.numbers.length > y.numbers.length ? 1 : -1;
  if (x.letter !== y.letter) return x.letter < y.letter ? -1 : 1;
  const s = Math.max(x.suffixes.length, y.suffixes.length);
  for (let i = 0; i < s; i++) {
    const p = x.suffixes[i] ?? { rank: RELEASE, n: 0n };
    const q = y.suffixes[i] ?? { rank: RELEASE, n: 0n };
    if (p.rank !== q.rank) return sign(p.rank - q.rank);
    const c = cmpBig(p.n, q.n);
    if (c) return c;
  }
  return cmpBig(x.revision, y.revision);
}
