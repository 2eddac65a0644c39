/**
 * Agent reports on the wire (qbee's configuration `Report`): the one check of what an agent sends as
 * reports, with its limits, applied where the message arrives (shared/wire.ts). Plain code, no schema
 * library: the agent loads this module too. Trimming what is kept (a long text cut, a log's tail) is
 * the reports domain's, after secrets are scrubbed (broker/reports/validate.ts).
 */
import type { AgentReport, ReportSeverity } from './protocol.js';

/** Severities in rising order: the index is the level stored for ordering and minimum-severity filters. */
export const SEVERITIES: readonly ReportSeverity[] = ['INFO', 'WARN', 'ERR', 'CRIT'];

export function severityLevel(sev: string): number {
  return SEVERITIES.indexOf(sev as ReportSeverity);
}

/** Bounds on what one agent message may carry; beyond them a report (or the whole message) is refused. */
export const REPORT_LIMITS = {
  /** reports in one message; a longer list is refused whole */
  perMessage: 500,
  bundle: 128,
  labels: 512,
  commitId: 128,
  /** characters of `text` kept; a longer text is cut there (marked with …) */
  text: 4096,
  /** bytes of the decoded log kept: its tail, where the outcome is */
  logBytes: 16 * 1024,
  /** characters of the base64 log accepted at all; a longer one is refused with its report */
  logChars: 1024 * 1024,
} as const;

/** Why reports were refused: codes for the log line, counted. */
export type ReportRefusal = 'not_a_list' | 'too_many' | 'not_an_object' | 'bad_severity' | 'bad_field' | 'too_long' | 'bad_log';

/** Reports as checked on arrival: each good one in qbee's shape (optional fields filled), the others counted by reason. */
export interface CheckedReports {
  valid: AgentReport[];
  refused: Partial<Record<ReportRefusal, number>>;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
/** NUL cannot be stored in PostgreSQL text; other control characters are kept (the UI escapes). */
const NUL = /\u0000/;
/** Upper bound on `ts`: the year 5138 in Unix seconds. Anything larger is not a time. */
const MAX_TS = 1e11;

function shortString(value: unknown, max: number, allowEmpty = true): string | 'too_long' | undefined {
  if (typeof value !== 'string' || NUL.test(value) || (!allowEmpty && value === '')) return undefined;
  return value.length > max ? 'too_long' : value;
}

function checkOne(raw: unknown): AgentReport | ReportRefusal {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) return 'not_an_object';
  const r = raw as Record<string, unknown>;
  if (typeof r.sev !== 'string' || severityLevel(r.sev) < 0) return 'bad_severity';
  const bundle = shortString(r.bundle, REPORT_LIMITS.bundle, false);
  const labels = shortString(r.labels ?? '', REPORT_LIMITS.labels);
  const bundleCommit = shortString(r.bundle_commit_id ?? '', REPORT_LIMITS.commitId);
  const commit = shortString(r.commit_id ?? '', REPORT_LIMITS.commitId);
  const fields = [bundle, labels, bundleCommit, commit];
  if (fields.includes(undefined)) return 'bad_field';
  if (fields.includes('too_long')) return 'too_long';
  if (typeof r.text !== 'string' || NUL.test(r.text)) return 'bad_field';
  if (typeof r.ts !== 'number' || !Number.isSafeInteger(r.ts) || r.ts < 0 || r.ts > MAX_TS) return 'bad_field';
  let log: string | undefined;
  if (r.log !== undefined && r.log !== null && r.log !== '') {
    if (typeof r.log !== 'string' || r.log.length > REPORT_LIMITS.logChars || !BASE64.test(r.log)) return 'bad_log';
    log = r.log;
  }
  return {
    bundle: bundle as string,
    bundle_commit_id: bundleCommit as string,
    commit_id: commit as string,
    labels: labels as string,
    sev: r.sev as ReportSeverity,
    text: r.text,
    ts: r.ts,
    ...(log !== undefined ? { log } : {}),
  };
}

/**
 * Checks what an agent sent as reports (a hostile peer): a list of at most REPORT_LIMITS.perMessage
 * objects in qbee's Report shape. Each bad report is refused alone (counted by reason); a list too
 * long, or not a list, is refused whole. Unknown fields are left out.
 */
export function checkReports(input: unknown): CheckedReports {
  if (!Array.isArray(input)) return { valid: [], refused: { not_a_list: 1 } };
  if (input.length > REPORT_LIMITS.perMessage) return { valid: [], refused: { too_many: input.length } };
  const out: CheckedReports = { valid: [], refused: {} };
  for (const raw of input) {
    const checked = checkOne(raw);
    if (typeof checked === 'string') out.refused[checked] = (out.refused[checked] ?? 0) + 1;
    else out.valid.push(checked);
  }
  return out;
}
