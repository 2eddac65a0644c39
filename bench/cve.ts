/**
 * CVE matching: a feed of 10,000 advisories against 2,000 devices × 2,000 installed packages, and
 * 1/10 of that (200 devices, 1,000 advisories, the same 2,000 packages each), printed side by side.
 * `npm run bench -- cve` times the in-memory matching (index built once, each device's packages
 * looked up by name, outcomes memoised per installed version); `npm run bench -- cve db` also
 * times the whole re-match through SQLite (reading the packages, writing the findings) as an import
 * runs it, for the 1/10 fleet (`cve db-full`: for both). `npm run bench -- cve 50k` times the size
 * the issue names instead: a 50,000-advisory feed against 1,000 inventories (2,000 packages each),
 * in memory and (`cve 50k-db`) through SQLite. Timings are printed, never asserted.
 */
import crypto from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { MatchIndex, type InstalledPackage } from '../broker/cve/match.js';
import type { Advisory } from '../broker/cve/osv.js';
import { approvedDeviceRow, startTestBroker } from '../test/support/broker.js';

/** Package names in the fleet's pool; each device has 2,000 of them. */
const POOL = 4000;

function devicePackages(d: number, perDevice: number): InstalledPackage[] {
  const out: InstalledPackage[] = [];
  for (let i = 0; i < perDevice; i++) out.push({ name: `pkg${(d * 7 + i) % POOL}`, version: `1.${(d + i) % 5}-1+deb12u${d % 3}`, pkg_manager: 'dpkg' });
  return out;
}

function advisories(count: number): Advisory[] {
  const out: Advisory[] = [];
  for (let k = 0; k < count; k++)
    out.push({
      id: `DSA-${k}-1`,
      cveIds: [`CVE-2030-${String(10000 + k)}`],
      summary: `synthetic ${k}`,
      score: 7.5,
      severity: 'high',
      published: null,
      modified: null,
      affected: [{ ecosystem: 'Debian:12', name: `pkg${(k * 13) % (POOL * 2)}`, ranges: [[{ introduced: '0' }, { fixed: `1.${k % 6}-1` }]], versions: [] }],
    });
  return out;
}

function inMemory(devices: number, feed: Advisory[], perDevice: number): { ms: number; matches: number } {
  let start = performance.now();
  const index = new MatchIndex();
  for (const a of feed) for (const p of a.affected) index.add(a.id, a.cveIds, p.ecosystem, p.name, p.ranges, p.versions);
  let ms = performance.now() - start;
  let matches = 0;
  for (let d = 0; d < devices; d++) {
    // The packages are made outside the timing (in the broker they come from the database).
    const packages = devicePackages(d, perDevice);
    start = performance.now();
    matches += index.matchDevice({ deviceId: `d${d}`, osId: 'debian', osVersion: '12' }, packages).length;
    ms += performance.now() - start;
  }
  return { ms, matches };
}

async function throughDb(devices: number, feed: Advisory[], perDevice: number, log: (line: string) => void): Promise<void> {
  const t = await startTestBroker({ database: 'sqlite' });
  try {
    const db = t.broker.services.store.db;
    const ids: string[] = [];
    for (let d = 0; d < devices; d++) {
      const id = crypto.createHash('sha256').update(`bench-cve-${d}`).digest('hex');
      ids.push(id);
      await db
        .insertInto('devices')
        .values(approvedDeviceRow(id, `dev-${d}`))
        .execute();
      await db
        .insertInto('inventory')
        .values({ device_id: id, data: JSON.stringify({ os: { id: 'debian', version: '12' } }), updated_at: new Date().toISOString() })
        .execute();
      const rows = devicePackages(d, perDevice).map((p) => ({ device_id: id, name: p.name, version: p.version, arch: 'amd64', pkg_manager: 'dpkg' }));
      for (let i = 0; i < rows.length; i += 500)
        await db
          .insertInto('inventory_packages')
          .values(rows.slice(i, i + 500))
          .execute();
    }
    const start = performance.now();
    const done = await t.broker.services.cve.importAdvisories(feed);
    const importMs = performance.now() - start;
    const one = performance.now();
    await t.broker.services.cve.rematchDevice(ids[0]);
    const oneMs = performance.now() - one;
    // The first call also warms the route and the caller's session up: the second is the one timed.
    await t.api('GET', '/api/v2/cvelist?items_per_page=1', { token: t.adminToken });
    await t.broker.services.cve.rematchDevice(ids[1]);
    const list = performance.now();
    await t.api('GET', '/api/v2/cvelist', { token: t.adminToken });
    const listMs = performance.now() - list;
    log(
      `  sqlite, ${devices} devices × ${perDevice} packages × ${feed.length} advisories: import + full re-match ${importMs.toFixed(0)} ms ` +
        `(${done.matches} findings), one device re-matched ${oneMs.toFixed(1)} ms, GET /cvelist ${listMs.toFixed(0)} ms`,
    );
  } finally {
    await t.close();
  }
}

/** The issue's size: a 50,000-advisory feed against 1,000 inventories. */
const ISSUE_SIZE = { devices: 1000, advisories: 50_000 };

export async function benchCve(log: (line: string) => void, part?: string): Promise<void> {
  const perDevice = 2000;
  if (part === '50k' || part === '50k-db') {
    const feed = advisories(ISSUE_SIZE.advisories);
    const r = inMemory(ISSUE_SIZE.devices, feed, perDevice);
    log(
      `  in memory, ${ISSUE_SIZE.devices} devices × ${perDevice} packages × ${ISSUE_SIZE.advisories} advisories: ${r.ms.toFixed(0)} ms, ${r.matches} findings`,
    );
    if (part === '50k-db') await throughDb(ISSUE_SIZE.devices, feed, perDevice, log);
    return;
  }
  const sizes = [
    { devices: 200, advisories: 1000, label: '1/10' },
    { devices: 2000, advisories: 10000, label: 'full' },
  ];
  const results: number[] = [];
  for (const s of sizes) {
    const feed = advisories(s.advisories);
    const r = inMemory(s.devices, feed, perDevice);
    results.push(r.ms);
    log(`  in memory (${s.label}), ${s.devices} devices × ${perDevice} packages × ${s.advisories} advisories: ${r.ms.toFixed(0)} ms, ${r.matches} findings`);
  }
  log(`  full / (1/10): ${(results[1] / results[0]).toFixed(1)}× the time for 10× the devices and 10× the advisories`);
  // `db`: the 1/10 fleet through SQLite; `db-full`: both sizes (writes 4M package rows first: minutes).
  if (part === 'db' || part === 'db-full')
    for (const s of part === 'db' ? sizes.slice(0, 1) : sizes) await throughDb(s.devices, advisories(s.advisories), perDevice, log);
}
