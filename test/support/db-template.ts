/**
 * The store a test broker starts from, made once per test run and copied for each broker: migrated,
 * its system nodes made and its administrator created by the broker's own code (openStore,
 * ensureSystemNodes, bootstrapFirstUser), the administrator's hash checked once at the broker's
 * cost. A broker started on a copy finds its schema current and its first user made: it runs no
 * migration and hashes no password. Before, every test broker ran the migrations (about 0.1 s of
 * CPU and 0.8 s on PostgreSQL's side a start) and two scrypts at 2^15 (about 0.4 s of CPU).
 *
 * SQLite: the template is a database file, copied into the broker's DATA_DIR. PostgreSQL: the
 * template is a schema dumped once to SQL (`pg_dump --inserts`) and dropped; a broker's schema is
 * that SQL run in one statement under the broker's schema name. Either way the rows' random ids
 * (the administrator, its role, the company) are made afresh for each copy, so no two brokers
 * share one. The broker's own migration and bootstrap paths keep their tests: the migration files'
 * tests, the stores the unit tests open (`openStore` on a new file), several-brokers.test.ts
 * (bootstrap on an empty store, on both databases) and db-template.test.ts (a broker on an empty
 * store, `template: false`).
 *
 * A run's templates sit in a private directory named by the run (the vitest process, parent of
 * every worker) and by what made them (the migrations' names and the sources of the code above),
 * left by runs whose process is gone removed when a template is made. A template whose recorded
 * migrations are not the current ones is never used: it is made again.
 */
import { execFile } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import SqliteDatabase from 'better-sqlite3';
import pg from 'pg';
import { dropSchema, openStore, sql } from '../../broker/db/database.js';
import { migrations } from '../../broker/db/migrations/index.js';
import { ensureSystemNodes } from '../../broker/devices/scope.js';
import { loadConfig } from '../../broker/environment.js';
import { hashPassword, verifyPassword } from '../../broker/auth/passwords.js';
import { bootstrapFirstUser } from '../../broker/users/bootstrap.js';
import { alive, testRun } from './pg-schemas.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const PREFIX = 'fleet-test-template-';
/** The tables whose rows carry a random id in a new store, and those ids' columns. */
const REKEYED = { users: ['id'], roles: ['id'], user_roles: ['user_id', 'role_id'], company: ['id'] } as const;

export interface TemplateOptions {
  admin: { email: string; password: string };
  /** The scrypt cost of the administrator's hash in the copies (the broker's own when undefined). */
  adminCost?: number;
  pgUrl: string;
}

/** The current migrations' names, in order: what a template must have recorded to be used. */
function migrationNames(): string[] {
  return Object.keys(migrations('sqlite'));
}

let directory: string | undefined;
/** The run's private template directory (made if absent; refused if not this user's own). */
function templateDir(): string {
  if (directory) return directory;
  const sources = ['broker/db/migrations', 'broker/users/bootstrap.ts', 'broker/devices/scope.ts', 'broker/roles/store.ts', 'test/support/db-template.ts'];
  const hash = crypto.createHash('sha256').update(migrationNames().join('\n'));
  for (const source of sources) {
    const full = path.join(root, source);
    const files = fs.statSync(full).isDirectory()
      ? fs
          .readdirSync(full)
          .sort()
          .map((f) => path.join(full, f))
      : [full];
    for (const file of files) hash.update(file).update(fs.readFileSync(file));
  }
  // Under vitest the workers' parent is the run's own process: one template for the whole run.
  const run = testRun();
  const dir = path.join(os.tmpdir(), `${PREFIX}${run}-${hash.digest('hex').slice(0, 16)}`);
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const stat = fs.lstatSync(dir);
  if (!stat.isDirectory() || stat.uid !== process.getuid?.() || (stat.mode & 0o077) !== 0) throw new Error(`${dir} is not a private directory of this user`);
  directory = dir;
  return dir;
}

/** Removes the template directories of runs whose process has ended. */
function removeOrphans(): void {
  for (const name of fs.readdirSync(os.tmpdir())) {
    const run = name.startsWith(PREFIX) ? Number(name.slice(PREFIX.length).split('-')[0]) : NaN;
    if (!Number.isInteger(run) || run <= 0 || alive(run)) continue;
    const full = path.join(os.tmpdir(), name);
    if (fs.lstatSync(full).uid === process.getuid?.()) fs.rmSync(full, { recursive: true, force: true });
  }
}

/** Runs the broker's own first start on an open store, checks the administrator's hash, then cheapens it. */
async function bootstrap(db: Awaited<ReturnType<typeof openStore>>['db'], o: TemplateOptions): Promise<void> {
  await ensureSystemNodes(db);
  const outcome = await bootstrapFirstUser(db, loadConfig({ ADMIN_EMAIL: o.admin.email, ADMIN_PASSWORD: o.admin.password }));
  if (outcome !== 'created') throw new Error(`template: the first user was not created (${outcome})`);
  const { password_hash: made } = await db.selectFrom('users').select('password_hash').where('email', '=', o.admin.email).executeTakeFirstOrThrow();
  // The hash the broker made, checked at the broker's cost: a broken bootstrap fails every test broker.
  if (!(await verifyPassword(o.admin.password, made))) throw new Error('template: the administrator does not sign in with ADMIN_PASSWORD');
  if (o.adminCost !== undefined) {
    await db
      .updateTable('users')
      .set({ password_hash: await hashPassword(o.admin.password, o.adminCost) })
      .where('email', '=', o.admin.email)
      .execute();
  }
}

/** Whether a template file records exactly the current migrations. */
function sqliteCurrent(file: string): boolean {
  if (!fs.existsSync(file)) return false;
  const db = new SqliteDatabase(file, { readonly: true });
  try {
    const names = (db.prepare('SELECT name FROM kysely_migration ORDER BY name').all() as Array<{ name: string }>).map((r) => r.name);
    return names.join('\n') === migrationNames().join('\n');
  } catch {
    return false;
  } finally {
    db.close();
  }
}

/** The SQLite template's path, made (again) unless current. */
export async function sqliteTemplate(o: TemplateOptions): Promise<string> {
  const file = templateFiles().sqlite;
  if (sqliteCurrent(file)) return file;
  removeOrphans();
  const work = fs.mkdtempSync(path.join(templateDir(), 'make-'));
  try {
    const store = await openStore(`sqlite:${path.join(work, 'fleet.sqlite')}`);
    try {
      await bootstrap(store.db, o);
    } finally {
      await store.close(); // checkpoints the WAL into the file and removes it
    }
    fs.renameSync(path.join(work, 'fleet.sqlite'), file);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
  return file;
}

/** Copies the SQLite template to `file`, its random ids made afresh. */
export async function copySqliteTemplate(file: string, o: TemplateOptions): Promise<void> {
  fs.copyFileSync(await sqliteTemplate(o), file, fs.constants.COPYFILE_EXCL);
  const db = new SqliteDatabase(file);
  try {
    db.pragma('foreign_keys = OFF');
    const ids = new Map<string, string>();
    const fresh = (id: string) => ids.get(id) ?? (ids.set(id, crypto.randomUUID()), ids.get(id) as string);
    db.transaction(() => {
      for (const [table, columns] of Object.entries(REKEYED)) {
        for (const row of db.prepare(`SELECT rowid AS r, ${columns.join(', ')} FROM ${table}`).all() as Array<Record<string, string> & { r: number }>) {
          const sets = columns.map((c) => `${c} = ?`).join(', ');
          db.prepare(`UPDATE ${table} SET ${sets} WHERE rowid = ?`).run(...columns.map((c) => fresh(row[c])), row.r);
        }
      }
    })();
  } finally {
    db.close();
  }
}

/** Where the run's templates are: the SQLite file and the PostgreSQL SQL (for the template tests). */
export function templateFiles(): { sqlite: string; postgres: string } {
  return { sqlite: path.join(templateDir(), 'fleet.sqlite'), postgres: path.join(templateDir(), 'postgres.json') };
}

let pgDump: { text: string; schema: string; ids: string[] } | undefined;

/**
 * Keeps this process's templates in `dir` (a private directory of the caller's), or in the run's
 * directory again (undefined): for the tests that spoil a template, so that the run's stays whole.
 */
export function useTemplateDir(dir: string | undefined): void {
  directory = dir;
  pgDump = undefined;
}

/** Forgets the PostgreSQL template this process read or made: the next copy reads its file again. */
export function forgetPgTemplate(): void {
  pgDump = undefined;
}

const execFileAsync = promisify(execFile);
const SCHEMA_TOKEN = /^tpl_[0-9a-f]{12}$/;

/** Whether a PostgreSQL template's SQL records exactly the current migrations. */
function pgCurrent(text: string, schema: string): boolean {
  const names = [...text.matchAll(new RegExp(`^INSERT INTO ${schema}\\.kysely_migration VALUES \\('([^']+)'`, 'gm'))].map((m) => m[1]).sort();
  return names.join('\n') === migrationNames().join('\n');
}

/** The PostgreSQL template: its SQL, the schema name in it, and the random ids to make afresh. */
export async function pgTemplate(o: TemplateOptions): Promise<{ text: string; schema: string; ids: string[] }> {
  const file = templateFiles().postgres;
  if (!pgDump && fs.existsSync(file)) {
    const saved = JSON.parse(fs.readFileSync(file, 'utf8')) as { text: string; schema: string; ids: string[] };
    if (SCHEMA_TOKEN.test(saved.schema) && pgCurrent(saved.text, saved.schema)) pgDump = saved;
  }
  if (pgDump && pgCurrent(pgDump.text, pgDump.schema)) return pgDump;
  removeOrphans();
  const schema = `tpl_${crypto.randomBytes(6).toString('hex')}`;
  try {
    const store = await openStore(o.pgUrl, schema);
    const ids: string[] = [];
    try {
      await bootstrap(store.db, o);
      for (const [table, columns] of Object.entries(REKEYED)) {
        const { rows } = await sql<Record<string, string>>`SELECT ${sql.raw(columns.join(', '))} FROM ${sql.table(table)}`.execute(store.db);
        for (const row of rows) for (const c of columns) ids.push(row[c]);
      }
    } finally {
      await store.close();
    }
    const { stdout } = await execFileAsync('pg_dump', ['--dbname', o.pgUrl, '--schema', schema, '--inserts', '--no-owner', '--no-privileges'], {
      maxBuffer: 16 * 1024 * 1024,
    });
    // psql's meta-commands (\restrict) and comments are not SQL.
    const text = stdout
      .split('\n')
      .filter((line) => !line.startsWith('\\') && !line.startsWith('--'))
      .join('\n');
    pgDump = { text, schema, ids: [...new Set(ids)] };
  } finally {
    await dropSchema(o.pgUrl, schema);
  }
  const temporary = `${file}.${process.pid}`;
  fs.writeFileSync(temporary, JSON.stringify(pgDump), { mode: 0o600 });
  fs.renameSync(temporary, file);
  return pgDump;
}

/** Makes `schema` on PostgreSQL from the template, in one statement, its random ids made afresh. */
export async function copyPgTemplate(schema: string, o: TemplateOptions): Promise<void> {
  const t = await pgTemplate(o);
  let text = t.text.replaceAll(`${t.schema}.`, `${schema}.`).replace(`CREATE SCHEMA ${t.schema};`, `CREATE SCHEMA ${schema};`);
  for (const id of t.ids) text = text.replaceAll(`'${id}'`, `'${crypto.randomUUID()}'`);
  const client = new pg.Client({ connectionString: o.pgUrl });
  await client.connect();
  try {
    await client.query(text);
  } finally {
    await client.end();
  }
}
