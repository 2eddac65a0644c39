import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { MAX_OPTIONS_BYTES } from '../../broker/audit/service.js';
import { REFUSALS_PER_WINDOW } from '../../broker/audit/refusals.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

async function rows(where: { action?: string; event?: string }) {
  let q = t.broker.services.store.db.selectFrom('audit').selectAll();
  if (where.action) q = q.where('action', '=', where.action);
  if (where.event) q = q.where('event', '=', where.event);
  return q.orderBy('id').execute();
}

function auditVerifyCli(): { status: number | null; out: string } {
  const config = t.broker.services.config;
  const run = spawnSync(process.execPath, [path.resolve('node_modules/tsx/dist/cli.mjs'), 'broker/main.ts', 'audit-verify'], {
    env: { PATH: process.env.PATH, DATA_DIR: config.dataDir, DATABASE_URL: config.databaseUrl, DATABASE_SCHEMA: config.databaseSchema, LOG_LEVEL: 'silent' },
    encoding: 'utf8',
  });
  return { status: run.status, out: `${run.stdout}${run.stderr}` };
}

describe('an unauthenticated caller cannot grow the audit trail without bound', () => {
  it('a 950 KB body sent without a token makes an entry of a few KiB, marked as cut', async () => {
    // Many short values under many keys: each survives the per-value cut, together they are huge.
    const body: Record<string, string[]> = {};
    for (let k = 0; k < 49; k += 1) body[`field${k}`] = Array.from({ length: 49 }, (_, i) => `${k}-${i}-`.padEnd(390, 'x'));
    const text = JSON.stringify(body);
    expect(text.length).toBeGreaterThan(900_000);
    const r = await t.api('POST', '/api/v2/role', { body: text });
    expect(r.status).toBe(401);
    const [entry] = (await rows({ action: 'POST /api/v2/role' })).slice(-1);
    expect(entry).toMatchObject({ result: 'denied', user_id: null });
    expect(Buffer.byteLength(entry.options)).toBeLessThanOrEqual(MAX_OPTIONS_BYTES + 200);
    const options = JSON.parse(entry.options);
    expect(options).toMatchObject({ cut: true, bytes: expect.any(Number), start: expect.any(String) });
    expect(options.bytes).toBeGreaterThan(MAX_OPTIONS_BYTES);
    const listed = await t.api('GET', '/api/v2/commitlist?action=POST /api/v2/role&items_per_page=1', { token: t.adminToken });
    expect(listed.body.items[0].options.cut).toBe(true);
    expect(JSON.stringify(listed.body).length).toBeLessThan(8000);
  });

  it('a flood of 400 bad sign-in bodies from one address writes a bounded number of entries and a summary counting the rest', async () => {
    const before = (await rows({ action: 'POST /api/v2/login' })).length;
    const flood = 400;
    for (let i = 0; i < flood; i += 1) {
      const r = await t.api('POST', '/api/v2/login', { body: { email: 'x', junk: 'y'.repeat(8000) } });
      expect(r.status).toBe(400);
    }
    const written = (await rows({ action: 'POST /api/v2/login' })).length - before;
    expect(written).toBeLessThanOrEqual(REFUSALS_PER_WINDOW * 2);
    expect(written).toBeGreaterThan(0);
    // The rest are counted: a summary is written when the window ends (here: at the broker's close, forced now).
    await t.broker.services.audit.close();
    const summaries = await rows({ event: 'audit.refusals' });
    const counted = summaries.reduce((n, s) => n + (JSON.parse(s.options) as { count: number }).count, 0);
    expect(written + counted).toBe(flood);
    const last = summaries[summaries.length - 1];
    expect(last).toMatchObject({ result: 'denied', source_ip: '127.0.0.1', user_id: null });
    expect(JSON.parse(last.options).events).toMatchObject({ 'session.post': expect.any(Number) });
    t.broker.services.audit.start();
    // Other callers are not held back by one address's flood: a sign-in still works and is audited.
    const signIn = await t.api('POST', '/api/v2/login', { body: { email: 'admin@example.com', password: 'admin-password-1' } });
    expect(signIn.status).toBe(200);
  });
});

describe('nothing else stops when the audit trail cannot grow', () => {
  it('a refused call is still answered with its refusal, and a sign-in and its renewal still issue tokens', async () => {
    const spy = vi.spyOn(t.broker.services.audit, 'recordChange').mockRejectedValue(new Error('disk full'));
    try {
      const refused = await t.api('POST', '/api/v2/role', { body: { name: 'x' } });
      expect(refused.status).toBe(401);
      expect(refused.body).toMatchObject({ code: 401 });
      const bad = await t.api('POST', '/api/v2/login', { body: { email: 'x' } });
      expect(bad.status).toBe(400);
      const signIn = await t.api('POST', '/api/v2/login', { body: { email: 'admin@example.com', password: 'admin-password-1' } });
      expect(signIn.status).toBe(200);
      expect(signIn.body.token).toEqual(expect.any(String));
      const renewed = await t.api('POST', '/api/v2/refresh-jwt', { token: signIn.body.token });
      expect(renewed.status).toBe(200);
      // the writes were attempted, and failed
      expect(spy).toHaveBeenCalled();
    } finally {
      spy.mockRestore();
    }
  });
});

describe('retention: old entries go behind a checkpoint that verification starts from', () => {
  // Runs the command-line tool three times (tsx loading the broker's code each time, synchronously):
  // on a slow or busy machine that alone passed the 30 s default.
  it('deletes entries older than the cutoff, audit-verify passes, and a later edit is still found', async () => {
    const db = t.broker.services.store.db;
    for (let i = 0; i < 5; i += 1) await t.broker.services.audit.recordChange({ event: 'test.old', action: `old ${i}`, options: {}, ip: '127.0.0.1' });
    const oldest = await db.selectFrom('audit').select(['id', 'ts']).where('event', '=', 'test.old').orderBy('id', 'desc').limit(1).executeTakeFirstOrThrow();
    // Strictly later than every old entry, whatever the clock's resolution.
    await new Promise((resolve) => setTimeout(resolve, 5));
    const cutoff = new Date();
    for (let i = 0; i < 5; i += 1) await t.broker.services.audit.recordChange({ event: 'test.new', action: `new ${i}`, options: {}, ip: '127.0.0.1' });

    const pruned = await t.broker.services.audit.prune(cutoff);
    expect(pruned.deleted).toBeGreaterThanOrEqual(5);
    expect(await rows({ event: 'test.old' })).toHaveLength(0);
    expect(await rows({ event: 'test.new' })).toHaveLength(5);
    const [checkpoint] = await rows({ event: 'audit.checkpoint' });
    const recorded = JSON.parse(checkpoint.options);
    expect(recorded.deleted_through).toBeGreaterThanOrEqual(Number(oldest.id));
    expect(recorded.deleted_through_sha).toMatch(/^[0-9a-f]{64}$/);
    const first = await db.selectFrom('audit').select('id').orderBy('id').limit(1).executeTakeFirstOrThrow();
    expect(Number(first.id)).toBe(recorded.deleted_through + 1);

    const verified = await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken });
    expect(verified.body).toMatchObject({ ok: true, checkpoint: { id: Number(checkpoint.id), deleted_through: recorded.deleted_through } });
    const cli = auditVerifyCli();
    expect(cli.status, cli.out).toBe(0);
    expect(cli.out).toContain('from the checkpoint');

    // An entry after the checkpoint edited: found.
    const [victim] = await rows({ event: 'test.new' });
    await db.updateTable('audit').set({ action: 'nothing happened' }).where('id', '=', victim.id).execute();
    const edited = await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken });
    expect(edited.body).toMatchObject({ ok: false, first_bad: { id: Number(victim.id) } });
    expect(auditVerifyCli().status).toBe(1);
    await db.updateTable('audit').set({ action: victim.action }).where('id', '=', victim.id).execute();
    expect((await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken })).body.ok).toBe(true);

    // More entries deleted at the start than the checkpoint says: the first entry kept no longer chains.
    const firstKept = await db.selectFrom('audit').select('id').orderBy('id').limit(2).execute();
    await db.deleteFrom('audit').where('id', '=', firstKept[0].id).execute();
    const cut = await t.api('GET', '/api/v2/audit/verify', { token: t.adminToken });
    expect(cut.body).toMatchObject({ ok: false, first_bad: { id: Number(firstKept[1].id) } });
  }, 120_000);

  it('is off by default and read from AUDIT_RETENTION_DAYS', async () => {
    expect(t.broker.services.config.auditRetentionDays).toBe(0);
    const { loadConfig } = await import('../../broker/environment.js');
    expect(loadConfig({ AUDIT_RETENTION_DAYS: '400' }).auditRetentionDays).toBe(400);
    expect(() => loadConfig({ AUDIT_RETENTION_DAYS: 'forever' })).toThrow(/AUDIT_RETENTION_DAYS/);
  });
});
