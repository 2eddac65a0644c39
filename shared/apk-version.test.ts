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
];

describe('compareApkVersions', () => {
  it.each(TABLE)('%s vs %s → %i', (a, b, want) => {
    expect(compareApkVersions(a, b)).toBe(want);
    expect(compareApkVersions(b, a)).toBe(-want || 0);
  });

  it('refuses what apk refuses, and sorts it first without throwing', () => {
    expect(parseApkVersion('1.0-rc1')).toBeUndefined();
    expect(parseApkVersion('abc')).toBeUndefined();
    expect(parseApkVersion('1.0_foo')).toBeUndefined();
    expect(compareApkVersions('abc', '0.1')).toBe(-1);
    expect(compareApkVersions('abc', 'abd')).toBe(-1);
  });
});
