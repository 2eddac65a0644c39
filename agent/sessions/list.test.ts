import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_LIST_BYTES, MAX_LIST_ENTRIES } from '../../shared/protocol.js';
import { listDirectory } from './list.js';

let work: string;

beforeAll(() => {
  work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-list-')));
});

afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

describe('listDirectory', () => {
  it('reports what lstat sees: a symlink to a folder is a link, a fifo is other, never followed', async () => {
    const dir = path.join(work, 'kinds');
    fs.mkdirSync(path.join(dir, 'folder'), { recursive: true });
    fs.writeFileSync(path.join(dir, 'file'), 'abc');
    fs.symlinkSync('/etc', path.join(dir, 'etc-link'));
    execFileSync('mkfifo', [path.join(dir, 'pipe')]);
    const listing = await listDirectory(dir, [dir]);
    expect(listing.entries.map((e) => [e.name, e.type, e.size])).toEqual([
      ['folder', 'dir', 0],
      ['etc-link', 'symlink', 0],
      ['file', 'file', 3],
      ['pipe', 'other', 0],
    ]);
    expect(listing.truncated).toBe(false);
  });

  it('a grant root that is itself a symlink lists what it leads to; a link inside leading out is refused', async () => {
    const real = path.join(work, 'real');
    fs.mkdirSync(real);
    fs.writeFileSync(path.join(real, 'inside.txt'), '');
    fs.symlinkSync(real, path.join(work, 'alias'));
    fs.symlinkSync(work, path.join(real, 'out'));
    const listing = await listDirectory(path.join(work, 'alias'), [path.join(work, 'alias')]);
    expect(listing.path).toBe(real);
    expect(listing.entries.map((e) => e.name)).toEqual(['inside.txt', 'out']);
    await expect(listDirectory(path.join(work, 'alias', 'out'), [path.join(work, 'alias')])).rejects.toMatchObject({ code: 'symlink_escape' });
    await expect(listDirectory(`${real}/../`, [real])).rejects.toMatchObject({ code: 'path_outside_grant' });
    await expect(listDirectory('relative', [real])).rejects.toMatchObject({ code: 'invalid_request' });
  });

  it('stops at its byte bound before its entry bound, and says so', async () => {
    const dir = path.join(work, 'long-names');
    fs.mkdirSync(dir);
    const count = Math.min(MAX_LIST_ENTRIES - 1, Math.ceil(MAX_LIST_BYTES / 250) + 50);
    for (let i = 0; i < count; i++) fs.writeFileSync(path.join(dir, `${String(i).padStart(4, '0')}${'n'.repeat(240)}`), '');
    const listing = await listDirectory(dir);
    expect(listing.truncated).toBe(true);
    expect(listing.entries.length).toBeLessThan(count);
    expect(Buffer.byteLength(JSON.stringify(listing.entries))).toBeLessThanOrEqual(MAX_LIST_BYTES);
  });
});
