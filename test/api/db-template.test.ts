/**
 * The template store the test brokers start from (support/db-template.ts): a broker on a copy runs
 * no migration and creates no administrator, two brokers' copies share no row nor id, a template
 * that does not record the current migrations is made again, and a broker on an empty store
 * (`template: false`) still migrates and creates its administrator itself.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import SqliteDatabase from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { sql } from '../../broker/db/database.js';
import { migrations } from '../../broker/db/migrations/index.js';
import { ADMIN, startTestBroker, testDatabase, type TestBroker } from '../support/broker.js';
import { forgetPgTemplate, templateFiles, useTemplateDir } from '../support/db-template.js';

const opened: TestBroker[] = [];
async function start(options: Parameters<typeof startTestBroker>[0] = {}): Promise<TestBroker> {
  const t = await startTestBroker(options);
  opened.push(t);
  return t;
}
afterEach(async () => {
  for (const t of opened.splice(0)) await t.close();
});

const names = Object.keys(migrations('sqlite'));

async function recorded(t: TestBroker): Promise<Array<{ name: string; timestamp: string }>> {
  const { rows } = await sql<{ name: string; timestamp: string }>`SELECT name, timestamp FROM kysely_migration ORDER BY name`.execute(
    t.broker.services.store.db,
  );
  return rows;
}

/** The ids a new store draws at random: the administrator, its role, the company. */
async function ids(t: TestBroker): Promise<string[]> {
  const db = t.broker.services.store.db;
  const admin = await db.selectFrom('users').select('id').where('email', '=', ADMIN.email).executeTakeFirstOrThrow();
  const role = await db.selectFrom('user_roles').select('role_id').where('user_id', '=', admin.id).executeTakeFirstOrThrow();
  const company = await db.selectFrom('company').select('id').executeTakeFirstOrThrow();
  return [admin.id, role.role_id, company.id];
}

describe(`test brokers from a template store (${testDatabase()})`, () => {
  it('a broker on a copy runs no migration and finds its administrator made', async () => {
    await start(); // the template exists
    const before = new Date().toISOString();
    const t = await start();
    expect(t.broker.firstUser).toBe('exists');
    const rows = await recorded(t);
    expect(rows.map((r) => r.name)).toEqual(names);
    // Every migration was recorded before this broker started: none ran at its start.
    for (const row of rows) expect(row.timestamp < before, row.name).toBe(true);
    expect((await t.api('GET', '/api/v2/profile', { token: t.adminToken })).status).toBe(200);
  });

  it('what one broker writes is absent from the next broker, and no two copies share an id', async () => {
    const a = await start();
    const device = await a.addDevice({ name: 'only-in-a' });
    const user = await a.userWith([]);
    const aIds = await ids(a);
    await a.close();
    opened.splice(opened.indexOf(a), 1);
    const b = await start();
    const db = b.broker.services.store.db;
    expect(await db.selectFrom('devices').select('device_id').where('device_id', '=', device).execute()).toEqual([]);
    expect(await db.selectFrom('users').select('id').where('id', '=', user.id).execute()).toEqual([]);
    expect(await db.selectFrom('users').select('email').execute()).toEqual([{ email: ADMIN.email }]);
    const bIds = await ids(b);
    for (const id of bIds) expect(aIds).not.toContain(id);
    expect(new Set(bIds).size).toBe(3);
  });

  it('a template that does not record the current migrations is made again', async () => {
    // In a directory of this test's own: the run's template is left whole for the other files.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-test-stale-'));
    useTemplateDir(dir);
    try {
      await staleTemplateMadeAgain();
    } finally {
      useTemplateDir(undefined);
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  async function staleTemplateMadeAgain() {
    await start(); // the template exists
    const last = names[names.length - 1];
    const files = templateFiles();
    if (testDatabase() === 'sqlite') {
      const db = new SqliteDatabase(files.sqlite);
      db.prepare('DELETE FROM kysely_migration WHERE name = ?').run(last);
      db.close();
    } else {
      const saved = JSON.parse(fs.readFileSync(files.postgres, 'utf8')) as { text: string; schema: string };
      saved.text = saved.text.replace(new RegExp(`^INSERT INTO ${saved.schema}\\.kysely_migration VALUES \\('${last}'.*$`, 'm'), '');
      fs.writeFileSync(files.postgres, JSON.stringify(saved));
      forgetPgTemplate();
    }
    const before = new Date().toISOString();
    const t = await start();
    const rows = await recorded(t);
    expect(rows.map((r) => r.name)).toEqual(names);
    // Made again (now), not migrated forward from the stale copy by the broker.
    expect(rows.every((r) => r.timestamp >= before)).toBe(true);
    expect(t.broker.firstUser).toBe('exists');
  }

  it('without the template a broker migrates an empty store and creates its administrator', async () => {
    const before = new Date().toISOString();
    const t = await start({ template: false });
    expect(t.broker.firstUser).toBe('created');
    const rows = await recorded(t);
    expect(rows.map((r) => r.name)).toEqual(names);
    for (const row of rows) expect(row.timestamp >= before, row.name).toBe(true);
    expect((await t.api('GET', '/api/v2/profile', { token: t.adminToken })).status).toBe(200);
  });
});
