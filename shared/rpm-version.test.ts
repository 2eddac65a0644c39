import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { compareRpmVersions, parseRpmVersion, rpmvercmp } from './rpm-version.js';

/** [a, b, rpmvercmp(a, b)]: the pairs of rpm's own test suite (tests/rpmvercmp.at). */
const RPMVERCMP: Array<[string, string, -1 | 0 | 1]> = [
  ['1.0', '1.0', 0],
  ['1.0', '2.0', -1],
  ['2.0', '1.0', 1],
  ['2.0.1', '2.0.1', 0],
  ['2.0', '2.0.1', -1],
  ['2.0.1', '2.0', 1],
  ['2.0.1a', '2.0.1a', 0],
  ['2.0.1a', '2.0.1', 1],
  ['2.0.1', '2.0.1a', -1],
  ['5.5p1', '5.5p1', 0],
  ['5.5p1', '5.5p2', -1],
  ['5.5p2', '5.5p1', 1],
  ['5.5p10', '5.5p10', 0],
  ['5.5p1', '5.5p10', -1],
  ['5.5p10', '5.5p1', 1],
  ['10xyz', '10.1xyz', -1],
  ['10.1xyz', '10xyz', 1],
  ['xyz10', 'xyz10', 0],
  ['xyz10', 'xyz10.1', -1],
  ['xyz10.1', 'xyz10', 1],
  ['xyz.4', 'xyz.4', 0],
  ['xyz.4', '8', -1],
  ['8', 'xyz.4', 1],
  ['xyz.4', '2', -1],
  ['2', 'xyz.4', 1],
  ['5.5p2', '5.6p1', -1],
  ['5.6p1', '5.5p2', 1],
  ['5.6p1', '6.5p1', -1],
  ['6.5p1', '5.6p1', 1],
  ['6.0.rc1', '6.0', 1],
  ['6.0', '6.0.rc1', -1],
  ['10b2', '10a1', 1],
  ['10a2', '10b2', -1],
  ['1.0aa', '1.0aa', 0],
  ['1.0a', '1.0aa', -1],
  ['1.0aa', '1.0a', 1],
  ['10.0001', '10.0001', 0],
  ['10.0001', '10.1', 0],
  ['10.1', '10.0001', 0],
  ['10.0001', '10.0039', -1],
  ['10.0039', '10.0001', 1],
  ['4.999.9', '5.0', -1],
  ['5.0', '4.999.9', 1],
  ['20101121', '20101121', 0],
  ['20101121', '20101122', -1],
  ['20101122', '20101121', 1],
  ['2_0', '2_0', 0],
  ['2.0', '2_0', 0],
  ['2_0', '2.0', 0],
  ['a', 'a', 0],
  ['a+', 'a+', 0],
  ['a+', 'a_', 0],
  ['a_', 'a+', 0],
  ['+a', '+a', 0],
  ['+a', '_a', 0],
  ['_a', '+a', 0],
  ['+_', '+_', 0],
  ['_+', '+_', 0],
  ['_+', '_', 0],
  ['+', '_', 0],
  ['1.0~rc1', '1.0~rc1', 0],
  ['1.0~rc1', '1.0', -1],
  ['1.0', '1.0~rc1', 1],
  ['1.0~rc1', '1.0~rc2', -1],
  ['1.0~rc2', '1.0~rc1', 1],
  ['1.0~rc1~git123', '1.0~rc1~git123', 0],
  ['1.0~rc1~git123', '1.0~rc1', -1],
  ['1.0~rc1', '1.0~rc1~git123', 1],
  ['1.0^', '1.0^', 0],
  ['1.0^', '1.0', 1],
  ['1.0', '1.0^', -1],
  ['1.0^git1', '1.0^git1', 0],
  ['1.0^git1', '1.0', 1],
  ['1.0', '1.0^git1', -1],
  ['1.0^git1', '1.0^git2', -1],
  ['1.0^git2', '1.0^git1', 1],
  ['1.0^git1', '1.01', -1],
  ['1.01', '1.0^git1', 1],
  ['1.0^20160101', '1.0^20160101', 0],
  ['1.0^20160101', '1.0.1', -1],
  ['1.0.1', '1.0^20160101', 1],
  ['1.0^20160101^git1', '1.0^20160101^git1', 0],
  ['1.0^20160102', '1.0^20160101^git1', 1],
  ['1.0^20160101^git1', '1.0^20160102', -1],
  ['1.0~rc1^git1', '1.0~rc1^git1', 0],
  ['1.0~rc1^git1', '1.0~rc1', 1],
  ['1.0~rc1', '1.0~rc1^git1', -1],
  ['1.0^git1~pre', '1.0^git1~pre', 0],
  ['1.0^git1', '1.0^git1~pre', 1],
  ['1.0^git1~pre', '1.0^git1', -1],
];

describe('rpmvercmp', () => {
  it.each(RPMVERCMP)('%s vs %s → %i', (a, b, want) => {
    expect(rpmvercmp(a, b)).toBe(want);
  });
});

/** Extra pairs, checked against this machine's rpm as well. */
const MORE: Array<[string, string]> = [
  ['3.0.7-24.el9', '3.0.7-27.el9_4'],
  ['1.2.3', '1.2.3.0'],
  ['2.02', '2.2'],
  ['1.0.0~beta1', '1.0.0'],
  ['0.9.8zh', '0.9.8z'],
  ['1_2', '1.2.0'],
  ['5.1.8-6.el9', '5.1.8-6.el9_1'],
  ['abc', 'abd'],
  ['1.0', 'a1.0'],
  ['1:1.0-1', '2.0-1'],
  ['2.0-1', '2.0'],
];

describe('against rpm itself', () => {
  it('answers as `rpm.vercmp` (epoch:version-release) of this machine’s rpm for every pair', () => {
    const pairs = [...RPMVERCMP.map(([a, b]) => [a, b] as [string, string]), ...MORE];
    // rpm's Lua, the results separated by ";" (its print adds no line breaks); versions hold no quote or backslash.
    const lua = pairs.map(([a, b]) => `print(tostring(rpm.vercmp('${a}', '${b}')) .. ';')`).join(' ');
    const out = execFileSync('rpm', ['--eval', `%{lua: ${lua}}`], { encoding: 'utf8' })
      .trim()
      .split(';')
      .filter((r) => r !== '');
    expect(out).toHaveLength(pairs.length);
    pairs.forEach(([a, b], i) => expect([a, b, compareRpmVersions(a, b)]).toEqual([a, b, Math.sign(Number(out[i]))]));
  });
});

describe('compareRpmVersions (epoch:version-release)', () => {
  it.each<[string, string, -1 | 0 | 1]>([
    ['1:1.0-1', '2.0-1', 1],
    ['0:1.0-1', '1.0-1', 0],
    ['3.0.7-24.el9', '3.0.7-25.el9', -1],
    ['3.0.7-27.el9_4', '3.0.7-27.el9', 1],
    ['1:3.0.7-27.el9', '1:3.0.7-24.el9', 1],
    ['3.0.7-24.el9', '3.0.7', 1],
    ['2.34-83.el9.7', '2.34-100.el9', -1],
    ['7.76.1-26.el9_3.2', '7.76.1-26.el9_3.3', -1],
    ['4.18.0-513.5.1.el8_9', '4.18.0-477.10.1.el8_8', 1],
  ])('%s vs %s → %i', (a, b, want) => {
    expect(compareRpmVersions(a, b)).toBe(want);
    expect(compareRpmVersions(b, a)).toBe(-want || 0);
  });

  it('splits epoch, version and release', () => {
    expect(parseRpmVersion('2:1.2.3-4.el9')).toEqual({ epoch: 2, version: '1.2.3', release: '4.el9' });
    expect(parseRpmVersion('1.2')).toEqual({ epoch: 0, version: '1.2', release: '' });
    expect(parseRpmVersion('x:1.2-3')).toEqual({ epoch: 0, version: 'x:1.2', release: '3' });
  });
});
