/**
 * CVSS base scores from vector strings, by the specification's formulas (FIRST, CVSS v3.1 §7 and
 * Appendix A for v3.0/v3.1; CVSS v2 §3.2.1). No npm library for this is well kept, and the formulas
 * are short. A CVSS v4 vector is not scored here (its score comes from a table of macro-vectors):
 * the caller falls back to the advisory's own severity.
 */

const V3: Record<string, Record<string, number>> = {
  AV: { N: 0.85, A: 0.62, L: 0.55, P: 0.2 },
  AC: { L: 0.77, H: 0.44 },
  UI: { N: 0.85, R: 0.62 },
  C: { H: 0.56, L: 0.22, N: 0 },
  I: { H: 0.56, L: 0.22, N: 0 },
  A: { H: 0.56, L: 0.22, N: 0 },
};
const PR_UNCHANGED: Record<string, number> = { N: 0.85, L: 0.62, H: 0.27 };
const PR_CHANGED: Record<string, number> = { N: 0.85, L: 0.68, H: 0.5 };

/** CVSS v3.1's Roundup: the smallest number with one decimal at or above x, free of float noise. */
export function roundUp(x: number): number {
  const n = Math.round(x * 100000);
  return n % 10000 === 0 ? n / 100000 : (Math.floor(n / 10000) + 1) / 10;
}

function metrics(vector: string, prefix: RegExp): Map<string, string> | undefined {
  const body = vector.trim().replace(prefix, '');
  const out = new Map<string, string>();
  for (const part of body.split('/')) {
    const m = /^([A-Za-z]+):([A-Za-z])$/.exec(part);
    if (!m || out.has(m[1])) return undefined;
    out.set(m[1], m[2]);
  }
  return out;
}

/** The base score of a `CVSS:3.0/…` or `CVSS:3.1/…` vector; undefined when it is not one. */
export function cvss3BaseScore(vector: string): number | undefined {
  if (!/^CVSS:3\.[01]\//.test(vector.trim())) return undefined;
  const m = metrics(vector, /^CVSS:3\.[01]\//);
  if (!m) return undefined;
  const scope = m.get('S');
  if (scope !== 'U' && scope !== 'C') return undefined;
  const pr = (scope === 'C' ? PR_CHANGED : PR_UNCHANGED)[m.get('PR') ?? ''];
  const v: Record<string, number> = {};
  for (const key of Object.keys(V3)) {
    const w = V3[key][m.get(key) ?? ''];
    if (w === undefined) return undefined;
    v[key] = w;
  }
  if (pr === undefined) return undefined;
  const iss = 1 - (1 - v.C) * (1 - v.I) * (1 - v.A);
  const impact = scope === 'U' ? 6.42 * iss : 7.52 * (iss - 0.029) - 3.25 * Math.pow(iss - 0.02, 15);
  const exploitability = 8.22 * v.AV * v.AC * pr * v.UI;
  if (impact <= 0) return 0;
  return scope === 'U' ? roundUp(Math.min(impact + exploitability, 10)) : roundUp(Math.min(1.08 * (impact + exploitability), 10));
}

const V2: Record<string, Record<string, number>> = {
  AV: { L: 0.395, A: 0.646, N: 1.0 },
  AC: { H: 0.35, M: 0.61, L: 0.71 },
  Au: { M: 0.45, S: 0.56, N: 0.704 },
  C: { N: 0, P: 0.275, C: 0.66 },
  I: { N: 0, P: 0.275, C: 0.66 },
  A: { N: 0, P: 0.275, C: 0.66 },
};

/** The base score of a CVSS v2 vector (`AV:N/AC:L/Au:N/C:P/I:P/A:P`, optionally in parentheses); undefined when it is not one. */
export function cvss2BaseScore(vector: string): number | undefined {
  const m = metrics(vector.replace(/^\(|\)$/g, ''), /^CVSS:2\.0\//);
  if (!m) return undefined;
  const v: Record<string, number> = {};
  for (const key of Object.keys(V2)) {
    const w = V2[key][m.get(key) ?? ''];
    if (w === undefined) return undefined;
    v[key] = w;
  }
  const impact = 10.41 * (1 - (1 - v.C) * (1 - v.I) * (1 - v.A));
  const exploitability = 20 * v.AV * v.AC * v.Au;
  const f = impact === 0 ? 0 : 1.176;
  return Math.round(((0.6 * impact + 0.4 * exploitability - 1.5) * f + Number.EPSILON) * 10) / 10;
}

export const SEVERITY_LEVELS = ['critical', 'high', 'medium', 'low', 'none', 'unknown'] as const;
export type SeverityLevel = (typeof SEVERITY_LEVELS)[number];

/** CVSS v3's qualitative rating of a score. */
export function severityOfScore(score: number): SeverityLevel {
  if (score >= 9) return 'critical';
  if (score >= 7) return 'high';
  if (score >= 4) return 'medium';
  if (score > 0) return 'low';
  return 'none';
}

/** A severity word an advisory gives (`database_specific.severity`: "HIGH", "Important", "moderate", …). */
export function severityOfWord(word: string): SeverityLevel | undefined {
  switch (word.trim().toLowerCase()) {
    case 'critical':
      return 'critical';
    case 'high':
    case 'important':
      return 'high';
    case 'medium':
    case 'moderate':
      return 'medium';
    case 'low':
    case 'negligible':
    case 'unimportant':
      return 'low';
    case 'none':
      return 'none';
    default:
      return undefined;
  }
}
