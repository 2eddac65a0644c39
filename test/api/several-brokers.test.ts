/**
 * Several brokers on one PostgreSQL database: what one broker issues or counts, another honours.
 * On PostgreSQL two brokers share one schema (A and B); on SQLite — the single-broker store — A and
 * B are the same broker, so the same calls check the same code path there.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { Secret, TOTP } from 'otpauth';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BrokerKey } from '../../broker/agents/broker-key.js';
import { loadConfig } from '../../broker/environment.js';
import { dropSchema, openStore } from '../../broker/db/database.js';
import { SettingsStore } from '../../broker/settings.js';
import { bootstrapFirstUser } from '../../broker/users/bootstrap.js';
import { ADMIN, PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { CHUNK_BYTES } from '../../broker/files/db-store.js';
import { ENROL_FAILURES_PER_WINDOW } from '../../broker/enrol/service.js';
import { enrolDevice } from '../support/agent.js';
import { schemaName } from '../support/pg-schemas.js';
import { expectError, insertUser } from './auth-helpers.js';

let a: TestBroker;
let b: TestBroker;

beforeAll(async () => {
  a = await startTestBroker({ env: { FILE_STORE: 'db' } });
  b = a.database === 'postgres' ? await startTestBroker({ shareWith: a, env: { FILE_STORE: 'db' } }) : a;
});
afterAll(async () => {
  if (b !== a) await b?.close();
  await a?.close();
});

/** The status of GET /api/v2/events with a ticket; the stream is closed at once. */
function openEvents(t: TestBroker, ticket: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${t.url}/api/v2/events?ticket=${encodeURIComponent(ticket)}`, (res) => {
      resolve(res.statusCode ?? 0);
      res.resume();
      req.destroy();
    });
    req.on('error', reject);
  });
}

async function ticketFrom(t: TestBroker, token: string): Promise<string> {
  const r = await t.api<{ ticket: string }>('POST', '/api/v2/remote/ticket', { token, body: {} });
  expect(r.status, JSON.stringify(r.body)).toBe(200);
  return r.body.ticket;
}

describe('brokers sharing one database', () => {
  it('brokers starting together on an empty database create the first user once, and all start', async () => {
    const schema = schemaName();
    const url = a.database === 'postgres' ? PG_URL : `sqlite:${a.dataDir}/empty.sqlite`;
    const store = await openStore(url, a.database === 'postgres' ? schema : '');
    try {
      const config = loadConfig({ ADMIN_EMAIL: ADMIN.email, ADMIN_PASSWORD: ADMIN.password });
      const outcomes = await Promise.all([1, 2, 3].map(() => bootstrapFirstUser(store.db, config)));
      expect(outcomes.filter((o) => o === 'created')).toHaveLength(1);
      expect(outcomes.filter((o) => o === 'exists')).toHaveLength(2);
      expect(await store.db.selectFrom('users').select('email').execute()).toEqual([{ email: ADMIN.email }]);
    } finally {
      await store.close();
      if (a.database === 'postgres') await dropSchema(PG_URL, schema);
    }
  });

  it('runs two brokers on one schema on PostgreSQL (one on SQLite)', () => {
    expect(b !== a).toBe(a.database === 'postgres');
    if (b !== a) expect(b.schema).toBe(a.schema);
  });

  it('signs with one broker key, made once: an agent that pinned it at enrolment on A trusts B', async () => {
    expect(b.broker.services.brokerKey.publicKeyPem).toBe(a.broker.services.brokerKey.publicKeyPem);
    // Brokers starting together on an empty database make one key between them.
    const url = a.database === 'postgres' ? PG_URL : `sqlite:${a.dataDir}/keys.sqlite`;
    const schema = schemaName();
    const store = await openStore(url, a.database === 'postgres' ? schema : '');
    try {
      const keys = await Promise.all([1, 2, 3].map(() => BrokerKey.load(new SettingsStore(store.db))));
      expect(new Set(keys.map((k) => k.publicKeyPem)).size).toBe(1);
      expect(keys[0].publicKeyPem).not.toBe(a.broker.services.brokerKey.publicKeyPem);
    } finally {
      await store.close();
      if (a.database === 'postgres') await dropSchema(PG_URL, schema);
    }
  });

  it('a ticket issued on A opens a stream on B once; replayed on A or B it is refused', async () => {
    const ticket = await ticketFrom(a, a.adminToken);
    expect(await openEvents(b, ticket)).toBe(200);
    expect(await openEvents(a, ticket)).toBe(401);
    expect(await openEvents(b, ticket)).toBe(401);
  });

  it('of two redemptions of one ticket at once, on A and on B, exactly one wins', async () => {
    for (let round = 0; round < 5; round++) {
      const ticket = await ticketFrom(a, a.adminToken);
      const statuses = await Promise.all([openEvents(a, ticket), openEvents(b, ticket)]);
      expect(statuses.sort()).toEqual([200, 401]);
    }
  });

  it('an expired ticket is refused everywhere', async () => {
    const ticket = await ticketFrom(b, a.adminToken);
    await a.broker.services.store.db
      .updateTable('remote_tickets')
      .set({ expires_at: Date.now() - 1 })
      .execute();
    expect(await openEvents(a, ticket)).toBe(401);
  });

  it('counts wrong passwords across brokers: ten on A and B together close the account to that address', async () => {
    const u = await insertUser(a);
    for (let i = 0; i < 10; i++) {
      const on = i % 2 === 0 ? a : b;
      expectError(await on.api('POST', '/api/v2/login', { body: { email: u.email, password: 'wrong-password' } }), 401, 'invalid_credentials');
    }
    for (const on of [a, b]) {
      const r = await on.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } });
      expectError(r, 429, 'rate_limited');
      expect(Number(r.headers.get('retry-after'))).toBeGreaterThan(0);
    }
  });

  it('counts parallel wrong passwords on A and B exactly: the eleventh is refused whichever broker it reaches', async () => {
    const u = await insertUser(a);
    const answers = await Promise.all(
      Array.from({ length: 14 }, (_, i) => (i % 2 ? a : b).api('POST', '/api/v2/login', { body: { email: u.email, password: 'wrong-password' } })),
    );
    expect(answers.filter((r) => r.status === 401)).toHaveLength(10);
    expect(answers.filter((r) => r.status === 429)).toHaveLength(4);
  });

  it('counts enrolments with unknown bootstrap keys across brokers; a refused one is counted though its transaction rolled back', async () => {
    for (let i = 0; i < ENROL_FAILURES_PER_WINDOW; i++) {
      const r = await enrolDevice(i % 2 ? a : b, `wrong-key-${i}`);
      expectError(r.answer, 403, 'unknown_bootstrap_key');
    }
    for (const on of [a, b]) expectError((await enrolDevice(on, 'wrong-key-last')).answer, 429, 'rate_limited');
  });

  it('a ticket of a user disabled after it was issued opens nothing on the other broker', async () => {
    const u = await insertUser(a);
    const token = await a.login(u.email, u.password as string);
    const ticket = await ticketFrom(a, token);
    // Disabled through A; B never saw this token, so nothing cached there can let it through.
    const disabled = await a.api('PATCH', `/api/v2/user/${u.id}`, { token: a.adminToken, body: { disabled: true } });
    expect(disabled.status, JSON.stringify(disabled.body)).toBe(200);
    expect(await openEvents(b, ticket)).toBe(401);
    expect(await openEvents(b, 'made-up-ticket')).toBe(401);
  });

  it('a second-factor challenge started on A is completed on B, once', async () => {
    const u = await insertUser(a, { twoFactor: 1 });
    const secret = new Secret({ size: 20 }).base32;
    await a.broker.services.store.db.updateTable('users').set({ totp_secret: secret }).where('id', '=', u.id).execute();
    const first = await a.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } });
    expectError(first, 401, '2fa_required');
    const got = await b.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'google' } });
    expect(got.status, JSON.stringify(got.body)).toBe(200);
    const code = new TOTP({ secret: Secret.fromBase32(secret), algorithm: 'SHA1', digits: 6, period: 30 }).generate();
    const verified = await a.api('POST', '/api/v2/challenge-verify', { body: { challenge: got.body.challenge, code } });
    expect(verified.status, JSON.stringify(verified.body)).toBe(200);
    expect((await b.api('GET', '/api/v2/profile', { token: verified.body.token })).status).toBe(200);
    expectError(await b.api('POST', '/api/v2/challenge-verify', { body: { challenge: got.body.challenge, code } }), 401, 'challenge_used');
  });

  it('an expired challenge is refused on the other broker', async () => {
    const u = await insertUser(a, { twoFactor: 1 });
    await a.broker.services.store.db
      .updateTable('users')
      .set({ totp_secret: new Secret({ size: 20 }).base32 })
      .where('id', '=', u.id)
      .execute();
    const first = await a.api('POST', '/api/v2/login', { body: { email: u.email, password: u.password } });
    await a.broker.services.store.db
      .updateTable('challenges')
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where('user_id', '=', u.id)
      .execute();
    expectError(
      await b.api('POST', '/api/v2/challenge-get', { body: { challenge: first.body.challenge, preferProvider: 'google' } }),
      401,
      'challenge_expired',
    );
  });

  it('a device-code sign-in started on A is approved on B and collected on A, once', async () => {
    const form = { 'content-type': 'application/x-www-form-urlencoded', 'user-agent': 'qbee-cli/brokers' };
    const started = await a.api('POST', '/oauth2/devicecode', { headers: form });
    expect(started.status, JSON.stringify(started.body)).toBe(200);
    const poll = (t: TestBroker) =>
      t.api('POST', '/oauth2/token', {
        headers: form,
        body: new URLSearchParams({ grant_type: 'urn:ietf:params:oauth:grant-type:device_code', device_code: started.body.device_code }).toString(),
      });
    expect((await poll(b)).body.error).toBe('authorization_pending');
    const seen = await b.api('GET', `/api/v2/oauth2/device-auth/${started.body.user_code}`, { token: a.adminToken });
    expect(seen.body).toMatchObject({ user_code: started.body.user_code, user_agent: 'qbee-cli/brokers' });
    expect((await b.api('POST', `/api/v2/oauth2/device-auth/${started.body.user_code}`, { token: a.adminToken })).status).toBe(200);
    expect((await a.api('DELETE', `/api/v2/oauth2/device-auth/${started.body.user_code}`, { token: a.adminToken })).status).toBe(409);
    const [first, second] = await Promise.all([poll(a), poll(b)]);
    const won = [first, second].filter((r) => r.status === 200);
    expect(won).toHaveLength(1);
    expect([first, second].find((r) => r.status !== 200)?.body.error).toBe('bad_verification_code');
    expect((await b.api('GET', '/api/v2/profile', { token: won[0].body.access_token })).status).toBe(200);
  });
});

const sha256 = (data: Buffer | string) => crypto.createHash('sha256').update(data).digest('hex');

function upload(t: TestBroker, folder: string, name: string, content: Buffer | string, replace?: boolean) {
  const form = new FormData();
  form.append('path', folder);
  if (replace !== undefined) form.append('replace', String(replace));
  form.append('file', new Blob([typeof content === 'string' ? content : new Uint8Array(content)]), name);
  return t.api('POST', '/api/v2/file', { token: t.adminToken, body: form });
}

async function download(t: TestBroker, p: string): Promise<{ status: number; body: Buffer; error?: unknown }> {
  const res = await fetch(`${t.url}/api/v2/file?path=${encodeURIComponent(p)}`, { headers: { authorization: `Bearer ${t.adminToken}` } });
  try {
    return { status: res.status, body: Buffer.from(await res.arrayBuffer()) };
  } catch (error) {
    return { status: res.status, body: Buffer.alloc(0), error };
  }
}

const chunkRows = async () =>
  Number(
    (
      await a.broker.services.store.db
        .selectFrom('file_chunks')
        .select((eb) => eb.fn.countAll().as('n'))
        .executeTakeFirstOrThrow()
    ).n,
  );

describe('the file store in the database (FILE_STORE=db)', () => {
  it('empties DATA_DIR/tmp at start: bodies of uploads a kill interrupted do not pile up', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-tmp-left-'));
    try {
      const tmp = path.join(dataDir, 'tmp');
      fs.mkdirSync(path.join(tmp, 'nested'), { recursive: true });
      fs.writeFileSync(path.join(tmp, 'a1b2c3'), crypto.randomBytes(256 * 1024));
      fs.writeFileSync(path.join(tmp, 'nested', 'half'), 'x');
      const c = await startTestBroker({ env: { FILE_STORE: 'db', DATA_DIR: dataDir } });
      try {
        expect(fs.readdirSync(tmp)).toEqual([]);
        expect(fs.statSync(tmp).mode & 0o777).toBe(0o700);
        // and uploads still go through it
        const f = new FormData();
        f.append('path', '/');
        f.append('file', new Blob(['after a crash']), 'after.txt');
        expect((await c.api('POST', '/api/v2/file', { token: c.adminToken, body: f })).status).toBe(200);
      } finally {
        await c.close();
      }
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  it('serves a file uploaded on A from B, byte for byte, in chunks of bounded size', async () => {
    const content = crypto.randomBytes(2 * CHUNK_BYTES + 12_345);
    expect((await upload(a, '/shared/', 'image.bin', content)).status).toBe(200);
    const got = await download(b, '/shared/image.bin');
    expect(got.status).toBe(200);
    expect(sha256(got.body)).toBe(sha256(content));
    const meta = await b.api('GET', `/api/v2/file/metadata?path=${encodeURIComponent('/shared/image.bin')}`, { token: b.adminToken });
    expect(meta.body).toMatchObject({ size: content.length, sha256: sha256(content), is_dir: false });
    const chunks = await a.broker.services.store.db.selectFrom('file_chunks').select('data').execute();
    expect(chunks).toHaveLength(3);
    for (const c of chunks) expect(c.data.length).toBeLessThanOrEqual(CHUNK_BYTES);
    const listed = await b.api('GET', '/api/v2/files?path=%2Fshared%2F', { token: b.adminToken });
    expect(listed.body.items.map((e: { name: string }) => e.name)).toEqual(['image.bin']);
    expect((await b.api('GET', '/api/v2/file/stats', { token: b.adminToken })).body).toMatchObject({ files: 1, dirs: 1, bytes: content.length });
  });

  it('a replace on B, a move on A and a delete on B are seen by the other broker; no chunk is left', async () => {
    expect((await upload(a, '/cfg/', 'app.conf', 'one')).status).toBe(200);
    expectError(await upload(b, '/cfg/', 'app.conf', 'two'), 409, 'file_exists');
    expect((await upload(b, '/cfg/', 'app.conf', 'two', true)).status).toBe(200);
    expect((await download(a, '/cfg/app.conf')).body.toString()).toBe('two');
    const moved = await a.api('PATCH', '/api/v2/file', { token: a.adminToken, body: { path: '/cfg', newPath: '/etc-files/cfg' } });
    expect(moved.status, JSON.stringify(moved.body)).toBe(200);
    expect((await download(b, '/etc-files/cfg/app.conf')).body.toString()).toBe('two');
    expect((await download(b, '/cfg/app.conf')).status).toBe(404);
    expectError(await b.api('DELETE', '/api/v2/file', { token: b.adminToken, body: { path: '/etc-files' } }), 409, 'folder_not_empty');
    expect((await b.api('DELETE', '/api/v2/file', { token: b.adminToken, body: { path: '/etc-files', recursive: true } })).status).toBe(200);
    expect((await download(a, '/etc-files/cfg/app.conf')).status).toBe(404);
    expect((await b.api('DELETE', '/api/v2/file', { token: b.adminToken, body: { path: '/shared/image.bin' } })).status).toBe(200);
    expect(await chunkRows()).toBe(0);
  });

  it('of two uploads of one new path at once, on A and on B, one is stored and the other refused; nothing half-written stays', async () => {
    const [x, y] = await Promise.all([upload(a, '/race/', 'f.txt', 'from A'), upload(b, '/race/', 'f.txt', 'from B')]);
    expect([x.status, y.status].sort()).toEqual([200, 409]);
    const winner = x.status === 200 ? 'from A' : 'from B';
    expect((await download(b, '/race/f.txt')).body.toString()).toBe(winner);
    expect(await chunkRows()).toBe(1);
  });

  it('refuses paths that leave the store or use the reserved staging name, and stores nothing', async () => {
    expectError(await upload(b, '/../outside/', 'x.txt', 'x'), 400, 'invalid_path');
    expectError(await upload(b, '/.fleet-staging/', 'x.txt', 'x'), 400, 'invalid_path');
    expect((await download(a, '/a/../b')).status).toBe(400);
    expect((await upload(a, '/plain/', 'f.txt', 'x')).status).toBe(200);
    expectError(await upload(b, '/plain/f.txt/', 'g.txt', 'x'), 400, 'not_a_folder');
    const moved = await b.api('PATCH', '/api/v2/file', { token: b.adminToken, body: { path: '/plain', newPath: '/plain/inner/' } });
    expectError(moved, 400, 'invalid_path');
    const paths = (await a.broker.services.store.db.selectFrom('file_nodes').select('path').execute()).map((r) => r.path);
    expect(paths.filter((p) => p.includes('..') || p.includes('staging') || p.includes('g.txt'))).toEqual([]);
  });

  it('cuts a download whose stored content no longer matches its sha256', async () => {
    const content = crypto.randomBytes(CHUNK_BYTES + 10);
    expect((await upload(a, '/tamper/', 'x.bin', content)).status).toBe(200);
    const db = a.broker.services.store.db;
    const bad = Buffer.from(crypto.randomBytes(10));
    await db.updateTable('file_chunks').set({ data: bad }).where('seq', '=', 1).execute();
    const got = await download(b, '/tamper/x.bin');
    expect(got.error ?? (got.body.length !== content.length ? 'short' : undefined)).toBeDefined();
    expect(sha256(got.body)).not.toBe(sha256(content));
  });

  it('takes the folder to upload into without its trailing "/", as qbee-cli sends it', async () => {
    const r = await upload(a, '/bare-db', 'x.txt', 'x');
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toEqual({ file: 'x.txt', path: '/bare-db/' });
    expect((await download(b, '/bare-db/x.txt')).status).toBe(200);
  });
});
