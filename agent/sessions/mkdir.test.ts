import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeDirectory } from './mkdir.js';

let work: string;
let root: string;
let outside: string;

beforeAll(() => {
  work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-mkdir-')));
  root = path.join(work, 'granted');
  outside = path.join(work, 'outside');
  fs.mkdirSync(root);
  fs.mkdirSync(outside);
});

afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

describe('makeDirectory', () => {
  it('makes a directory within the grant with exactly the mode asked, whatever the umask', async () => {
    const old = process.umask(0o077);
    try {
      expect(await makeDirectory(path.join(root, 'made'), 0o750, [root])).toBe(path.join(root, 'made'));
      expect(await makeDirectory(path.join(root, 'made', 'deeper'), undefined, [root])).toBe(path.join(root, 'made', 'deeper'));
    } finally {
      process.umask(old);
    }
    expect(fs.statSync(path.join(root, 'made')).mode & 0o7777).toBe(0o750);
    expect(fs.statSync(path.join(root, 'made', 'deeper')).mode & 0o7777).toBe(0o755);
  });

  it('refuses a path outside the grant, and one through a planted symlink leading out of it', async () => {
    await expect(makeDirectory(path.join(outside, 'x'), 0o755, [root])).rejects.toMatchObject({ code: 'path_outside_grant' });
    fs.symlinkSync(outside, path.join(root, 'escape'));
    await expect(makeDirectory(path.join(root, 'escape', 'x'), 0o755, [root])).rejects.toMatchObject({ code: 'symlink_escape' });
    expect(fs.readdirSync(outside)).toEqual([]);
  });

  it('never follows a planted symlink in the last component: it exists, and what it points to is untouched', async () => {
    fs.symlinkSync(path.join(outside, 'target'), path.join(root, 'dangling'));
    await expect(makeDirectory(path.join(root, 'dangling'), 0o777, [root])).rejects.toMatchObject({ code: 'exists' });
    expect(fs.existsSync(path.join(outside, 'target'))).toBe(false);
    fs.symlinkSync(outside, path.join(root, 'to-dir'));
    await expect(makeDirectory(path.join(root, 'to-dir'), 0o777, [root])).rejects.toMatchObject({ code: 'exists' });
    expect(fs.statSync(outside).mode & 0o777).not.toBe(0o777);
  });

  it('refuses an existing directory, a missing parent, the root, a bad mode and a relative path', async () => {
    await expect(makeDirectory(root, 0o755, [work])).rejects.toMatchObject({ code: 'exists' });
    await expect(makeDirectory(path.join(root, 'no', 'such'), 0o755, [root])).rejects.toMatchObject({ code: 'not_found' });
    await expect(makeDirectory('/', 0o755)).rejects.toMatchObject({ code: 'not_a_file' });
    await expect(makeDirectory(path.join(root, 'm'), 0o4755, [root])).rejects.toMatchObject({ code: 'invalid_request' });
    await expect(makeDirectory('relative/dir', 0o755, [root])).rejects.toMatchObject({ code: 'invalid_request' });
    expect(fs.existsSync(path.join(root, 'm'))).toBe(false);
  });
});
