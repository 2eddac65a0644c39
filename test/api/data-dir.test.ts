/**
 * DATA_DIR holds the database (JWT secret, bootstrap keys), the file store and mail with sign-in
 * links: private to the broker's user, and emptied of what interrupted uploads left behind.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

const modeOf = (p: string) => fs.statSync(p).mode & 0o777;

let t: TestBroker;
let dataDir: string;

beforeAll(async () => {
  // An existing DATA_DIR as a default umask leaves it: world-readable, with a leftover upload.
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-datadir-'));
  fs.chmodSync(dataDir, 0o755);
  fs.mkdirSync(path.join(dataDir, 'tmp'), { mode: 0o755 });
  fs.writeFileSync(path.join(dataDir, 'tmp', 'a1b2c3-interrupted-upload'), 'half a file', { mode: 0o644 });
  fs.writeFileSync(path.join(dataDir, 'fleet.sqlite'), '', { mode: 0o644 });
  fs.chmodSync(path.join(dataDir, 'fleet.sqlite'), 0o644);
  t = await startTestBroker({ env: { DATA_DIR: dataDir } });
});
afterAll(async () => {
  await t?.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

describe('the data directory', () => {
  it('is tightened to 0700 at start, with the database files 0600', async () => {
    expect(modeOf(dataDir)).toBe(0o700);
    if (t.database === 'sqlite') {
      for (const file of ['fleet.sqlite', 'fleet.sqlite-wal', 'fleet.sqlite-shm']) expect(modeOf(path.join(dataDir, file)), file).toBe(0o600);
    }
    expect(modeOf(path.join(dataDir, 'files'))).toBe(0o700);
    expect(modeOf(path.join(dataDir, 'tmp'))).toBe(0o700);
  });

  it('drops what an interrupted upload left in tmp', () => {
    expect(fs.readdirSync(path.join(dataDir, 'tmp'))).toEqual([]);
  });

  it('keeps stored files 0600, folders 0700, and mail in the outbox private', async () => {
    const form = new FormData();
    form.append('path', '/');
    form.append('file', new Blob(['secret config']), 'app.conf');
    expect((await t.api('POST', '/api/v2/file', { token: t.adminToken, body: form })).status).toBeLessThan(300);
    expect(modeOf(path.join(dataDir, 'files', 'app.conf'))).toBe(0o600);
    expect((await t.api('POST', '/api/v2/file/createdir', { token: t.adminToken, body: { path: '/', name: 'configs' } })).status).toBeLessThan(300);
    expect(modeOf(path.join(dataDir, 'files', 'configs'))).toBe(0o700);

    expect((await t.api('POST', '/api/v2/password/forgot', { body: { email: 'admin@example.com' } })).status).toBe(202);
    const outbox = path.join(dataDir, 'outbox');
    await eventually(() => fs.existsSync(outbox) && fs.readdirSync(outbox).length > 0, 20_000, 'the reset mail in the outbox');
    expect(modeOf(outbox)).toBe(0o700);
    for (const mail of fs.readdirSync(outbox)) expect(modeOf(path.join(outbox, mail))).toBe(0o600);
  });
});
