/**
 * End to end: a real agent process reports this machine's packages (its real dpkg database) and
 * OS; an OSV feed imported through the API then names the machine in the CVE calls — by package
 * name and by source package (libc6 from glibc) — with the installed and the fixed versions.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let agent: TestAgent | undefined;
let id: string;

const get = (path: string) => t.api('GET', `/api/v2${path}`, { token: t.adminToken });
const query = (format: string, pkg: string) => execFileSync('dpkg-query', ['-W', '-f', format, pkg], { encoding: 'utf8' });

/** This machine's OSV ecosystem, from /etc/os-release (Debian:12, Ubuntu:22.04:LTS). */
function ecosystem(): string {
  const release = Object.fromEntries(
    fs
      .readFileSync('/etc/os-release', 'utf8')
      .split('\n')
      .map((l) => /^([A-Z_]+)="?([^"]*)"?$/.exec(l))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => [m[1], m[2]]),
  );
  return release.ID === 'ubuntu' ? `Ubuntu:${release.VERSION_ID}:LTS` : `Debian:${release.VERSION_ID}`;
}

beforeAll(async () => {
  t = await startTestBroker();
  await t.addGroup({ id: 'site' });
  const created = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { group_id: 'site', auto_accept: true } });
  expect(created.status).toBe(200);
  agent = startAgent({ broker: t.url, bootstrapKey: Object.keys(created.body)[0] });
  id = await agent.waitConnected(t, 60_000);
  await eventually(
    async () => ((await get(`/inventoryreport/${id}?item_type=software&items_per_page=1`)).status === 200 ? true : undefined),
    60_000,
    'the software inventory',
  );
});
afterAll(async () => {
  await agent?.close();
  await t?.close();
});

describe('CVE findings from a real agent’s packages', () => {
  it('names the machine for an advisory of one of its packages and of the source package of another', async () => {
    const dpkg = query('${Version}', 'dpkg');
    const libc = query('${Version}', 'libc6');
    const libcSource = query('${source:Package}', 'libc6');
    expect(libcSource).not.toBe('libc6');
    const eco = ecosystem();
    const feed = [
      {
        id: 'DSA-9900-1',
        aliases: ['CVE-2099-9900'],
        summary: 'dpkg: a flaw',
        affected: [{ package: { ecosystem: eco, name: 'dpkg' }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed: `${dpkg}+fix1` }] }] }],
      },
      {
        id: 'DSA-9901-1',
        aliases: ['CVE-2099-9901'],
        summary: `${libcSource}: a flaw`,
        affected: [
          { package: { ecosystem: eco, name: libcSource }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed: `${libc}+fix1` }] }] },
        ],
      },
    ];
    const form = new FormData();
    form.append('file', new Blob([JSON.stringify(feed)]), 'feed.json');
    const imported = await t.api('POST', '/api/v2/cve/import', { token: t.adminToken, body: form });
    expect(imported.status, JSON.stringify(imported.body)).toBe(200);
    expect(imported.body).toMatchObject({ advisories: 2, devices_affected: 1 });
    const one = await get('/cve/CVE-2099-9900');
    expect(one.body.devices).toContainEqual(expect.objectContaining({ device_id: id, package: 'dpkg', version: dpkg, fixed_version: `${dpkg}+fix1` }));
    const bySource = await get('/cve/CVE-2099-9901');
    expect(bySource.body.devices).toContainEqual(expect.objectContaining({ device_id: id, package: 'libc6', version: libc }));
    const mine = await get(`/cvelist?device_id=${id}`);
    expect(mine.body.items.map((c: { cve_id: string }) => c.cve_id).sort()).toEqual(['CVE-2099-9900', 'CVE-2099-9901']);
  });
});
