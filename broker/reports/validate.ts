import type { AgentReport, ReportSeverity } from '../../shared/protocol.js';

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
  /** characters of `text`; a longer text is cut there (marked with …) */
  text: 4096,
  /** bytes of the decoded log kept: its tail, where the outcome is */
  logBytes: 16 * 1024,
  /** characters of the base64 log accepted at all; a longer one is refused with its report */
  logChars: 1024 * 1024,
} as const;

/**
 * How far ahead of the broker's clock a device may stamp a report (clock skew): a later `ts` is
 * stored as broker time plus this, so a device cannot pin the newest report (`last_ts`, ordering)
 * in the future.
 */
export const REPORT_FUTURE_SKEW_S = 5 * 60;

/** A device's `ts` bounded by the broker's clock (`nowS`, Unix seconds): at most REPORT_FUTURE_SKEW_S ahead. */
export function clampReportTs(ts: number, nowS: number): number {
  return Math.min(ts, nowS + REPORT_FUTURE_SKEW_S);
}

/** A report as stored, checked. */
export interface ValidReport extends Required<Omit<AgentReport, 'log'>> {
  level: number;
  log: string | null;
}

/** Why reports were refused: codes for the log line, counted. */
export type ReportRefusal = 'not_a_list' | 'too_many' | 'not_an_object' | 'bad_severity' | 'bad_field' | 'too_long' | 'bad_log';

export interface CheckedReports {
  valid: ValidReport[];
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

/** The tail of a base64 log, at most `maxBytes` decoded bytes, re-encoded. */
function logTail(log: string, maxBytes: number): string {
  if (log.length <= Math.floor(maxBytes / 3) * 4) return log;
  const bytes = Buffer.from(log, 'base64');
  return bytes.length <= maxBytes ? log : bytes.subarray(bytes.length - maxBytes).toString('base64');
}

function checkOne(raw: unknown): ValidReport | ReportRefusal {
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
  let log: string | null = null;
  if (r.log !== undefined && r.log !== null && r.log !== '') {
    if (typeof r.log !== 'string' || r.log.length > REPORT_LIMITS.logChars || !BASE64.test(r.log)) return 'bad_log';
    log = logTail(r.log, REPORT_LIMITS.logBytes);
  }
  const text = r.text.length > REPORT_LIMITS.text ? `${r.text.slice(0, REPORT_LIMITS.text - 1)}…` : r.text;
  return {
    bundle: bundle as string,
    bundle_commit_id: bundleCommit as string,
    commit_id: commit as string,
    labels: labels as string,
    sev: r.sev as ReportSeverity,
    level: severityLevel(r.sev),
    text,
    log,
    ts: r.ts,
  };
}

/**
 * Checks what an agent sent as reports (a hostile peer): a list of at most REPORT_LIMITS.perMessage
 * objects in qbee's Report shape. Each bad report is refused alone (counted by reason); a list too
 * long, or not a list, is refused whole.
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
