/**
 * The order `fleet devices` lists names in: String.prototype.localeCompare's, without its cost at
 * start. The first localeCompare of a process builds an ICU collator (tens of milliseconds, more than
 * the rest of `fleet devices`). For names of plain ASCII (letters, digits, space, `_`, `-`, `.`) under
 * a locale that collates as ICU's root does (English, C, POSIX, none), compareNames orders as ICU's
 * root collation does — digits before letters, letters without regard to case first, then lower
 * case before upper case at the first difference — and collate.test.ts checks it against ICU itself.
 * Any other name or locale is compared by localeCompare, as before.
 */

/** The characters plainCompare orders, in ICU's root order (case aside). */
const ORDER = ' _-.0123456789abcdefghijklmnopqrstuvwxyz';
const PLAIN = /^[A-Za-z0-9 _.-]*$/;
const weight = new Uint8Array(128);
for (let i = 0; i < ORDER.length; i++) {
  weight[ORDER.charCodeAt(i)] = i + 1;
  weight[ORDER.toUpperCase().charCodeAt(i)] = i + 1;
}

/** ICU's root collation for two plain strings (see PLAIN): -1, 0 or 1. */
export function plainCompare(a: string, b: string): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = weight[a.charCodeAt(i)] - weight[b.charCodeAt(i)];
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  if (a.length !== b.length) return a.length < b.length ? -1 : 1;
  // The same letters: the first difference of case decides, lower case first.
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] > b[i] ? -1 : 1;
  return 0;
}

/**
 * True when the locale ICU takes from the environment (LC_ALL, LC_MESSAGES, LANG) collates plain
 * ASCII as the root collation does: each of them that is set is English or C/POSIX (whichever ICU
 * picks, then). A modifier (`@…`) or any other language may tailor the order (Danish puts `aa` after
 * `z`, upper case first), so it is not.
 */
export function rootCollation(env: NodeJS.ProcessEnv = process.env): boolean {
  return ['LC_ALL', 'LC_MESSAGES', 'LANG'].every((name) => {
    const value = env[name];
    return !value || (/^(C|POSIX|en)([._]|$)/.test(value) && !value.includes('@'));
  });
}

/** localeCompare's order of two names (see the top of this file). */
export function nameComparator(env: NodeJS.ProcessEnv = process.env): (a: string, b: string) => number {
  const root = rootCollation(env);
  return (a, b) => (root && PLAIN.test(a) && PLAIN.test(b) ? plainCompare(a, b) : a.localeCompare(b));
}
