/**
 * The `search` of GET /files: qbee's `{"name": "...", "path": "..."}`, where clients send
 * regular expressions — qbee-cli lists a folder for `rm -r` and `sync --delete` with
 * `{"path": "^/dir/.*"}` and deletes everything the listing returns.
 *
 * A client's regular expression is never run. A safe subset is read into plain string tests
 * (linear in the path, so no pattern can hang the broker):
 *
 *     [^] literal... [.*] [$]
 *
 * - `^` at the start anchors at the start; `$` at the end anchors at the end; a trailing `.*`
 *   ends the pattern with "anything" (the same as leaving it out, without `$`).
 * - A literal is any character but `* + ? ( ) [ ] { } | ^ $`, or `\` before any character other
 *   than a letter or digit (an escaped metacharacter).
 * - `.` inside the literal matches only a dot. A regular expression would take any character
 *   there: `^/my.dir/.*` would also reach `/myXdir/`. Reading the dot literally answers a
 *   subset of what the expression matches, never more, which is what a client deleting the
 *   answer needs.
 *
 * Anything else (other quantifiers, classes, groups, alternation, `\d`...) answers 400: a search
 * this broker cannot apply exactly is refused, never widened.
 */
import { invalid } from '../errors.js';

/** Longest pattern: a store path (4096 bytes) with its anchors and escapes. */
export const MAX_PATTERN_LENGTH = 8192;

export interface PathPattern {
  /** The literal, escapes resolved. */
  literal: string;
  anchoredStart: boolean;
  anchoredEnd: boolean;
}

const META = new Set(['*', '+', '?', '(', ')', '[', ']', '{', '}', '|', '^', '$']);

const refuse = (field: string, why: string) =>
  invalid(
    `search.${field}: ${why} Supported: an optional "^", literal characters ("\\" escapes a metacharacter; "." matches a dot), an optional trailing ".*", an optional "$".`,
    { field: 'search', filter: field },
  );

/** Reads a pattern of the supported subset; 400 naming `field` for anything else. */
export function parsePathPattern(pattern: string, field: string): PathPattern {
  if (pattern.length > MAX_PATTERN_LENGTH) throw refuse(field, `at most ${MAX_PATTERN_LENGTH} characters.`);
  let body = pattern;
  const anchoredStart = body.startsWith('^');
  if (anchoredStart) body = body.slice(1);
  let anchoredEnd = false;
  if (body.endsWith('$') && !isEscaped(body, body.length - 1)) {
    anchoredEnd = true;
    body = body.slice(0, -1);
  }
  if (body.endsWith('.*') && !isEscaped(body, body.length - 2)) {
    // ".*" then "$" is still "anything after".
    body = body.slice(0, -2);
    anchoredEnd = false;
  }
  let literal = '';
  for (let i = 0; i < body.length; i++) {
    const c = body[i];
    if (c === '\\') {
      const next = body[i + 1];
      if (next === undefined) throw refuse(field, 'a "\\" at the end escapes nothing.');
      if (/[A-Za-z0-9]/.test(next)) throw refuse(field, `"\\${next}" is a character class or escape this broker does not apply.`);
      literal += next;
      i++;
      continue;
    }
    if (META.has(c)) throw refuse(field, `"${c}" is regular-expression syntax this broker does not apply.`);
    if (c === '.' && body[i + 1] === '*') throw refuse(field, '".*" is supported at the end only.');
    literal += c;
  }
  return { literal, anchoredStart, anchoredEnd };
}

/** Does `value` match the pattern? Plain string tests, linear in the value. */
export function matchesPattern(p: PathPattern, value: string, ignoreCase = false): boolean {
  const v = ignoreCase ? value.toLowerCase() : value;
  const lit = ignoreCase ? p.literal.toLowerCase() : p.literal;
  if (p.anchoredStart && p.anchoredEnd) return v === lit;
  if (p.anchoredStart) return v.startsWith(lit);
  if (p.anchoredEnd) return v.endsWith(lit);
  return v.includes(lit);
}

function isEscaped(s: string, index: number): boolean {
  let backslashes = 0;
  for (let i = index - 1; i >= 0 && s[i] === '\\'; i--) backslashes++;
  return backslashes % 2 === 1;
}

/** What GET /files keeps: entries whose name and whose path match (each when given). */
interface FileSearch {
  name?: PathPattern;
  path?: PathPattern;
}

/**
 * qbee's `{"name": "...", "path": "..."}` (patterns, see above; "" or absent: no filter), or a
 * plain text: part of the name. Another JSON field is a filter this broker cannot apply: 400.
 */
export function parseFileSearch(raw: string | undefined): FileSearch {
  if (raw === undefined || raw === '') return {};
  if (!raw.startsWith('{')) return { name: { literal: raw, anchoredStart: false, anchoredEnd: false } };
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw invalid('search: send JSON like {"name":"part of a name","path":"^/folder/.*"} or plain text.', { field: 'search' });
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw invalid('search: must be a JSON object.', { field: 'search' });
  const out: FileSearch = {};
  for (const [key, value] of Object.entries(parsed)) {
    if (key !== 'name' && key !== 'path') {
      throw invalid(`search.${key}: is a filter this broker cannot apply; GET /files searches by name and path.`, { field: 'search', filter: key });
    }
    if (typeof value !== 'string') throw invalid(`search.${key}: must be a string.`, { field: 'search', filter: key });
    if (value !== '') out[key] = parsePathPattern(value, key);
  }
  return out;
}
