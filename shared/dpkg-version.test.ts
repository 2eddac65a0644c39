import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { compareDpkgVersions, parseDpkgVersion, parseVersionConstraint, satisfies } from './dpkg-version.js';

/** [a, b, expected sign of a compared to b], as `dpkg --compare-versions` answers. */
const TABLE: Array<[string, string, -1 | 0 | 1]> = [
  ['1.0', '1.0', 0],
  ['1.0', '1.0-0', 0],
  ['0:1.0', '1.0', 0],
  ['1.0', '1.1', -1],
  ['1.10', '1.9', 1],
  ['1.001', '1.1', 0],
  ['1.0~rc1', '1.0', -1],
  ['1.0~rc1', '1.0~rc2', -1],
  ['1.0~~', '1.0~', -1],
  ['1.0~', '1.0', -1],
  ['1.0', '1.0a', -1],
  ['1.0a', '1.0+', -1],
  ['1.0+', '1.0.', -1],
  ['1.0-1', '1.0-1ubuntu1', -1],
  ['1.0-1ubuntu1', '1.0-2', -1],
  ['1.0-1~bpo1', '1.0-1', -1],
  ['1:0.1', '9.9', 1],
  ['2:1.0', '1:9.9', 1],
  ['3.0.13-0+deb12u1', '3.0.13', 1],
  ['3.0.11-1~deb12u2', '3.0.13', -1],
  ['3.0.2-0ubuntu1.15', '3.0.13', -1],
  ['1.2.3-4-5', '1.2.3-4', 1],
  ['1.2.3-4-5', '1.2.3-5', 1],
  ['10', '9', 1],
  ['1.0.0', '1.0', 1],
  ['1.0', '1.0.0~', -1],
  ['2.36.1-8+deb11u1', '2.36.1-8', 1],
  ['1:2.38.1-5+deb12u3', '2.40', 1],
  ['7.88.1-10+deb12u8', '7.88.1-10+deb12u12', -1],
  ['1.0+dfsg', '1.0', 1],
  ['1.0+dfsg-1', '1.0-1', 1],
  ['a', '1', 1],
  ['1.0-a', '1.0-1', 1],
  ['0.9.8zh', '0.9.8z', 1],
  ['5.2.15-2+b2', '5.2.15-2', 1],
  ['0', '00', 0],
];

/** `dpkg --compare-versions a op b` on this machine: true or false. */
function dpkg(a: string, op: string, b: string): boolean {
  try {
    execFileSync('dpkg', ['--compare-versions', a, op, b], { stdio: 'ignore' });
    return true;
  } catch (err) {
    if ((err as { status?: number }).status === 1) return false;
    throw err;
  }
}

describe('dpkg version ordering', () => {
  it.each(TABLE)('%s vs %s → %i', (a, b, expected) => {
    expect(compareDpkgVersions(a, b)).toBe(expected);
    expect(compareDpkgVersions(b, a)).toBe(-expected || 0);
  });

  it('agrees with dpkg --compare-versions on this machine for every row of the table', () => {
    // The table is checked against the real dpkg: a wrong row fails here, not only the code.
    for (const [a, b, expected] of TABLE) {
      expect({ a, b, lt: dpkg(a, 'lt', b), eq: dpkg(a, 'eq', b) }).toEqual({ a, b, lt: expected < 0, eq: expected === 0 });
    }
  });

  it('splits epoch, upstream and revision; refuses what dpkg refuses', () => {
    expect(parseDpkgVersion('1:2.3-4-5')).toEqual({ epoch: 1, upstream: '2.3-4', revision: '5' });
    expect(parseDpkgVersion('2.3')).toEqual({ epoch: 0, upstream: '2.3', revision: '' });
    for (const bad of ['', ' ', '1.0-', 'x:1.0', '1.0 2', '1.0_1', ':1.0', '1.0$']) expect(parseDpkgVersion(bad)).toBeUndefined();
    // A refused version sorts below every valid one, without throwing.
    expect(compareDpkgVersions('1.0-', '0.1')).toBe(-1);
    expect(compareDpkgVersions('0.1', '1.0-')).toBe(1);
  });

  it('parses and applies constraints', () => {
    expect(parseVersionConstraint('<3.0.13')).toEqual({ op: '<', version: '3.0.13' });
    expect(parseVersionConstraint(' >= 1:2.0-1 ')).toEqual({ op: '>=', version: '1:2.0-1' });
    expect(parseVersionConstraint('3.0.13')).toEqual({ op: '=', version: '3.0.13' });
    expect(parseVersionConstraint('<< 2')).toEqual({ op: '<', version: '2' });
    for (const bad of ['', '<', '< 1 2', '=1.0_1', '<1.0-']) expect(parseVersionConstraint(bad)).toBeUndefined();
    const lt = parseVersionConstraint('<3.0.13')!;
    expect(satisfies('3.0.11-1~deb12u2', lt)).toBe(true);
    expect(satisfies('3.0.13-0+deb12u1', lt)).toBe(false);
    expect(satisfies('3.0.13~rc1', lt)).toBe(true);
    expect(satisfies('1.0', parseVersionConstraint('!=1.0-0')!)).toBe(false);
    expect(satisfies('1.1', parseVersionConstraint('>1.0')!)).toBe(true);
    expect(satisfies('1.0', parseVersionConstraint('<=1.0')!)).toBe(true);
  });
});
