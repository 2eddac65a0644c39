import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { openStore, type Store } from '../db/database.js';
import { DomainError } from '../errors.js';
import { CHUNK_BYTES, DbFilesService } from './db-store.js';
import type { ListQuery } from './store.js';

let store: Store;
let dir: string;
let files: DbFilesService;

beforeEach(async () => {
  store = await openStore('sqlite::memory:');
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-dbfiles-'));
  files = new DbFilesService(store, { fileQuotaBytes: 4 * CHUNK_BYTES });
});
afterEach(async () => {
  await store.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function put(folder: string, name: string, content: Buffer | string, replace = false) {
  const received = path.join(dir, crypto.randomUUID());
  fs.writeFileSync(received, content);
  return files.upload(folder, { path: received, originalName: name, size: fs.statSync(received).size }, replace);
}

async function read(p: string): Promise<Buffer> {
  const d = await files.download(p);
  const parts: Buffer[] = [];
  for await (const chunk of d.stream) parts.push(chunk as Buffer);
  return Buffer.concat(parts);
}

const listing = (p: string, extra: Partial<ListQuery> = {}) =>
  files.list({ path: p, sort_field: 'name', sort_direction: 'asc', offset: 0, items_per_page: 100, ...extra });

async function refusal(p: Promise<unknown>): Promise<DomainError> {
  try {
    await p;
  } catch (err) {
    return err as DomainError;
  }
  throw new Error('expected a refusal');
}

describe('DbFilesService', () => {
  it('moves a folder with everything below it, and leaves a sibling sharing its name prefix alone', async () => {
    await put('/a/deep/', 'x.txt', 'x');
    await put('/ab/', 'y.txt', 'y');
    await files.move('/a', { newPath: '/moved/a2' });
    expect((await read('/moved/a2/deep/x.txt')).toString()).toBe('x');
    expect((await read('/ab/y.txt')).toString()).toBe('y');
    expect((await listing('/moved/a2/')).items.map((e) => e.path)).toEqual(['/moved/a2/deep']);
    expect((await refusal(files.download('/a/deep/x.txt'))).kind).toBe('not_found');
    const rows = await store.db.selectFrom('file_nodes').select(['path', 'parent']).orderBy('path').execute();
    expect(rows).toEqual([
      { path: '/ab', parent: '/' },
      { path: '/ab/y.txt', parent: '/ab' },
      { path: '/moved', parent: '/' },
      { path: '/moved/a2', parent: '/moved' },
      { path: '/moved/a2/deep', parent: '/moved/a2' },
      { path: '/moved/a2/deep/x.txt', parent: '/moved/a2/deep' },
    ]);
  });

  it('deletes a folder recursively with its chunks, and nothing of a sibling sharing its prefix', async () => {
    await put('/a/', 'big.bin', crypto.randomBytes(CHUNK_BYTES + 1));
    await put('/ab/', 'keep.bin', crypto.randomBytes(10));
    expect((await refusal(files.remove('/a', false))).kind).toBe('conflict');
    await files.remove('/a', true);
    expect(await store.db.selectFrom('file_chunks').select('seq').execute()).toHaveLength(1);
    expect((await read('/ab/keep.bin')).length).toBe(10);
    expect(await files.stats()).toMatchObject({ files: 1, dirs: 1, bytes: 10 });
  });

  it('counts the quota over everything stored, and a replacement only by its growth', async () => {
    await put('/q/', 'one.bin', crypto.randomBytes(3 * CHUNK_BYTES));
    const over = await refusal(put('/q/', 'two.bin', crypto.randomBytes(CHUNK_BYTES + 1)));
    expect(over.kind).toBe('too_large');
    expect(over.code).toBe('quota_exceeded');
    await put('/q/', 'one.bin', crypto.randomBytes(4 * CHUNK_BYTES), true);
    expect(await store.db.selectFrom('file_chunks').select('seq').execute()).toHaveLength(4);
    expect((await files.stats()).bytes).toBe(4 * CHUNK_BYTES);
  });

  it('searches the whole store by name and keeps the digest of each file', async () => {
    await put('/s/one/', 'app.conf', 'a');
    await put('/s/two/', 'app.conf.bak', 'b');
    const found = await files.list({ search: 'APP', sort_field: 'path', sort_direction: 'asc', offset: 0, items_per_page: 10 });
    expect(found.items.map((e) => e.path)).toEqual(['/s/one/app.conf', '/s/two/app.conf.bak']);
    expect(found.items[0].sha256).toBe(crypto.createHash('sha256').update('a').digest('hex'));
    expect((await files.metadata('/s/one/app.conf')).mime).toBe('text/plain');
  });

  it('a file in the way of a folder is refused, and nothing is written', async () => {
    await put('/f/', 'plain', 'x');
    expect((await refusal(put('/f/plain/', 'y.txt', 'y'))).code).toBe('not_a_folder');
    expect((await refusal(files.createDir('/f/plain', 'sub'))).code).toBe('not_a_folder');
    expect((await refusal(files.move('/f/plain', { newPath: '/f/plain/inside' }))).kind).toBe('invalid');
    expect(await store.db.selectFrom('file_nodes').select('path').orderBy('path').execute()).toEqual([{ path: '/f' }, { path: '/f/plain' }]);
  });
});
