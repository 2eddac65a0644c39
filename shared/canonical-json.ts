/**
 * JSON with object keys in sorted order at every depth: one text for one value (audit chain, broker
 * signatures). For every JSON value this is the RFC 8785 text (canonical-json.test.ts holds it to the
 * canonicalize package). It stays hand-written because canonicalize throws where this writes: a lone
 * surrogate in a string a user sent, NaN or Infinity. An audit write or a signed configuration must not
 * fail on such input, and agents already in the field verify signatures with this function.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value ?? null);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}
