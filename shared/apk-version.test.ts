import { describe, expect, it } from 'vitest';
import { compareApkVersions, parseApkVersion } from './apk-version.js';

/** [a, b, sign of a compared to b] as `apk version -t a b` answers (Alpine's apk-tools test data and its rules). */
const TABLE: Array<[string, string, -1 | 0 | 1]> = [
  ['1.0', '1.0', 0],
  ['1.0', '1.1', -1],
  ['2.0', '1.9', 1],
  ['1.10', '1.9', 1],
  ['1.0.1', '1.0', 1],
  ['1.0', '1.0.0', -1],
  ['1.0a', '1.0', 1],
  ['1.0a', '1.0b', -1],
  ['1.2a', '1.2.1', -1],
  ['1.0_alpha', '1.0', -1],
  ['1.0_alpha', '1.0_beta', -1],
  ['1.0_beta', '1.0_pre', -1],
  ['1.0_pre', '1.0_rc', -1],
  ['1.0_rc1', '1.0', -1],
  ['1.0_rc1', '1.0_rc2', -1],
  ['1.0_rc10', '1.0_rc9', 1],
  ['1.0', '1.0_p1', -1],
  ['1.0_p1', '1.0_p2', -1],
  ['1.0_cvs', '1.0_git', -1],
  ['1.0_git20230101', '1.0_p1', -1],
  ['1.0_alpha1_p1', '1.0_alpha1', 1],
  ['1.0_alpha1_beta1', '1.0_alpha1', -1],
  ['1.0-r1', '1.0-r2', -1],
  ['1.0-r10', '1.0-r9', 1],
  ['1.0', '1.0-r0', 0],
  ['1.0_rc1-r5', '1.0-r0', -1],
  ['1.01', '1.1', -1],
  ['1.01', '1.001', 1],
  ['1.010', '1.01', 0],
  ['3.1.4-r5', '3.1.4-r6', -1],
  ['1.36.1-r15', '1.36.1-r5', 1],
  ['3.1.1-r1', '3.0.12-r0', 1],
  ['1.1.1t-r0', '1.1.1u-r0', -1],
  ['2.40.1-r0', '2.40.1_rc1-r0', 1],
  ['8.5.0~5ad5ed4f-r0', '8.5.0-r0', 0],
  ['20230101', '9999', 1],
  // From apk-tools' test data (test/version.data).
  ['23_foo', '4_beta', 1],
  ['1.0', '1.0bc', -1],
  ['0.1.0_alpha2', '0.1.0_alpha', 1],
  ['1.1', '1.1_alpha1', 1],
  ['0.12.3', '0.12', 1],
  ['1.06-r6', '006', -1],
  ['3.9.8-r5', '2.01.01_alpha10', 1],
  ['1.0', '0.99.3.20040818', 1],
  ['4.2.52_p2-r1', '4.2.52_p4-r2', -1],
  ['20060720', '3.0.20060720', 1],
  ['2.5.1-r8', '2.5.1a-r1', -1],
  ['3.0.0-r2', '021109-r3', -1],
  ['0.10.0', '0.10.1_rc1', -1],
  ['0.15.1b-r2', '0.15.1b', 1],
  ['22.7-r1', '22.7.3-r1', -1],
  ['2.10.1', '02.08.01b', 1],
  ['1.2.07.8', '1.2.12.04', -1],
  ['1.07-r1', '1.07.5', -1],
  ['0.20070118', '0.20070207_rc1', -1],
  ['0.9.28.1', '087-r1', -1],
  ['7.0.17', '7.0.174', -1],
  ['1.3_pre1-r1', '1.3.2', -1],
  ['1.0_p10-r0', '1.0_p9-r0', 1],
  ['0.1.0_alpha_pre2', '0.1.0_alpha', -1],
  ['1.0.0_pre20191002222144-r0', '1.0.0_pre20210530193627-r0', -1],
];

describe('compareApkVersions', () => {
  it.each(TABLE)('%s vs %s → %i', (a, b, want) => {
    expect(compareApkVersions(a, b)).toBe(want);
    expect(compareApkVersions(b, a)).toBe(-want || 0);
  });

  it('refuses what apk refuses; compares it by its valid start, else as text, without throwing', () => {
    expect(parseApkVersion('1.0-rc1')).toBeUndefined();
    expect(parseApkVersion('abc')).toBeUndefined();
    expect(parseApkVersion('1.0_foo')).toBeUndefined();
    expect(compareApkVersions('abc', '0.1')).toBe(-1);
    expect(compareApkVersions('abc', 'abd')).toBe(-1);
  });
});
