import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectInventory } from '../../agent/inventory.js';
import { collectSoftware } from '../../agent/inventory-items.js';
import { parseDocument } from '../../broker/cve/osv.js';
import { CveService } from '../../broker/cve/service.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

/**
 * CVE findings against a real package inventory: this machine's own dpkg database, read by the
 * agent's collector and stored through the inventory service (as an agent's report is), matched
 * against a small OSV feed the test writes — plus an rpm device with a Rocky Linux advisory.
 */

let t: TestBroker;
let real: string; // in lab (tag x): this machine's packages and OS
let rocky: string; // in other: an rpm device
let tagReader: string; // cve:read + device:read tag:x
let cveOnly: string; // cve:read alone: no device (device:read says which)
let cveEverywhere: string; // cve:read with device:read on every device
let noCve: string; // device:read only
let bash: string; // the installed bash version here
let dpkgVersion: string;
let ecosystem: string; // this machine's OSV ecosystem, e.g. Debian:12
let otherRelease: string; // the same distribution, another release

const digest = (data: unknown) => crypto.createHash('sha256').update(JSON.stringify(data)).digest('hex');
const item = (type: string, data: unknown) => ({ type, digest: digest(data), data });
const get = (p: string, token = t.adminToken) => t.api('GET', `/api/v2${p}`, { token });

const osv = (id: string, o: { aliases?: string[]; affected: unknown[]; severity?: unknown[]; database_specific?: unknown; summary?: string }) => ({
  schema_version: '1.6.0',
  id,
  modified: '2024-07-01T00:00:00Z',
  published: '2024-07-01T00:00:00Z',
  summary: o.summary ?? `${id} summary`,
  ...o,
});
const pkg = (eco: string, name: string, events: unknown[], extra: object = {}) => ({
  package: { ecosystem: eco, name },
  ranges: [{ type: 'ECOSYSTEM', events }],
  ...extra,
});

function feed() {
  return [
    // Affects this machine's bash: fixed in a later version.
    osv('DSA-9001-1', {
      aliases: ['CVE-2099-0001'],
      severity: [{ type: 'CVSS_V3', score: 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H' }],
      affected: [pkg(ecosystem, 'bash', [{ introduced: '0' }, { fixed: `${bash}+fix1` }])],
    }),
    // Fixed long ago: not affected.
    osv('DSA-9002-1', { aliases: ['CVE-2099-0002'], affected: [pkg(ecosystem, 'dpkg', [{ introduced: '0' }, { fixed: '0.1' }])] }),
    // last_affected is the installed version: affected, no fix known; severity from the word.
    osv('CVE-2099-0003', {
      database_specific: { severity: 'low' },
      affected: [pkg(ecosystem, 'dpkg', [{ introduced: '0' }, { last_affected: dpkgVersion }])],
    }),
    // Another release of the distribution, and Alpine: not this machine.
    osv('DSA-9004-1', { aliases: ['CVE-2099-0004'], affected: [pkg(otherRelease, 'bash', [{ introduced: '0' }])] }),
    osv('ALPINE-CVE-2099-0005', { aliases: ['CVE-2099-0005'], affected: [pkg('Alpine:v3.18', 'bash', [{ introduced: '0' }, { fixed: '99.0-r0' }])] }),
    // Rocky Linux 9: the rpm device's openssl, ordered by rpm's rules.
    osv('RLSA-2099:0006', {
      aliases: ['CVE-2099-0006', 'CVE-2099-0007'],
      severity: [{ type: 'CVSS_V3', score: 'CVSS:3.1/AV:N/AC:H/PR:N/UI:N/S:U/C:H/I:N/A:N' }],
      affected: [pkg('Rocky Linux:9', 'openssl', [{ introduced: '0' }, { fixed: '1:3.0.7-27.el9' }])],
    }),
    // Not an OS package: skipped.
    osv('GHSA-xxxx-yyyy-zzzz', { aliases: ['CVE-2099-0008'], affected: [pkg('PyPI', 'requests', [{ introduced: '0' }])] }),
  ];
}

function form(content: string, name = 'feed.json'): FormData {
  const f = new FormData();
  f.append('file', new Blob([content]), name);
  return f;
}
const importFeed = (content: string, token = t.adminToken) => t.api('POST', '/api/v2/cve/import', { token, body: form(content) });

beforeAll(async () => {
  t = await startTestBroker({ env: { FILE_MAX_BYTES: String(512 * 1024) } });
  await t.addGroup({ id: 'lab', tags: ['x'] });
  await t.addGroup({ id: 'other' });
  real = await t.addDevice({ parent: 'lab', name: 'this-machine' });
  rocky = await t.addDevice({ parent: 'other', name: 'rocky-one' });
  const inventory = t.broker.services.inventory;
  const system = await collectInventory('test', Date.now());
  await inventory.record(real, system as unknown as Record<string, unknown>);
  const software = await collectSoftware();
  expect(software?.pkg_manager, 'the test machine has a dpkg database').toBe('dpkg');
  await inventory.recordItem(real, item('software', software));
  bash = software!.items.find((p) => p.name === 'bash')!.version;
  dpkgVersion = software!.items.find((p) => p.name === 'dpkg')!.version;
  const id = String(system.os.id);
  const version = String(system.os.version);
  expect(['debian', 'ubuntu']).toContain(id);
  ecosystem = id === 'debian' ? `Debian:${version}` : `Ubuntu:${version}:LTS`;
  otherRelease = id === 'debian' ? `Debian:${Number(version) - 1}` : 'Ubuntu:14.04:LTS';
  await inventory.record(rocky, { hostname: 'rocky-one', os: { name: 'Rocky Linux', id: 'rocky', version: '9.3' }, arch: 'x86_64' });
  await inventory.recordItem(
    rocky,
    item('software', {
      pkg_manager: 'rpm',
      items: [
        { name: 'openssl', version: '1:3.0.7-24.el9', arch: 'x86_64' },
        { name: 'bash', version: '5.1.8-6.el9', arch: 'x86_64' },
      ],
    }),
  );
  tagReader = (await t.userWith([{ permission: 'cve:read' }, { permission: 'device:read', resources: ['tag:x'] }])).token;
  cveOnly = (await t.userWith([{ permission: 'cve:read' }])).token;
  cveEverywhere = (await t.userWith([{ permission: 'cve:read' }, { permission: 'device:read' }])).token;
  noCve = (await t.userWith([{ permission: 'device:read' }])).token;
});
afterAll(async () => {
  await t?.close();
});

describe('CVE feed import and matching', () => {
  it('says no feed is imported before the first import (to cve:read holders only), and its age after', async () => {
    const before = await get('/cvefeed', cveOnly);
    expect(before.status).toBe(200);
    expect(before.body).toEqual({ imported: false, advisories: 0, imported_at: null, feed_date: null });
    expect((await get('/cvefeed', noCve)).status).toBe(403);
    expect((await t.api('GET', '/api/v2/cvefeed')).status).toBe(401);
  });

  it('imports an OSV feed and lists the CVEs that affect devices, by CVE id', async () => {
    const startedAt = new Date().toISOString();
    const r = await importFeed(JSON.stringify(feed()));
    const state = await get('/cvefeed', cveOnly);
    expect(state.body).toMatchObject({ imported: true, advisories: 6, feed_date: '2024-07-01T00:00:00Z' });
    expect(state.body.imported_at >= startedAt).toBe(true);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ files: 1, advisories: 6, skipped: 1, errors: [], devices_affected: 2 });
    const list = await get('/cvelist');
    expect(list.status).toBe(200);
    const ids = list.body.items.map((c: { cve_id: string }) => c.cve_id);
    expect(ids.sort()).toEqual(['CVE-2099-0001', 'CVE-2099-0003', 'CVE-2099-0006', 'CVE-2099-0007']);
    const first = list.body.items.find((c: { cve_id: string }) => c.cve_id === 'CVE-2099-0001');
    expect(first).toMatchObject({ score: 9.8, severity: 'critical', hosts: 1, packages: ['bash'], advisories: ['DSA-9001-1'], status: 'open' });
    expect(list.body.items.find((c: { cve_id: string }) => c.cve_id === 'CVE-2099-0003')).toMatchObject({
      score: null,
      severity: 'low',
      packages: expect.arrayContaining(['dpkg']),
    });
    expect(list.body.items.find((c: { cve_id: string }) => c.cve_id === 'CVE-2099-0006')).toMatchObject({ score: 5.9, severity: 'medium', hosts: 1 });
    // Sorted by score, highest first, by default; the whole feed on request.
    expect(list.body.items[0].cve_id).toBe('CVE-2099-0001');
    const all = await get('/cvelist?include_unaffected=true&sort_field=cve_id');
    expect(all.body.items.map((c: { cve_id: string }) => c.cve_id)).toEqual([
      'CVE-2099-0001',
      'CVE-2099-0002',
      'CVE-2099-0003',
      'CVE-2099-0004',
      'CVE-2099-0005',
      'CVE-2099-0006',
      'CVE-2099-0007',
    ]);
  });

  it('names the devices, the installed and the fixed version', async () => {
    const r = await get('/cve/CVE-2099-0001');
    expect(r.status).toBe(200);
    expect(r.body.devices).toEqual([
      { device_id: real, node_id: real, title: 'this-machine', package: 'bash', version: bash, fixed_version: `${bash}+fix1`, advisory_id: 'DSA-9001-1' },
    ]);
    const rpm = await get('/cve/CVE-2099-0007');
    expect(rpm.body.devices).toMatchObject([{ device_id: rocky, package: 'openssl', version: '1:3.0.7-24.el9', fixed_version: '1:3.0.7-27.el9' }]);
    const noFix = await get('/cve/CVE-2099-0003');
    // dpkg's advisory also names the binaries built from it that are installed here (libdpkg-perl, dpkg-dev, …).
    expect(noFix.body.devices).toContainEqual(expect.objectContaining({ device_id: real, package: 'dpkg', version: dpkgVersion, fixed_version: null }));
    expect(noFix.body.hosts).toBe(1);
    expect((await get('/cve/CVE-2000-0000')).status).toBe(404);
    expect((await get('/cve/..%2F..')).status).toBe(400);
  });

  it('filters the list by device, severity, search; paginates', async () => {
    const mine = await get(`/cvelist?device_id=${real}`);
    expect(mine.body.items.map((c: { cve_id: string }) => c.cve_id).sort()).toEqual(['CVE-2099-0001', 'CVE-2099-0003']);
    const high = await get('/cvelist?severity=critical,high');
    expect(high.body.items.map((c: { cve_id: string }) => c.cve_id)).toEqual(['CVE-2099-0001']);
    expect((await get('/cvelist?search=openssl')).body.total).toBe(2);
    const page = await get('/cvelist?items_per_page=1&offset=1');
    expect(page.body).toMatchObject({ total: 4 });
    expect(page.body.items).toHaveLength(1);
    expect((await get('/cvelist?severity=bogus')).status).toBe(400);
    expect((await get('/cvelist?unknown=1')).status).toBe(400);
  });

  it('counts by severity and the largest host count', async () => {
    expect((await get('/cvescorestats')).body).toEqual({ critical: 1, high: 0, medium: 2, low: 1, none: 0, unknown: 0, total: 4, accepted: 0, ignored: 0 });
    expect((await get('/cve_hosts_max_count')).body).toMatchObject({ count: 1 });
  });

  it('re-matches a device when its packages change', async () => {
    const inventory = t.broker.services.inventory;
    const fixed = { pkg_manager: 'rpm', items: [{ name: 'openssl', version: '1:3.0.7-27.el9_4', arch: 'x86_64' }] };
    await inventory.recordItem(rocky, item('software', fixed));
    expect((await get('/cve/CVE-2099-0006')).body.devices).toEqual([]);
    const vulnerable = { pkg_manager: 'rpm', items: [{ name: 'openssl', version: '1:3.0.7-24.el9', arch: 'x86_64' }] };
    await inventory.recordItem(rocky, item('software', vulnerable));
    expect((await get('/cve/CVE-2099-0006')).body.hosts).toBe(1);
  });
});

describe('who sees what', () => {
  it('a user whose device:read reaches some devices sees only those in host lists and counts', async () => {
    const list = await get('/cvelist', tagReader);
    expect(list.status).toBe(200);
    expect(list.body.items.map((c: { cve_id: string }) => c.cve_id).sort()).toEqual(['CVE-2099-0001', 'CVE-2099-0003']);
    const rpm = await get('/cve/CVE-2099-0006', tagReader);
    expect(rpm.status).toBe(200);
    expect(rpm.body).toMatchObject({ hosts: 0, devices: [] });
    expect((await get('/cvescorestats', tagReader)).body).toMatchObject({ critical: 1, medium: 0, low: 1, total: 2 });
    expect((await get(`/cvelist?device_id=${rocky}`, tagReader)).status).toBe(403);
    // cve:read with device:read on every device reaches every device; alone it reaches none (taking
    // device:read away never widens what cve:read reaches).
    expect((await get('/cvelist', cveEverywhere)).body.total).toBe(4);
    expect((await get('/cvelist', cveOnly)).body.total).toBe(0);
  });

  it('refuses callers without cve:read, and cve:read callers the manage calls', async () => {
    expect((await get('/cvelist', noCve)).status).toBe(403);
    expect((await get('/cve/CVE-2099-0001', noCve)).status).toBe(403);
    expect((await t.api('PATCH', '/api/v2/cve/CVE-2099-0001', { token: cveOnly, body: { status: 'ignored', reason: 'x' } })).status).toBe(403);
    expect((await t.api('DELETE', '/api/v2/cve/CVE-2099-0001', { token: cveOnly })).status).toBe(403);
    expect((await get('/cve/status/cves', cveOnly)).status).toBe(403);
    expect((await importFeed('[]', cveOnly)).status).toBe(403);
  });
});

describe('decisions', () => {
  const auditEvents = async (event: string) =>
    (await t.broker.services.store.db.selectFrom('audit').select(['event', 'options']).where('event', '=', event).where('result', '=', 'ok').execute()).map(
      (r) => JSON.parse(r.options),
    );

  it('accepts and ignores with a reason, audited, listed with the reasons', async () => {
    const patch = (id: string, body: unknown) => t.api('PATCH', `/api/v2/cve/${id}`, { token: t.adminToken, body });
    const noReason = await patch('CVE-2099-0003', { status: 'ignored' });
    expect(noReason.status).toBe(400);
    expect(noReason.body.details?.field ?? noReason.body.field).toBe('reason');
    expect((await patch('CVE-2099-0003', { status: 'bogus', reason: 'x' })).status).toBe(400);
    expect((await patch('CVE-2000-0000', { status: 'ignored', reason: 'x' })).status).toBe(404);
    expect((await patch('CVE-2099-0003', { status: 'ignored', reason: 'x'.repeat(2001) })).status).toBe(400);
    expect((await patch('CVE-2099-0003', { status: 'ignored', reason: 'a\u0000b' })).status).toBe(400);
    expect((await patch(`CVE-${'9'.repeat(200)}`, { status: 'ignored', reason: 'x' })).status).toBe(400);
    expect((await get('/cve/status/cves')).body.total).toBe(0);
    const ignored = await patch('CVE-2099-0003', { status: 'ignored', reason: 'dpkg is not reachable remotely' });
    expect(ignored.status).toBe(200);
    expect(ignored.body).toMatchObject({ cve_id: 'CVE-2099-0003', status: 'ignored', reason: 'dpkg is not reachable remotely' });
    expect((await patch('CVE-2099-0001', { status: 'accepted', reason: 'update scheduled' })).status).toBe(200);
    const listed = await get('/cve/status/cves');
    expect(listed.body.total).toBe(2);
    expect(listed.body.items.map((s: { cve_id: string; status: string }) => [s.cve_id, s.status]).sort()).toEqual([
      ['CVE-2099-0001', 'accepted'],
      ['CVE-2099-0003', 'ignored'],
    ]);
    expect((await get('/cve/status/cves?status=ignored')).body.items[0]).toMatchObject({ reason: 'dpkg is not reachable remotely', severity: 'low' });
    expect((await get('/cvelist?status=ignored')).body.items.map((c: { cve_id: string }) => c.cve_id)).toEqual(['CVE-2099-0003']);
    expect((await get('/cvescorestats')).body).toMatchObject({ low: 0, ignored: 1, accepted: 1, total: 3 });
    const audit = await auditEvents('cve.status');
    expect(JSON.stringify(audit)).toContain('dpkg is not reachable remotely');
    // Withdrawn.
    expect((await patch('CVE-2099-0001', { status: 'open' })).body).toMatchObject({ status: 'open', reason: '' });
    expect((await get('/cve/status/cves')).body.total).toBe(1);
  });

  it('removes a CVE from the feed, audited; other CVEs of the same advisory stay', async () => {
    const del = await t.api('DELETE', '/api/v2/cve/CVE-2099-0006', { token: t.adminToken });
    expect(del.status).toBe(204);
    expect((await get('/cve/CVE-2099-0006')).status).toBe(404);
    expect((await get('/cve/CVE-2099-0007')).body.hosts).toBe(1);
    expect((await t.api('DELETE', '/api/v2/cve/CVE-2099-0006', { token: t.adminToken })).status).toBe(404);
    expect(await auditEvents('cve.delete')).toHaveLength(1);
  });
});

describe('hostile and malformed feeds', () => {
  const snapshot = async () => (await get('/cvelist?include_unaffected=true')).body;

  it('refuses a file that is not JSON, or holds a malformed advisory, changing nothing', async () => {
    const before = await snapshot();
    const notJson = await importFeed('{"id": ');
    expect(notJson.status).toBe(400);
    expect(notJson.body.error).toBe('invalid_feed');
    const badId = await importFeed(JSON.stringify([feed()[0], { id: '../../etc', affected: [] }]));
    expect(badId.status).toBe(400);
    expect(badId.body.message).toContain('[1]');
    const badRanges = await importFeed(JSON.stringify({ id: 'DSA-1-1', affected: [{ package: { ecosystem: 'Debian:12', name: 'x' }, ranges: 'all' }] }));
    expect(badRanges.status).toBe(400);
    const noFile = await t.api('POST', '/api/v2/cve/import', { token: t.adminToken, body: new FormData() });
    expect(noFile.status).toBe(400);
    expect(await snapshot()).toEqual(before);
    // Only the first import succeeded; the refused ones are audited as errors.
    const imports = await t.broker.services.store.db.selectFrom('audit').select('result').where('event', '=', 'cve.import').execute();
    expect(imports.filter((r) => r.result === 'ok')).toHaveLength(1);
  });

  it('refuses an upload over the size bound with 413', async () => {
    const big = JSON.stringify([{ id: 'X-1', summary: 'x'.repeat(600 * 1024) }]);
    const r = await importFeed(big);
    expect(r.status).toBe(413);
  });

  it('imports a folder of .json files (the CLI path), reporting the files it refuses', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osv-'));
    fs.mkdirSync(path.join(dir, 'sub'));
    fs.writeFileSync(
      path.join(dir, 'a.json'),
      JSON.stringify(osv('DSA-9100-1', { aliases: ['CVE-2099-0100'], affected: [pkg(ecosystem, 'bash', [{ introduced: '0' }])] })),
    );
    fs.writeFileSync(
      path.join(dir, 'sub', 'b.json'),
      JSON.stringify(osv('DSA-9101-1', { aliases: ['CVE-2099-0101'], affected: [pkg(ecosystem, 'dpkg', [{ introduced: '0' }])] })),
    );
    fs.writeFileSync(path.join(dir, 'broken.json'), 'nope');
    fs.writeFileSync(path.join(dir, 'readme.txt'), 'not read');
    const files = CveService.readPath(dir);
    expect(files.map((f) => f.name).sort()).toEqual(['a.json', 'broken.json', path.join('sub', 'b.json')]);
    const parsed = CveService.readFiles(files);
    expect(parsed.errors).toMatchObject([{ file: 'broken.json' }]);
    const done = await t.broker.services.cve.importAdvisories(parsed.advisories);
    expect(done).toMatchObject({ advisories: 2, cves: 2 });
    expect((await get('/cve/CVE-2099-0100')).body.hosts).toBe(1);
    expect((await get('/cve/CVE-2099-0001')).body.hosts).toBe(1);
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('`npm start -- cve-import <folder>` imports into the database a running broker uses, which then matches with it', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'osv-cli-'));
    fs.writeFileSync(
      path.join(dir, 'c.json'),
      JSON.stringify(osv('DSA-9200-1', { aliases: ['CVE-2099-0200'], affected: [pkg(ecosystem, 'bash', [{ introduced: '0' }])] })),
    );
    fs.writeFileSync(path.join(dir, 'bad.json'), '{"id": 5}');
    const config = t.broker.services.config;
    const run = spawnSync(process.execPath, [path.resolve('node_modules/tsx/dist/cli.mjs'), 'broker/main.ts', 'cve-import', dir], {
      env: { PATH: process.env.PATH, DATA_DIR: config.dataDir, DATABASE_URL: config.databaseUrl, DATABASE_SCHEMA: config.databaseSchema, LOG_LEVEL: 'silent' },
      encoding: 'utf8',
    });
    fs.rmSync(dir, { recursive: true, force: true });
    // One file refused: named, and the exit code says so; the other imported.
    expect(run.stderr).toContain('bad.json');
    expect(run.status).toBe(1);
    expect(run.stdout).toContain('Imported 1 advisories');
    expect((await get('/cve/CVE-2099-0200')).body.devices).toMatchObject([{ device_id: real, package: 'bash', fixed_version: null }]);
    // The broker's own re-match of the device (its packages arrive again) uses the feed as it is now.
    const software = await collectSoftware();
    await t.broker.services.inventory.recordItem(real, item('software', software));
    expect((await get('/cve/CVE-2099-0200')).body.hosts).toBe(1);
    const audit = await t.broker.services.store.db
      .selectFrom('audit')
      .select('action')
      .where('event', '=', 'cve.import')
      .where('action', '=', 'cve-import')
      .execute();
    expect(audit).toHaveLength(1);
  });
});

describe('source packages', () => {
  it('matches an installed package by its source package, which Debian advisories name (libc6 from glibc)', async () => {
    const software = await collectSoftware();
    const binary = software!.items.find((p) => p.source && !software!.items.some((q) => q.name === p.source));
    expect(binary, 'this machine has a package named otherwise than its source').toBeDefined();
    const r = parseDocument(
      JSON.stringify(
        osv('DSA-9300-1', {
          aliases: ['CVE-2099-0300'],
          affected: [pkg(ecosystem, binary!.source!, [{ introduced: '0' }, { fixed: `${binary!.version}+fix` }])],
        }),
      ),
    );
    if (!r.ok) throw new Error(r.error);
    await t.broker.services.cve.importAdvisories(r.advisories);
    const found = await get('/cve/CVE-2099-0300');
    expect(found.body.devices).toContainEqual(expect.objectContaining({ device_id: real, package: binary!.name, version: binary!.version }));
  });
});
