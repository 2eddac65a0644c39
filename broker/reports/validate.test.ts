import { describe, expect, it } from 'vitest';
import { checkAndTrim as checkReports, REPORT_LIMITS, severityLevel } from './validate.js';

const good = { bundle: 'users', bundle_commit_id: 'abc', commit_id: 'def', labels: 'users', sev: 'ERR', text: 'User bob not created', log: '', ts: 1700000000 };

describe('checkReports', () => {
  it('keeps reports in qbee’s shape, with their severity level', () => {
    const out = checkReports([good, { ...good, sev: 'CRIT', log: Buffer.from('tail').toString('base64') }]);
    expect(out.refused).toEqual({});
    expect(out.valid.map((r) => [r.sev, r.level, r.log])).toEqual([
      ['ERR', 2, null],
      ['CRIT', 3, Buffer.from('tail').toString('base64')],
    ]);
  });

  it('refuses unknown severities, wrong types, NUL characters, oversized ids and bad logs, each alone', () => {
    const out = checkReports([
      good,
      { ...good, sev: 'DEBUG' },
      { ...good, sev: 'err' },
      { ...good, ts: '1700000000' },
      { ...good, ts: 1e12 },
      { ...good, bundle: '' },
      { ...good, commit_id: 'x'.repeat(REPORT_LIMITS.commitId + 1) },
      { ...good, text: 'a\u0000b' },
      { ...good, log: '%%%' },
      { ...good, log: 'A'.repeat(REPORT_LIMITS.logChars + 4) },
      null,
      [good],
    ]);
    expect(out.valid).toHaveLength(1);
    expect(out.refused).toEqual({ bad_severity: 2, bad_field: 4, too_long: 1, bad_log: 2, not_an_object: 2 });
  });

  it('refuses a list that is too long, or not a list, whole', () => {
    expect(checkReports(Array.from({ length: REPORT_LIMITS.perMessage + 1 }, () => good))).toEqual({
      valid: [],
      refused: { too_many: REPORT_LIMITS.perMessage + 1 },
    });
    expect(checkReports({ 0: good })).toEqual({ valid: [], refused: { not_a_list: 1 } });
  });

  it('cuts a long text and keeps the tail of a long log', () => {
    const log = Buffer.concat([Buffer.alloc(REPORT_LIMITS.logBytes, 'a'), Buffer.from('THE END')]);
    const [r] = checkReports([{ ...good, text: 'y'.repeat(REPORT_LIMITS.text * 2), log: log.toString('base64') }]).valid;
    expect(r.text).toHaveLength(REPORT_LIMITS.text);
    const kept = Buffer.from(r.log as string, 'base64');
    expect(kept.length).toBe(REPORT_LIMITS.logBytes);
    expect(kept.subarray(-7).toString()).toBe('THE END');
  });

  it('orders severities INFO < WARN < ERR < CRIT', () => {
    expect(['INFO', 'WARN', 'ERR', 'CRIT', 'NOTICE'].map(severityLevel)).toEqual([0, 1, 2, 3, -1]);
  });
});
