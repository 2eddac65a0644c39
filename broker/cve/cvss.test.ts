import { describe, expect, it } from 'vitest';
import { cvss2BaseScore, cvss3BaseScore, roundUp, severityOfScore, severityOfWord } from './cvss.js';

/** Vectors with the base scores NVD publishes for them. */
const V3: Array<[string, number]> = [
  ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H', 10.0], // CVE-2021-44228
  ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H', 9.8],
  ['CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H', 7.8], // CVE-2021-4034
  ['CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N', 6.1],
  ['CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:N', 5.9],
  ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H', 7.5],
  ['CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:N/A:N', 5.5],
  ['CVSS:3.1/AV:N/AC:L/PR:L/UI:N/S:C/C:L/I:L/A:N', 6.4],
  ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:N/A:N', 5.3],
  ['CVSS:3.1/AV:L/AC:H/PR:L/UI:N/S:U/C:H/I:H/A:H', 7.0],
  ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:L/A:L', 7.3],
  ['CVSS:3.0/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N', 7.5], // CVE-2014-0160 as rescored
  ['CVSS:3.1/AV:P/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N', 0],
  ['CVSS:3.1/AV:N/AC:L/PR:H/UI:N/S:C/C:H/I:H/A:H', 9.1],
];

describe('CVSS v3 base score', () => {
  it.each(V3)('%s → %d', (vector, score) => {
    expect(cvss3BaseScore(vector)).toBe(score);
  });

  it('refuses what is not a v3 vector', () => {
    for (const bad of [
      'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:X/C:H/I:H/A:H',
      'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H',
      'CVSS:3.1/AV:N/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H',
      'CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N',
      'AV:N/AC:L/Au:N/C:P/I:P/A:P',
      '',
    ])
      expect(cvss3BaseScore(bad)).toBeUndefined();
  });

  it('rounds up the way the specification does (no float noise)', () => {
    expect(roundUp(4.02)).toBe(4.1);
    expect(roundUp(4.0)).toBe(4.0);
    expect(roundUp(4.000001)).toBe(4.0);
  });
});

describe('CVSS v2 base score', () => {
  it.each<[string, number]>([
    ['AV:N/AC:L/Au:N/C:P/I:P/A:P', 7.5],
    ['AV:N/AC:L/Au:N/C:C/I:C/A:C', 10.0],
    ['AV:N/AC:M/Au:N/C:P/I:N/A:N', 4.3],
    ['AV:L/AC:L/Au:N/C:C/I:C/A:C', 7.2],
    ['(AV:N/AC:L/Au:N/C:N/I:N/A:P)', 5.0],
    ['AV:N/AC:L/Au:N/C:N/I:N/A:N', 0],
  ])('%s → %d', (vector, score) => {
    expect(cvss2BaseScore(vector)).toBe(score);
  });
});

describe('severity', () => {
  it('rates scores as CVSS v3 does and reads advisory words', () => {
    expect([9.8, 7, 6.9, 4, 3.9, 0.1, 0].map(severityOfScore)).toEqual(['critical', 'high', 'medium', 'medium', 'low', 'low', 'none']);
    expect(['HIGH', 'Important', 'moderate', 'unimportant', 'whatever'].map(severityOfWord)).toEqual(['high', 'high', 'medium', 'low', undefined]);
  });
});
