/**
 * End to end: a real agent process reports this machine's typed inventory (its real dpkg packages,
 * users, listening ports, processes), the broker serves it through /inventoryreport, the summary
 * and fleet search, and a later collection with nothing changed sends none of the unchanged types.
 */
import { execFileSync } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let agent: TestAgent | undefined;
let id: string;

/** The packages dpkg-query lists as installed on this machine: "name version arch". */
function installedPackages(): string[] {
  return execFileSync('dpkg-query', ['-W', '-f', '${db:Status-Status} ${Package} ${Version} ${Architecture}\\n'], { encoding: 'utf8' })
    .split('\n')
    .filter((l) => l.startsWith('installed '))
    .map((l) => l.split(' ').slice(1).join(' '))
    .sort();
}

beforeAll(async () => {
  t = await startTestBroker();
  await t.addGroup({ id: 'site', tags: ['site'] });
  const created = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { group_id: 'site', auto_accept: true } });
  expect(created.status).toBe(200);
  agent = startAgent({ broker: t.url, bootstrapKey: Object.keys(created.body)[0], args: ['--inventory-interval-ms', '1000'] });
  id = await agent.waitConnected(t, 60_000);
});
afterAll(async () => {
  await agent?.close();
  await t?.close();
});

const get = (path: string) => t.api('GET', `/api/v2${path}`, { token: t.adminToken });

describe('typed inventory from a real agent', () => {
  it('shows the machine’s real dpkg packages through /inventoryreport', async () => {
    const first = await eventually(
      async () => {
        const r = await get(`/inventoryreport/${id}?item_type=software&items_per_page=1000`);
        return r.status === 200 ? r.body : undefined;
      },
      60_000,
      'the software inventory',
    );
    const expected = installedPackages();
    expect(first.pkg_manager).toBe('dpkg');
    expect(first.total).toBe(expected.length);
    const all: string[] = [];
    for (let offset = 0; offset < first.total; offset += 1000) {
      const page = await get(`/inventoryreport/${id}?item_type=software&items_per_page=1000&offset=${offset}`);
      all.push(...page.body.items.map((p: { name: string; version: string; arch: string }) => `${p.name} ${p.version} ${p.arch}`));
    }
    expect(all.sort()).toEqual(expected);
    const dpkgVersion = execFileSync('dpkg-query', ['-W', '-f', '${Version}', 'dpkg'], { encoding: 'utf8' });
    const dpkg = await get(`/inventoryreport/${id}?item_type=software&search=dpkg`);
    expect(dpkg.body.items).toContainEqual(expect.objectContaining({ name: 'dpkg', version: dpkgVersion }));
  });

  it('shows users, groups, listening ports and its own process', async () => {
    const users = await eventually(async () => {
      const r = await get(`/inventoryreport/${id}?item_type=users&search=root`);
      return r.status === 200 ? r.body : undefined;
    });
    expect(users.items).toContainEqual(expect.objectContaining({ user: 'root', uid: 0, home: '/root' }));
    expect((await get(`/inventoryreport/${id}?item_type=groups&search=root`)).body.items).toContainEqual(expect.objectContaining({ group: 'root', gid: 0 }));
    expect((await get(`/inventoryreport/${id}?item_type=ports`)).status).toBe(200);
    const processes = (await get(`/inventoryreport/${id}?item_type=processes&items_per_page=1000`)).body;
    // The top by CPU and by memory of a shared machine: which ones is not known in advance, their shape is.
    expect(processes.total).toBeGreaterThan(0);
    expect(processes.total).toBeLessThanOrEqual(100);
    // The system report names the types found, so the broker can forget the ones that go away.
    const system = (await get(`/inventory/${id}`)).body;
    expect(system.inventory_types).toEqual(expect.arrayContaining(['software', 'users', 'groups', 'ports', 'processes']));
    for (const p of processes.items)
      expect(p).toEqual({ pid: expect.any(Number), user: expect.any(String), cpu: expect.any(Number), mem: expect.any(Number), cmdline: expect.any(String) });
  });

  it('answers the fleet questions: which version runs where, and which devices run dpkg >= 1.0', async () => {
    const summary = await get('/inventorysummarybytype/site?item_type=software&search=dpkg');
    expect(summary.body.items).toContainEqual(expect.objectContaining({ name: 'dpkg', devices: 1 }));
    const found = await get(`/inventory?search=${encodeURIComponent(JSON.stringify({ package: 'dpkg', package_version: '>=1.0' }))}`);
    expect(found.body.items.map((i: { device_id: string }) => i.device_id)).toEqual([id]);
    const none = await get(`/inventory?search=${encodeURIComponent(JSON.stringify({ package: 'dpkg', package_version: '<1.0' }))}`);
    expect(none.body.total).toBe(0);
  });

  it('sends unchanged types once: later collections leave them out', async () => {
    const firstReport = await agent!.waitForLog((l) => l.msg === 'inventory reported' && Array.isArray(l.sent) && (l.sent as string[]).includes('software'));
    const from = agent!.logs.indexOf(firstReport) + 1;
    const receivedAt = async () => (await get(`/inventoryreport/${id}?item_type=software&items_per_page=1`)).body.received_at;
    const before = await receivedAt();
    // Two more collections (1 s apart) after the first.
    const later = await agent!.waitForLog((l) => l.msg === 'inventory reported', 30_000, from);
    await agent!.waitForLog((l) => l.msg === 'inventory reported', 30_000, agent!.logs.indexOf(later) + 1);
    const laterSent = agent!.logs
      .slice(from)
      .filter((l) => l.msg === 'inventory reported')
      .flatMap((l) => l.sent as string[]);
    expect(laterSent).not.toContain('software');
    expect(laterSent).not.toContain('users');
    expect(laterSent).not.toContain('groups');
    expect(await receivedAt()).toBe(before);
  });
});
