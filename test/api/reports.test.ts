import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPORT_FUTURE_SKEW_S } from '../../broker/reports/validate.js';
import type { AgentReport } from '../../shared/protocol.js';
import { connectDevice, enrolDevice, eventually, type FakeConnection } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let alpha: string; // in group lab (tag x)
let bravo: string; // untagged, unassigned
let lonely: string; // in group lab, never reports
let tagReader: { token: string; id: string };
let acknowledger: string; // reports:read tag:x + reports:acknowledge
let readerOnly: string; // reports:read *
let markerX: string; // reports:markread tag:x only
let deviceReader: string; // device:read tag:x only

const RATE = 20;
const PER_DEVICE = 50;

const now = () => Math.floor(Date.now() / 1000);
function report(o: Partial<AgentReport> = {}): AgentReport {
  return {
    bundle: 'file_distribution',
    bundle_commit_id: 'b'.repeat(40),
    commit_id: 'c'.repeat(40),
    labels: 'file_distribution',
    sev: 'INFO',
    text: 'File /etc/motd updated',
    log: Buffer.from('wrote 12 bytes').toString('base64'),
    ts: now(),
    ...o,
  };
}

async function list(token: string, query = '') {
  return t.api('GET', `/api/v2/reportlist${query}`, { token });
}

async function count(deviceId: string): Promise<number> {
  const row = await t.broker.services.store.db
    .selectFrom('reports')
    .select((eb) => eb.fn.countAll<string | number>().as('n'))
    .where('device_id', '=', deviceId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

beforeAll(async () => {
  t = await startTestBroker({ env: { REPORT_RATE_PER_DEVICE: String(RATE), REPORT_MAX_PER_DEVICE: String(PER_DEVICE) } });
  await t.addGroup({ id: 'lab', tags: ['x'] });
  alpha = await t.addDevice({ parent: 'lab', name: 'alpha' });
  bravo = await t.addDevice({ name: 'bravo' });
  lonely = await t.addDevice({ parent: 'lab', name: 'lonely' });
  const reports = t.broker.services.reports;
  await reports.record(alpha, [
    report({ sev: 'ERR', text: 'Package nginx failed to install', ts: 1000 }),
    report({ sev: 'WARN', text: 'Disk 91% full', bundle: 'metrics_monitor', labels: 'metrics_monitor', ts: 2000 }),
    report({ sev: 'INFO', text: 'File 100%_done', ts: 3000 }),
  ]);
  await reports.record(bravo, [report({ sev: 'CRIT', text: 'Process sshd not running', bundle: 'proc_watch', ts: 4000 })]);
  tagReader = await t.userWith([{ permission: 'reports:read', resources: ['tag:x'] }]);
  acknowledger = await t.tokenWith([{ permission: 'reports:read', resources: ['tag:x'] }, { permission: 'reports:acknowledge' }]);
  readerOnly = await t.tokenWith([{ permission: 'reports:read' }]);
  markerX = await t.tokenWith([{ permission: 'reports:markread', resources: ['tag:x'] }]);
  deviceReader = await t.tokenWith([{ permission: 'device:read', resources: ['tag:x'] }]);
});
afterAll(async () => {
  await t?.close();
});

describe('GET /reportlist', () => {
  it('lists reports newest first with the device, severity, time, text, commit and read state', async () => {
    const r = await list(t.adminToken);
    expect(r.status).toBe(200);
    expect(r.body.total).toBe(4);
    expect(r.body.items.map((i: { ts: number }) => i.ts)).toEqual([4000, 3000, 2000, 1000]);
    expect(r.body.items[0]).toMatchObject({ node_id: bravo, title: 'bravo', sev: 'CRIT', bundle: 'proc_watch', commit_id: 'c'.repeat(40), read: false });
    expect(Buffer.from(r.body.items[3].log, 'base64').toString()).toBe('wrote 12 bytes');
    expect(r.body.items[0].received).toBeGreaterThan(0);
  });

  it('shows a restricted reader only the devices their reports:read resources match', async () => {
    const r = await list(tagReader.token);
    expect(r.status).toBe(200);
    expect(r.body.total).toBe(3);
    expect(new Set(r.body.items.map((i: { node_id: string }) => i.node_id))).toEqual(new Set([alpha]));
    // Naming a device outside them finds nothing.
    const other = await list(tagReader.token, `?node_id=${bravo}`);
    expect(other.body).toEqual({ items: [], total: 0 });
  });

  it('filters by severity, search (literal % and _), bundle, node, time, and pages and sorts', async () => {
    expect((await list(t.adminToken, '?severity=err,CRIT')).body.total).toBe(2);
    expect((await list(t.adminToken, '?search=DISK')).body.items[0].text).toBe('Disk 91% full');
    expect((await list(t.adminToken, '?search=100%25_')).body.total).toBe(1);
    expect((await list(t.adminToken, '?search=1%25')).body.total).toBe(1);
    expect((await list(t.adminToken, '?bundle=metrics_monitor')).body.total).toBe(1);
    expect((await list(t.adminToken, '?node_id=lab')).body.total).toBe(3);
    expect((await list(t.adminToken, '?from=1500&to=3500')).body.total).toBe(2);
    const page = await list(t.adminToken, '?sort_field=sev&sort_direction=desc&items_per_page=2&offset=1');
    expect(page.body.total).toBe(4);
    expect(page.body.items.map((i: { sev: string }) => i.sev)).toEqual(['ERR', 'WARN']);
  });

  it('refuses an unknown severity, an unknown parameter and a bad page with 400', async () => {
    const sev = await list(t.adminToken, '?severity=INFO,DEBUG');
    expect(sev.status).toBe(400);
    expect(sev.body.error).toBeTruthy();
    expect(JSON.stringify(sev.body)).toContain('DEBUG');
    expect((await list(t.adminToken, '?colour=red')).status).toBe(400);
    expect((await list(t.adminToken, '?items_per_page=5000')).status).toBe(400);
    expect((await list(t.adminToken, '?node_id=../etc')).status).toBe(400);
  });

  it('refuses callers without reports:read', async () => {
    expect((await list(deviceReader)).status).toBe(403);
    expect((await t.api('GET', '/api/v2/reportlist')).status).toBe(401);
  });
});

describe('summaries', () => {
  it('counts a device’s reports by severity, unread per caller', async () => {
    const r = await t.api('GET', `/api/v2/reportsummary/${alpha}`, { token: tagReader.token });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ node_id: alpha, total: 3, unread: 3, severity: { INFO: 1, WARN: 1, ERR: 1, CRIT: 0 }, last_ts: 3000 });
  });

  it('answers 403 for a device outside the reader’s resources, 404 for an unknown one, 400 for a malformed id', async () => {
    expect((await t.api('GET', `/api/v2/reportsummary/${bravo}`, { token: tagReader.token })).status).toBe(403);
    expect((await t.api('GET', `/api/v2/reportsummary/${'f'.repeat(64)}`, { token: t.adminToken })).status).toBe(404);
    expect((await t.api('GET', '/api/v2/reportsummary/nope', { token: t.adminToken })).status).toBe(400);
  });

  it('sums a group under device:read, worst devices first, and only the devices the caller reads', async () => {
    const admin = await t.api('GET', '/api/v2/groupreportssummary/root', { token: t.adminToken });
    expect(admin.status).toBe(200);
    expect(admin.body).toMatchObject({ node_id: 'root', total: 4, severity: { CRIT: 1, ERR: 1 } });
    expect(admin.body.items[0].node_id).toBe(bravo);
    expect(admin.body.devices).toBeGreaterThanOrEqual(3);
    const lab = await t.api('GET', '/api/v2/groupreportssummary/lab', { token: deviceReader });
    expect(lab.status).toBe(200);
    expect(lab.body).toMatchObject({ node_id: 'lab', devices: 2, total: 3 });
    expect(lab.body.items.map((i: { node_id: string }) => i.node_id)).toEqual([alpha]);
    const root = await t.api('GET', '/api/v2/groupreportssummary/root', { token: deviceReader });
    expect(root.body.total).toBe(3);
    expect((await t.api('GET', '/api/v2/groupreportssummary/nowhere', { token: t.adminToken })).status).toBe(404);
    // A group the caller may not see answers like an unknown one.
    await t.addGroup({ id: 'hidden' });
    expect((await t.api('GET', '/api/v2/groupreportssummary/hidden', { token: t.adminToken })).status).toBe(200);
    expect((await t.api('GET', '/api/v2/groupreportssummary/hidden', { token: deviceReader })).status).toBe(404);
    expect((await t.api('GET', `/api/v2/groupreportssummary/${bravo}`, { token: deviceReader })).status).toBe(403);
    expect((await t.api('GET', '/api/v2/groupreportssummary/lab', { token: readerOnly })).status).toBe(403);
    void lonely;
  });
});

describe('PATCH /reportmarkread', () => {
  it('marks the given reports read for the caller only, and unread again', async () => {
    const mine = (await list(acknowledger)).body.items as Array<{ id: number; sev: string }>;
    const err = mine.find((i) => i.sev === 'ERR')!;
    const r = await t.api('PATCH', '/api/v2/reportmarkread', { token: acknowledger, body: { ids: [err.id] } });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ changed: 1 });
    // Again: nothing changes.
    expect((await t.api('PATCH', '/api/v2/reportmarkread', { token: acknowledger, body: { ids: [err.id] } })).body).toEqual({ changed: 0 });
    const after = (await list(acknowledger, '?read=true')).body;
    expect(after.items.map((i: { id: number }) => i.id)).toEqual([err.id]);
    expect((await list(acknowledger, '?read=false')).body.total).toBe(2);
    // Another user still sees it unread.
    expect((await list(t.adminToken, '?read=true')).body.total).toBe(0);
    const summary = await t.api('GET', `/api/v2/reportsummary/${alpha}`, { token: t.adminToken });
    expect(summary.body.unread).toBe(3);
    expect((await t.api('PATCH', '/api/v2/reportmarkread', { token: acknowledger, body: { ids: [err.id], read: false } })).body).toEqual({ changed: 1 });
    expect((await list(acknowledger, '?read=true')).body.total).toBe(0);
  });

  it('changes nothing for reports of devices outside the caller’s reports:read', async () => {
    const bravoReport = (await list(t.adminToken, `?node_id=${bravo}`)).body.items[0].id;
    const r = await t.api('PATCH', '/api/v2/reportmarkread', { token: acknowledger, body: { ids: [bravoReport] } });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ changed: 0 });
    const all = await t.api('PATCH', '/api/v2/reportmarkread', { token: acknowledger, body: { all: true } });
    expect(all.body).toEqual({ changed: 3 });
    const rows = await t.broker.services.store.db.selectFrom('report_reads').select('report_id').where('report_id', '=', bravoReport).execute();
    expect(rows).toEqual([]);
  });

  it('marks every report below a node', async () => {
    const r = await t.api('PATCH', '/api/v2/reportmarkread', { token: t.adminToken, body: { node_id: 'lab' } });
    expect(r.body).toEqual({ changed: 3 });
    expect((await list(t.adminToken, '?read=false')).body.items.map((i: { node_id: string }) => i.node_id)).toEqual([bravo]);
  });

  it('refuses bodies naming none or several selections, unknown fields, too many ids; and callers without reports:acknowledge', async () => {
    for (const body of [
      {},
      { all: true, ids: [1] },
      { all: false },
      { ids: [1], extra: 1 },
      { ids: Array.from({ length: 1001 }, (_, i) => i + 1) },
      { ids: ['1 or 1=1'] },
    ]) {
      const r = await t.api('PATCH', '/api/v2/reportmarkread', { token: t.adminToken, body });
      expect(r.status, JSON.stringify(body).slice(0, 80)).toBe(400);
    }
    expect((await t.api('PATCH', '/api/v2/reportmarkread', { token: readerOnly, body: { all: true } })).status).toBe(403);
    expect((await t.api('PATCH', '/api/v2/reportmarkread', { token: markerX, body: { all: true } })).status).toBe(403);
  });

  it('lets reports:markread mark a device’s reports within its resources only', async () => {
    const ok = await t.api('PATCH', `/api/v2/reportmarkread/${alpha}`, { token: markerX, body: {} });
    expect(ok.status).toBe(200);
    expect(ok.body).toEqual({ changed: 3 });
    const denied = await t.api('PATCH', `/api/v2/reportmarkread/${bravo}`, { token: markerX, body: {} });
    expect(denied.status).toBe(403);
    // An id of another device through this device's call changes nothing.
    const bravoReport = (await list(t.adminToken, `?node_id=${bravo}`)).body.items[0].id;
    expect((await t.api('PATCH', `/api/v2/reportmarkread/${alpha}`, { token: markerX, body: { ids: [bravoReport] } })).body).toEqual({ changed: 0 });
    expect((await t.api('PATCH', `/api/v2/reportmarkread/${alpha}`, { token: acknowledger, body: {} })).status).toBe(403);
  });
});

describe('reports from agents (hub message)', () => {
  let conn: FakeConnection;
  let device: string;

  beforeAll(async () => {
    const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { group_id: 'lab', auto_accept: true } });
    const enrolled = await enrolDevice(t, Object.keys(key.body)[0], undefined, 'charlie');
    device = enrolled.device.id;
    conn = await connectDevice(t.url, enrolled.device);
    await eventually(() => t.broker.services.agents.isConnected(device));
  });
  afterAll(() => conn?.ws.close());

  it('records the agent’s connection as an agent_internal report', async () => {
    const r = await eventually(async () => {
      const got = await list(t.adminToken, `?node_id=${device}&bundle=agent_internal`);
      return got.body.total === 1 ? got : undefined;
    });
    expect(r.body.items[0]).toMatchObject({ sev: 'INFO', title: 'charlie' });
    expect(r.body.items[0].text).toContain('Agent connected');
  });

  it('stores valid reports of a reports message and drops malformed ones', async () => {
    conn.send({
      t: 'reports',
      reports: [
        report({ text: 'watcher ok', sev: 'WARN' }),
        report({ sev: 'DEBUG' as never }),
        { ...report(), text: 42 },
        report({ text: 'nul\u0000byte' }),
        report({ log: 'not base64 !!' }),
        report({ bundle: 'b'.repeat(500) }),
        'not an object',
        report({ text: 'x'.repeat(10_000), sev: 'ERR' }),
      ],
    });
    const stored = await eventually(async () => {
      const got = await list(t.adminToken, `?node_id=${device}&bundle=file_distribution`);
      return got.body.total === 2 ? got : undefined;
    });
    const texts = stored.body.items.map((i: { text: string }) => i.text);
    expect(texts).toContain('watcher ok');
    const long = texts.find((x: string) => x.startsWith('xxx'));
    expect(long.length).toBe(4096);
    expect(long.endsWith('…')).toBe(true);
  });

  it('bounds a device’s report times by the broker clock: a report stamped in the year 5138 does not pin last_ts', async () => {
    const before = (await t.api('GET', `/api/v2/reportsummary/${device}`, { token: t.adminToken })).body.last_ts as number;
    conn.send({ t: 'reports', reports: [report({ text: 'from the far future', ts: 99_999_999_999 }), report({ text: 'slightly ahead', ts: now() + 60 })] });
    const stored = await eventually(async () => {
      const got = await list(t.adminToken, `?node_id=${device}&search=${encodeURIComponent('from the far future')}`);
      return got.body.total === 1 ? got.body.items[0] : undefined;
    });
    const at = now();
    // Kept, at broker time plus the allowed skew at most.
    expect(stored.ts).toBeLessThanOrEqual(at + REPORT_FUTURE_SKEW_S);
    expect(stored.ts).toBeGreaterThan(at - 60);
    // A small skew is kept as the device stamped it.
    const ahead = (await list(t.adminToken, `?node_id=${device}&search=${encodeURIComponent('slightly ahead')}`)).body.items[0];
    expect(ahead.ts).toBeGreaterThan(before);
    const summary = await t.api('GET', `/api/v2/reportsummary/${device}`, { token: t.adminToken });
    expect(summary.body.last_ts).toBeLessThanOrEqual(now() + REPORT_FUTURE_SKEW_S);
    // The broker's own entries (agent_internal) stay at broker time, and newer reports sort first again.
    await t.broker.services.reports.agentEvent(device, 'INFO', 'Agent connected (version after)', new Date(Date.now() + (REPORT_FUTURE_SKEW_S + 60) * 1000));
    const newest = (await list(t.adminToken, `?node_id=${device}`)).body.items[0];
    expect(newest.text).toBe('Agent connected (version after)');
  });

  it('refuses a list over the per-message limit whole, and messages without a list, keeping the connection', async () => {
    conn.send({ t: 'reports', reports: Array.from({ length: 501 }, () => report({ text: 'flood x' })) });
    conn.send({ t: 'reports', reports: 'nope' });
    conn.send({ t: 'reports' });
    // Messages of one connection are handled in order, and a refused list is refused before any wait.
    conn.send({ t: 'reports', reports: [report({ text: 'marker after the big list' })] });
    await eventually(async () => (await list(t.adminToken, `?node_id=${device}&search=marker after`)).body.total === 1);
    expect((await list(t.adminToken, `?node_id=${device}&search=flood%20x`)).body.total).toBe(0);
    // A flood is not a protocol error: the device keeps its connection.
    expect(t.broker.services.agents.isConnected(device)).toBe(true);
  });
});

describe('ReportsService.record and retention', () => {
  it('keeps at most REPORT_RATE_PER_DEVICE reports per device and minute, whatever the message count', async () => {
    const reports = t.broker.services.reports;
    const d = await t.addDevice({ name: 'flooder' });
    const at = new Date(Date.now() + 3_600_000);
    let stored = 0;
    let limited = 0;
    for (let i = 0; i < 15; i += 1) {
      const outcome = await reports.record(d, [report({ text: `burst ${i}` }), report({ text: `burst ${i}b` })], at);
      stored += outcome.stored;
      limited += outcome.refused.rate_limited ?? 0;
    }
    expect(stored).toBe(RATE);
    expect(limited).toBe(30 - RATE);
    expect(await count(d)).toBe(RATE);
    // The next minute lets reports in again.
    expect((await reports.record(d, [report()], new Date(at.getTime() + 60_000))).stored).toBe(1);
  });

  it('refuses hostile input without storing anything and stores nothing for unknown devices', async () => {
    const reports = t.broker.services.reports;
    expect(await reports.record(lonely, { not: 'a list' })).toEqual({ stored: 0, refused: { not_a_list: 1 } });
    expect((await reports.record(lonely, [report({ ts: -5 }), report({ ts: 1.5 }), report({ sev: 'info' as never })])).refused).toEqual({
      bad_field: 2,
      bad_severity: 1,
    });
    expect(await count(lonely)).toBe(0);
    const unknown = 'e'.repeat(64);
    expect((await reports.record(unknown, [report()])).refused).toEqual({ unknown_device: 1 });
    expect(await count(unknown)).toBe(0);
  });

  it('keeps at most REPORT_MAX_PER_DEVICE reports per device, the newest', async () => {
    const reports = t.broker.services.reports;
    const d = await t.addDevice({ name: 'chatty' });
    // Each batch in a rate window of its own (a minute apart).
    for (let i = 0; i < 3; i += 1) {
      const at = new Date(Date.now() + i * 61_000);
      expect(
        (
          await reports.record(
            d,
            Array.from({ length: RATE }, (_, j) => report({ text: `n${i * RATE + j}` })),
            at,
          )
        ).stored,
      ).toBe(RATE);
    }
    expect(await count(d)).toBe(PER_DEVICE);
    const kept = (await list(t.adminToken, `?node_id=${d}&sort_field=received&sort_direction=asc&items_per_page=1`)).body.items[0].text;
    expect(kept).toBe(`n${3 * RATE - PER_DEVICE}`);
  });

  it('removes reports older than REPORT_RETENTION_DAYS and those of removed devices on the sweep', async () => {
    const reports = t.broker.services.reports;
    const d = await t.addDevice({ name: 'old' });
    await reports.record(d, [report()], new Date(Date.now() - 40 * 86_400_000));
    await reports.record(d, [report({ text: 'fresh' })]);
    const gone = await t.addDevice({ name: 'gone' });
    await reports.record(gone, [report()]);
    await t.broker.services.store.db.deleteFrom('nodes').where('node_id', '=', gone).execute();
    await t.broker.services.store.db.deleteFrom('devices').where('device_id', '=', gone).execute();
    await reports.sweep();
    expect(await count(d)).toBe(1);
    expect(await count(gone)).toBe(0);
  });
});
