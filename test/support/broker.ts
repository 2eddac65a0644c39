/**
 * A real broker in the test process, on an ephemeral port, on SQLite or on the local PostgreSQL
 * (FLEET_TEST_DB=postgres, each broker in a schema of its own, dropped at close: in the background
 * under vitest, the run's global tear-down sweeping what is left, support/pg-schemas.ts).
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Insertable } from 'kysely';
import { loadConfig } from '../../broker/environment.js';
import type { DevicesTable } from '../../broker/db/schema.js';
import { dropSchema } from '../../broker/db/database.js';
import { hashPassword } from '../../broker/auth/passwords.js';
import { createLogger } from '../../broker/logger.js';
import { CHECK_RESPONSES_ENV } from '../../broker/http/response-check.js';
import { startBroker, type RunningBroker } from '../../broker/server.js';
import { copyPgTemplate, copySqliteTemplate } from './db-template.js';
import { schemaName } from './pg-schemas.js';
import type { ServiceOptions } from '../../broker/services.js';
import type { Policy } from '../../shared/resources.js';

export const PG_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
export const ADMIN = { email: 'admin@example.com', password: 'admin-password-1' };

export interface ApiAnswer<T = any> {
  status: number;
  body: T;
  headers: Headers;
}

export interface TestBroker {
  url: string;
  broker: RunningBroker;
  dataDir: string;
  database: 'sqlite' | 'postgres';
  /** The PostgreSQL schema the broker keeps its tables in ('' on SQLite). */
  schema: string;
  /** Token of the first user (Administrator). */
  adminToken: string;
  api<T = any>(method: string, path: string, options?: { token?: string; body?: unknown; headers?: Record<string, string> }): Promise<ApiAnswer<T>>;
  login(email: string, password: string): Promise<string>;
  /** A user holding one role with these policies, straight through the store; returns its token. */
  userWith(policies: Policy[], email?: string): Promise<{ id: string; email: string; password: string; token: string; roleId: string }>;
  /**
   * A user holding one role with these policies and a session token minted through the store: no
   * sign-in (which is rate-limited per address) and no password hashing, for tests that need many users.
   */
  tokenWith(policies: Policy[]): Promise<string>;
  /** A device in the tree, straight through the store. */
  addDevice(options?: { parent?: string; tags?: string[]; name?: string; id?: string }): Promise<string>;
  addGroup(options: { id: string; parent?: string; tags?: string[]; title?: string }): Promise<string>;
  close(): Promise<void>;
}

/** The devices row of an approved device, for tests and benchmarks that write the store directly. */
export function approvedDeviceRow(id: string, name: string, attributes = '{}', now = new Date().toISOString()): Insertable<DevicesTable> {
  return {
    device_id: id,
    public_key: 'test',
    state: 'approved',
    hostname: name,
    bootstrap_key: null,
    attributes,
    created_at: now,
    approved_at: now,
    last_seen: null,
    last_ip: null,
    agent_version: null,
  };
}

/**
 * scrypt's cost for the passwords the tests make, under vitest: 2^10 (a few milliseconds) rather than
 * the broker's 2^15 (about a tenth of a second of CPU, and 32 MiB, a hash or a check). A run signs in
 * some two thousand times, nearly all as throwaway users or as the administrator. The broker's own
 * hashing at its cost is still what creates the administrator (checked by the first sign-in of every
 * test broker) and every user or password made through the API. The benches (not run by vitest)
 * keep the broker's cost: some of them measure a sign-in.
 */
export const TEST_SCRYPT_COST = process.env.VITEST ? 2 ** 10 : undefined;

/** A password hash for a user a test writes straight into the store. */
export function testPasswordHash(password: string): Promise<string> {
  return hashPassword(password, TEST_SCRYPT_COST);
}

export function testDatabase(): 'sqlite' | 'postgres' {
  return process.env.FLEET_TEST_DB === 'postgres' ? 'postgres' : 'sqlite';
}

export async function startTestBroker(
  options: {
    database?: 'sqlite' | 'postgres';
    env?: Record<string, string>;
    locator?: ServiceOptions['locator'];
    /**
     * Another broker on the same PostgreSQL schema (several brokers, one database): this one joins
     * the schema of `shareWith` and leaves dropping it to that broker's close. Its DATA_DIR is its own.
     */
    shareWith?: TestBroker;
    /**
     * Test-only, on unless `false`: every 2xx JSON answer of a route that declares `response` is
     * parsed with it, a mismatch answering 500 `response_mismatch` and logged
     * (broker/http/response-check.ts), so the test that made the call fails.
     */
    checkResponses?: boolean;
    /**
     * On unless `false`: the broker starts on a copy of the run's template store (migrated, the
     * administrator made; support/db-template.ts) rather than on an empty one. Off, or when `env`
     * names the data directory, the database or the administrator, or with `shareWith`, it migrates
     * and bootstraps itself.
     */
    template?: boolean;
  } = {},
): Promise<TestBroker> {
  const database = options.shareWith?.database ?? options.database ?? testDatabase();
  if (options.shareWith && database !== 'postgres') throw new Error('brokers share a database on PostgreSQL only (SQLite is the single-broker store)');
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-test-'));
  const schema = database === 'postgres' ? (options.shareWith?.schema ?? schemaName()) : '';
  const env = options.env ?? {};
  const seeded =
    options.template !== false &&
    !options.shareWith &&
    !['DATA_DIR', 'DATABASE_URL', 'DATABASE_SCHEMA', 'ADMIN_EMAIL', 'ADMIN_PASSWORD'].some((name) => name in env);
  if (seeded) {
    const template = { admin: ADMIN, adminCost: TEST_SCRYPT_COST, pgUrl: PG_URL };
    if (database === 'postgres') await copyPgTemplate(schema, template);
    else await copySqliteTemplate(path.join(dataDir, 'fleet.sqlite'), template);
  }
  const config = loadConfig({
    DATA_DIR: dataDir,
    PORT: '0',
    HOST: '127.0.0.1',
    ADMIN_EMAIL: ADMIN.email,
    ADMIN_PASSWORD: ADMIN.password,
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    // Tests open many connections from 127.0.0.1 in a burst: no accept rate unless a test sets one.
    ACCEPT_RATE_PER_ADDRESS: '0',
    // A withdrawn grant, a disabled user or a removed key ends live sessions at the next re-check:
    // every 250 ms in the tests rather than 2 s, so that the tests that wait for it do not wait
    // seconds. The benches (not run by vitest) measure the broker's default: a re-check pass
    // authorizes every live session again, eight times as often at 250 ms.
    ...(process.env.VITEST ? { REMOTE_RECHECK_MS: '250' } : {}),
    ...(database === 'postgres' ? { DATABASE_URL: PG_URL, DATABASE_SCHEMA: schema } : {}),
    ...options.env,
  });
  // The switch is read when the routes are mounted, during startBroker: set for that time only.
  const checkBefore = process.env[CHECK_RESPONSES_ENV];
  process.env[CHECK_RESPONSES_ENV] = options.checkResponses === false ? '0' : '1';
  let broker: RunningBroker;
  try {
    broker = await startBroker(config, createLogger(config.logLevel), { locator: options.locator });
  } finally {
    if (checkBefore === undefined) delete process.env[CHECK_RESPONSES_ENV];
    else process.env[CHECK_RESPONSES_ENV] = checkBefore;
  }
  const db = broker.services.store.db;

  async function api<T>(method: string, p: string, o: { token?: string; body?: unknown; headers?: Record<string, string> } = {}): Promise<ApiAnswer<T>> {
    const headers: Record<string, string> = { ...o.headers };
    if (o.token) headers.authorization = `Bearer ${o.token}`;
    let body: BodyInit | undefined;
    if (o.body instanceof FormData) body = o.body;
    else if (o.body !== undefined) {
      headers['content-type'] ??= 'application/json';
      body = typeof o.body === 'string' ? o.body : JSON.stringify(o.body);
    }
    const res = await fetch(`${broker.url}${p}`, { method, headers, body });
    const text = await res.text();
    let parsed: unknown = text;
    if ((res.headers.get('content-type') ?? '').includes('json') && text) parsed = JSON.parse(text);
    return { status: res.status, body: parsed as T, headers: res.headers };
  }

  async function login(email: string, password: string): Promise<string> {
    const r = await api<{ token: string }>('POST', '/api/v2/login', { body: { email, password } });
    if (r.status !== 200) throw new Error(`login ${email} failed: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body.token;
  }

  let counter = 0;
  /** A role with these policies and a user holding it, straight through the store. */
  async function insertUserWithRole(policies: Policy[], o: { email: string; passwordHash: string | null; lname: string }) {
    const id = crypto.randomUUID();
    const roleId = crypto.randomUUID();
    const now = new Date().toISOString();
    await db
      .insertInto('roles')
      .values({
        id: roleId,
        name: `role-${roleId}`,
        description: '',
        policies: JSON.stringify(policies),
        builtin: 0,
        created_at: now,
        created_by: null,
        updated_at: now,
        updated_by: null,
      })
      .execute();
    await db
      .insertInto('users')
      .values({
        id,
        email: o.email.replace('{id}', id),
        fname: 'Test',
        lname: o.lname,
        password_hash: o.passwordHash,
        disabled: 0,
        two_factor: null,
        totp_secret: null,
        totp_pending: null,
        created_at: now,
        last_login: null,
      })
      .execute();
    await db.insertInto('user_roles').values({ user_id: id, role_id: roleId }).execute();
    return { id, roleId };
  }

  async function userWith(policies: Policy[], email?: string) {
    counter += 1;
    const address = email ?? `user${counter}-${crypto.randomBytes(3).toString('hex')}@example.com`;
    const password = `password-${crypto.randomBytes(4).toString('hex')}`;
    const { id, roleId } = await insertUserWithRole(policies, { email: address, passwordHash: await testPasswordHash(password), lname: `User ${counter}` });
    return { id, email: address, password, token: await login(address, password), roleId };
  }

  async function tokenWith(policies: Policy[]) {
    counter += 1;
    const { id } = await insertUserWithRole(policies, { email: 'walk-{id}@example.com', passwordHash: null, lname: `User ${counter}` });
    return (await broker.services.auth.startSession(id, '127.0.0.1', 'test')).token;
  }

  async function addGroup(o: { id: string; parent?: string; tags?: string[]; title?: string }) {
    await db
      .insertInto('nodes')
      .values({
        node_id: o.id,
        parent_id: o.parent ?? 'root',
        type: 'group',
        title: o.title ?? o.id,
        tags: JSON.stringify(o.tags ?? []),
        created_at: new Date().toISOString(),
      })
      .execute();
    return o.id;
  }

  async function addDevice(o: { parent?: string; tags?: string[]; name?: string; id?: string } = {}) {
    const id = o.id ?? crypto.createHash('sha256').update(crypto.randomBytes(16)).digest('hex');
    const now = new Date().toISOString();
    const name = o.name ?? `device-${id.slice(0, 6)}`;
    await db
      .insertInto('devices')
      .values(approvedDeviceRow(id, name, JSON.stringify({ device_name: name })))
      .execute();
    await db
      .insertInto('nodes')
      .values({ node_id: id, parent_id: o.parent ?? 'unassigned_group', type: 'device', title: name, tags: JSON.stringify(o.tags ?? []), created_at: now })
      .execute();
    return id;
  }

  // On an empty store, the first sign-in checks the administrator the broker created, at the
  // broker's own cost; the later ones (every browser test signs in through the form) check a cheaper
  // hash of the same password. A template's administrator was checked so when the template was made,
  // and carries the cheaper hash already.
  const adminToken = await login(ADMIN.email, ADMIN.password);
  if (TEST_SCRYPT_COST !== undefined && !seeded) {
    await db
      .updateTable('users')
      .set({ password_hash: await testPasswordHash(ADMIN.password) })
      .where('email', '=', ADMIN.email)
      .execute();
  }
  return {
    url: broker.url,
    broker,
    dataDir,
    database,
    schema,
    adminToken,
    api,
    login,
    userWith,
    tokenWith,
    addDevice,
    addGroup,
    async close() {
      await broker.close();
      if (database === 'postgres' && !options.shareWith) {
        // Under vitest, in the background: the run's global tear-down (support/pg-schemas.ts)
        // drops whatever a worker that ended did not. Outside (benches), before close returns.
        const drop = dropSchema(PG_URL, schema);
        if (process.env.VITEST) drop.catch(() => {});
        else await drop;
      }
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
