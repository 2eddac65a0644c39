import { describe, expect, it } from 'vitest';
import { compareDpkgVersions } from '../../shared/dpkg-version.js';
import { ecosystemApplies, inRange, MatchIndex } from './match.js';
import { parseAdvisory, parseDocument, parseEcosystem } from './osv.js';

describe('OSV ecosystems', () => {
  it('maps distributions to their ordering and release', () => {
    expect(parseEcosystem('Debian:12')).toEqual({ family: 'dpkg', distro: 'debian', release: '12' });
    expect(parseEcosystem('Ubuntu:22.04:LTS')).toEqual({ family: 'dpkg', distro: 'ubuntu', release: '22.04' });
    expect(parseEcosystem('Ubuntu:Pro:18.04:LTS')).toEqual({ family: 'dpkg', distro: 'ubuntu', release: '18.04' });
    expect(parseEcosystem('Alpine:v3.18')).toEqual({ family: 'apk', distro: 'alpine', release: '3.18' });
    expect(parseEcosystem('Rocky Linux:9')).toEqual({ family: 'rpm', distro: 'rocky', release: '9' });
    expect(parseEcosystem('Debian')).toEqual({ family: 'dpkg', distro: 'debian', release: '' });
    expect(parseEcosystem('PyPI')).toBeUndefined();
    expect(parseEcosystem('npm')).toBeUndefined();
  });

  it('applies an ecosystem to a device by its OS when known, else to any of the family', () => {
    const deb12 = parseEcosystem('Debian:12')!;
    expect(ecosystemApplies(deb12, { deviceId: 'd', osId: 'debian', osVersion: '12' })).toBe(true);
    expect(ecosystemApplies(deb12, { deviceId: 'd', osId: 'debian', osVersion: '11' })).toBe(false);
    expect(ecosystemApplies(deb12, { deviceId: 'd', osId: 'ubuntu', osVersion: '12' })).toBe(false);
    expect(ecosystemApplies(deb12, { deviceId: 'd' })).toBe(true);
    expect(ecosystemApplies(parseEcosystem('Alpine:v3.18')!, { deviceId: 'd', osId: 'alpine', osVersion: '3.18.4' })).toBe(true);
    expect(ecosystemApplies(parseEcosystem('Alpine:v3.18')!, { deviceId: 'd', osId: 'alpine', osVersion: '3.1' })).toBe(false);
    expect(ecosystemApplies(parseEcosystem('Rocky Linux:9')!, { deviceId: 'd', osId: 'rocky', osVersion: '9.3' })).toBe(true);
  });
});

describe('OSV ranges', () => {
  const cmp = compareDpkgVersions;
  it('introduced/fixed, whatever the order of the events', () => {
    const events = [{ fixed: '1.5-1' }, { introduced: '0' }];
    expect(inRange('1.4-1', events, cmp)).toBe('1.5-1');
    expect(inRange('1.5-1', events, cmp)).toBe(false);
    expect(inRange('1.5-1~deb12u1', events, cmp)).toBe('1.5-1');
  });
  it('several introduced/fixed pairs (a regression), and last_affected', () => {
    const events = [{ introduced: '1.0' }, { fixed: '1.2' }, { introduced: '2.0' }, { fixed: '2.1' }];
    expect(['0.9', '1.0', '1.1', '1.2', '1.9', '2.0', '2.0.5', '2.1'].map((v) => inRange(v, events, cmp))).toEqual([
      false,
      '1.2',
      '1.2',
      false,
      false,
      '2.1',
      '2.1',
      false,
    ]);
    const last = [{ introduced: '0' }, { last_affected: '3.0' }];
    expect([inRange('3.0', last, cmp), inRange('3.0.1', last, cmp)]).toEqual([null, false]);
    expect(inRange('5.0', [{ introduced: '0' }], cmp)).toBe(null);
  });

  it('matches a device by name, ordering, release and listed versions; memoised per version', () => {
    const index = new MatchIndex();
    index.add('DSA-1', ['CVE-1', 'CVE-2'], 'Debian:12', 'openssl', [[{ introduced: '0' }, { fixed: '3.0.13-1~deb12u1' }]], []);
    index.add('ALSA-1', ['CVE-3'], 'Alpine:v3.18', 'openssl', [[{ introduced: '0' }, { fixed: '3.1.4-r1' }]], []);
    index.add('UBUNTU-1', ['CVE-4'], 'Ubuntu:22.04:LTS', 'curl', [], ['7.81.0-1ubuntu1.15']);
    const deb = index.matchDevice({ deviceId: 'a', osId: 'debian', osVersion: '12' }, [
      { name: 'openssl', version: '3.0.11-1~deb12u2', pkg_manager: 'dpkg' },
      { name: 'curl', version: '7.81.0-1ubuntu1.15', pkg_manager: 'dpkg' },
    ]);
    expect(deb.map((m) => [m.cve_id, m.fixed_version])).toEqual([
      ['CVE-1', '3.0.13-1~deb12u1'],
      ['CVE-2', '3.0.13-1~deb12u1'],
    ]);
    const alpine = index.matchDevice({ deviceId: 'b', osId: 'alpine', osVersion: '3.18.4' }, [{ name: 'openssl', version: '3.1.4-r0', pkg_manager: 'apk' }]);
    expect(alpine.map((m) => m.cve_id)).toEqual(['CVE-3']);
    const ubuntu = index.matchDevice({ deviceId: 'c', osId: 'ubuntu', osVersion: '22.04' }, [
      { name: 'curl', version: '7.81.0-1ubuntu1.15', pkg_manager: 'dpkg' },
    ]);
    expect(ubuntu).toMatchObject([{ cve_id: 'CVE-4', fixed_version: null }]);
    // An unknown OS: any Debian or Ubuntu advisory of a dpkg package applies.
    expect(index.matchDevice({ deviceId: 'd' }, [{ name: 'openssl', version: '3.0.11-1~deb12u2', pkg_manager: 'dpkg' }])).toHaveLength(2);
    // opkg uses dpkg's ordering; an unknown package manager matches nothing.
    expect(index.matchDevice({ deviceId: 'e' }, [{ name: 'openssl', version: '1.0', pkg_manager: 'pacman' }])).toEqual([]);
  });
});

describe('OSV advisories', () => {
  it('lists an advisory by its CVE aliases, scores it from the CVSS vector, else its severity word', () => {
    const r = parseAdvisory({
      id: 'DSA-5678-1',
      aliases: ['CVE-2024-1001', 'GHSA-x', 'CVE-24-1'],
      upstream: ['CVE-2024-1002'],
      severity: [{ type: 'CVSS_V3', score: 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H' }],
      affected: [{ package: { ecosystem: 'Debian:12', name: 'x' }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }] }] }],
    });
    expect(r).toMatchObject({ ok: true, advisory: { cveIds: ['CVE-2024-1001', 'CVE-2024-1002'], score: 9.8, severity: 'critical' } });
    const word = parseAdvisory({
      id: 'ALPINE-1',
      database_specific: { severity: 'Moderate' },
      affected: [{ package: { ecosystem: 'Alpine:v3.19', name: 'x' }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }] }] }],
    });
    expect(word).toMatchObject({ ok: true, advisory: { cveIds: ['ALPINE-1'], score: null, severity: 'medium' } });
  });

  it('skips withdrawn advisories and those about no OS package; refuses malformed ones naming the field', () => {
    expect(parseAdvisory({ id: 'A', withdrawn: '2024-01-01', affected: [] })).toEqual({ ok: true, advisory: undefined });
    expect(parseAdvisory({ id: 'A', affected: [{ package: { ecosystem: 'npm', name: 'x' }, versions: ['1'] }] })).toEqual({ ok: true, advisory: undefined });
    const bad = parseAdvisory({ id: 'A', affected: [{ package: { ecosystem: 'Debian:12', name: 7 } }] });
    expect(bad.ok).toBe(false);
    expect(!bad.ok && bad.error).toContain('affected.0.package.name');
    expect(parseDocument('[1]')).toMatchObject({ ok: false });
    expect(parseDocument('nope')).toMatchObject({ ok: false });
    expect(parseDocument('[]')).toEqual({ ok: true, advisories: [], skipped: 0 });
  });
});
