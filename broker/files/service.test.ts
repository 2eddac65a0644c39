import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { STAGING_DIR } from './paths.js';
import { FilesService } from './service.js';

const dirs: string[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true });
});

function dataDir(): string {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'files-unit-'));
  dirs.push(d);
  return d;
}

function service(dir: string, quota = 1024 * 1024): FilesService {
  return new FilesService({ dataDir: dir, fileQuotaBytes: quota }, pino({ level: 'silent' }));
}

describe('FilesService start', () => {
  it('empties the staging folder left by an interrupted upload and counts only the store', async () => {
    const dir = dataDir();
    const store = path.join(dir, 'files');
    fs.mkdirSync(path.join(store, STAGING_DIR), { recursive: true });
    fs.writeFileSync(path.join(store, STAGING_DIR, 'crashed.part'), Buffer.alloc(5000));
    fs.mkdirSync(path.join(store, 'configs', 'sub'), { recursive: true });
    fs.writeFileSync(path.join(store, 'configs', 'app.conf'), 'abc');
    fs.writeFileSync(path.join(store, 'configs', 'sub', 'b.bin'), Buffer.alloc(100));
    fs.symlinkSync('/etc', path.join(store, 'outside'));

    const files = service(dir);
    await files.init();
    expect(fs.readdirSync(path.join(store, STAGING_DIR))).toEqual([]);
    expect(files.stats()).toMatchObject({ files: 2, dirs: 2, bytes: 103 });
    const listed = await files.list({ sort_field: 'name', sort_direction: 'asc', offset: 0, items_per_page: 50 });
    expect(listed.items.map((i) => i.name)).toEqual(['configs']);
    await files.close();
  });

  it('stages an upload and renames it into place, leaving the staging folder empty', async () => {
    const dir = dataDir();
    const files = service(dir);
    await files.init();
    const received = path.join(dir, 'received.tmp');
    fs.writeFileSync(received, 'content');
    const r = await files.upload('/a/', { path: received, originalName: 'x.txt', size: 7 }, false);
    expect(r).toEqual({ file: 'x.txt', path: '/a/' });
    expect(fs.readFileSync(path.join(dir, 'files', 'a', 'x.txt'), 'utf8')).toBe('content');
    expect(fs.readdirSync(path.join(dir, 'files', STAGING_DIR))).toEqual([]);
    expect(fs.existsSync(received)).toBe(false);
    expect(files.stats()).toMatchObject({ files: 1, dirs: 1, bytes: 7 });
  });

  it('keeps the quota across concurrent uploads', async () => {
    const dir = dataDir();
    const files = service(dir, 2000);
    await files.init();
    const uploads = [0, 1, 2].map((i) => {
      const received = path.join(dir, `r${i}.tmp`);
      fs.writeFileSync(received, Buffer.alloc(900));
      return files.upload('/q/', { path: received, originalName: `f${i}`, size: 900 }, false).then(
        () => 'ok',
        (err: { code?: string }) => err.code,
      );
    });
    const results = await Promise.all(uploads);
    expect(results.filter((r) => r === 'ok')).toHaveLength(2);
    expect(results.filter((r) => r === 'quota_exceeded')).toHaveLength(1);
    expect(files.stats().bytes).toBe(1800);
  });
});
