import type { AgentReport } from '../../shared/protocol.js';
import { checkReports, REPORT_LIMITS, severityLevel, type CheckedReports } from '../../shared/reports.js';

export { checkReports, REPORT_LIMITS, SEVERITIES, severityLevel, type CheckedReports, type ReportRefusal } from '../../shared/reports.js';

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

/** A report as stored. */
export interface ValidReport extends Required<Omit<AgentReport, 'log'>> {
  level: number;
  log: string | null;
}

/** The tail of a base64 log, at most `maxBytes` decoded bytes, re-encoded. */
function logTail(log: string, maxBytes: number): string {
  if (log.length <= Math.floor(maxBytes / 3) * 4) return log;
  const bytes = Buffer.from(log, 'base64');
  return bytes.length <= maxBytes ? log : bytes.subarray(bytes.length - maxBytes).toString('base64');
}

/**
 * What is kept of a checked report (checkReports): its text cut at REPORT_LIMITS.text (marked with
 * …), the tail of its log, its severity level. Done after secrets are scrubbed, so a secret is never
 * cut in two before it is looked for.
 */
export function trimReport(r: AgentReport): ValidReport {
  const text = r.text.length > REPORT_LIMITS.text ? `${r.text.slice(0, REPORT_LIMITS.text - 1)}…` : r.text;
  return {
    bundle: r.bundle,
    bundle_commit_id: r.bundle_commit_id,
    commit_id: r.commit_id,
    labels: r.labels,
    sev: r.sev,
    level: severityLevel(r.sev),
    text,
    log: r.log ? logTail(r.log, REPORT_LIMITS.logBytes) : null,
    ts: r.ts,
  };
}

/** Checks and trims in one step: reports from a caller in this process (tests, the agent's own events). */
export function checkAndTrim(input: unknown): { valid: ValidReport[]; refused: CheckedReports['refused'] } {
  const checked = checkReports(input);
  return { valid: checked.valid.map(trimReport), refused: checked.refused };
}
