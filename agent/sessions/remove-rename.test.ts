import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { removeDirectory, removeFile, renameEntry } from './remove-rename.js';

let work: string;
let root: string;
let outside: string;

beforeEach(() => {
  work = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-remove-')));
  root = path.join(work, 'granted');
  outside = path.join(work, 'outside');
  fs.mkdirSync(root);
  fs.mkdirSync(outside);
  fs.writeFileSync(path.join(outside, 'secret'), 'keep');
});

afterEach(() => fs.rmSync(work, { recursive: true, force: true }));

describe('removeFile', () => {
  it('removes a file within the grant, and refuses a directory, a missing file and a path outside', async () => {
    fs.writeFileSync(path.join(root, 'f'), 'x');
    expect(await removeFile(path.join(root, 'f'), [root])).toBe(path.join(root, 'f'));
    expect(fs.existsSync(path.join(root, 'f'))).toBe(false);
    fs.mkdirSync(path.join(root, 'd'));
    await expect(removeFile(path.join(root, 'd'), [root])).rejects.toMatchObject({ code: 'not_a_file' });
    await expect(removeFile(path.join(root, 'gone'), [root])).rejects.toMatchObject({ code: 'not_found' });
    await expect(removeFile(path.join(outside, 'secret'), [root])).rejects.toMatchObject({ code: 'path_outside_grant' });
    expect(fs.readFileSync(path.join(outside, 'secret'), 'utf8')).toBe('keep');
  });

  it('removes a planted symlink itself, never what it points to, and refuses a path through a symlinked directory', async () => {
    fs.symlinkSync(path.join(outside, 'secret'), path.join(root, 'link'));
    await removeFile(path.join(root, 'link'), [root]);
    expect(fs.existsSync(path.join(root, 'link'))).toBe(false);
    expect(fs.readFileSync(path.join(outside, 'secret'), 'utf8')).toBe('keep');
    fs.symlinkSync(outside, path.join(root, 'escape'));
    await expect(removeFile(path.join(root, 'escape', 'secret'), [root])).rejects.toMatchObject({ code: 'symlink_escape' });
    expect(fs.readFileSync(path.join(outside, 'secret'), 'utf8')).toBe('keep');
  });
});

describe('removeDirectory', () => {
  it('removes an empty directory; refuses a full one, a file, and a symlink to a directory', async () => {
    fs.mkdirSync(path.join(root, 'empty'));
    await removeDirectory(path.join(root, 'empty'), [root]);
    expect(fs.existsSync(path.join(root, 'empty'))).toBe(false);
    fs.mkdirSync(path.join(root, 'full'));
    fs.writeFileSync(path.join(root, 'full', 'f'), 'x');
    await expect(removeDirectory(path.join(root, 'full'), [root])).rejects.toMatchObject({ code: 'io_error' });
    fs.writeFileSync(path.join(root, 'file'), 'x');
    await expect(removeDirectory(path.join(root, 'file'), [root])).rejects.toMatchObject({ code: 'not_a_directory' });
    fs.mkdirSync(path.join(outside, 'emptydir'));
    fs.symlinkSync(path.join(outside, 'emptydir'), path.join(root, 'dirlink'));
    await expect(removeDirectory(path.join(root, 'dirlink'), [root])).rejects.toMatchObject({ code: 'not_a_directory' });
    expect(fs.existsSync(path.join(outside, 'emptydir'))).toBe(true);
    await expect(removeDirectory(path.join(outside, 'emptydir'), [root])).rejects.toMatchObject({ code: 'path_outside_grant' });
  });
});

describe('renameEntry', () => {
  it('renames within the grant; refuses a target or a source outside it, and an existing target', async () => {
    fs.writeFileSync(path.join(root, 'a'), 'a');
    expect(await renameEntry(path.join(root, 'a'), path.join(root, 'b'), [root])).toBe(path.join(root, 'b'));
    expect(fs.readFileSync(path.join(root, 'b'), 'utf8')).toBe('a');
    await expect(renameEntry(path.join(root, 'b'), path.join(outside, 'b'), [root])).rejects.toMatchObject({ code: 'path_outside_grant' });
    expect(fs.existsSync(path.join(root, 'b'))).toBe(true);
    await expect(renameEntry(path.join(outside, 'secret'), path.join(root, 'stolen'), [root])).rejects.toMatchObject({ code: 'path_outside_grant' });
    expect(fs.existsSync(path.join(outside, 'secret'))).toBe(true);
    fs.writeFileSync(path.join(root, 'c'), 'c');
    await expect(renameEntry(path.join(root, 'b'), path.join(root, 'c'), [root])).rejects.toMatchObject({ code: 'exists' });
    expect(fs.readFileSync(path.join(root, 'c'), 'utf8')).toBe('c');
  });

  it('renames a symlink itself, and never into a symlinked directory leading out', async () => {
    fs.symlinkSync(path.join(outside, 'secret'), path.join(root, 'link'));
    await renameEntry(path.join(root, 'link'), path.join(root, 'moved'), [root]);
    expect(fs.lstatSync(path.join(root, 'moved')).isSymbolicLink()).toBe(true);
    expect(fs.readFileSync(path.join(outside, 'secret'), 'utf8')).toBe('keep');
    fs.symlinkSync(outside, path.join(root, 'escape'));
    fs.writeFileSync(path.join(root, 'f'), 'f');
    await expect(renameEntry(path.join(root, 'f'), path.join(root, 'escape', 'f'), [root])).rejects.toMatchObject({ code: 'symlink_escape' });
    expect(fs.existsSync(path.join(outside, 'f'))).toBe(false);
  });
});
