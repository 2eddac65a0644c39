/** The checked file helpers on a temp root: modes exact whatever the umask, set-id bits kept, messages in device paths. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { makeDirectories, readDeviceFile, writeFileAtomic } from './device-files.js';

let root: string;
afterEach(() => fs.rmSync(path.dirname(root), { recursive: true, force: true }));

function tempRoot(): string {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-fsutil-')));
  root = path.join(dir, 'root');
  fs.mkdirSync(root);
  return root;
}

function withUmask<T>(mask: number, fn: () => Promise<T>): Promise<T> {
  const before = process.umask(mask);
  return fn().finally(() => process.umask(before));
}

describe('fsutil', () => {
  it('gives new directories and files exactly their mode, whatever the umask', async () => {
    tempRoot();
    await withUmask(0o077, async () => {
      await makeDirectories(root, '/etc/app/conf.d', 0o755);
      await writeFileAtomic(root, '/etc/app/conf.d/app.conf', 'x\n', { mode: 0o644 });
    });
    for (const dir of ['etc', 'etc/app', 'etc/app/conf.d']) expect(fs.statSync(path.join(root, dir)).mode & 0o7777).toBe(0o755);
    expect(fs.statSync(path.join(root, 'etc/app/conf.d/app.conf')).mode & 0o7777).toBe(0o644);
  });

  it('keeps the mode of the file it replaces, set-id bits included', async () => {
    tempRoot();
    fs.mkdirSync(path.join(root, 'bin'));
    const tool = path.join(root, 'bin/tool');
    fs.writeFileSync(tool, 'old');
    fs.chmodSync(tool, 0o4750);
    await writeFileAtomic(root, '/bin/tool', 'new', { mode: 0o644 });
    expect(fs.readFileSync(tool, 'utf8')).toBe('new');
    expect(fs.statSync(tool).mode & 0o7777).toBe(0o4750);
  });

  it('reads with a cap, and says which device path it refused', async () => {
    tempRoot();
    fs.mkdirSync(path.join(root, 'etc'));
    fs.writeFileSync(path.join(root, 'etc/big'), Buffer.alloc(4096));
    await expect(readDeviceFile(root, '/etc/big', 1024)).rejects.toThrow('/etc/big is larger than 1024 bytes: refused');
    expect(await readDeviceFile(root, '/etc/missing')).toBeUndefined();
    fs.symlinkSync('/dev/zero', path.join(root, 'etc/zero'));
    await expect(readDeviceFile(root, '/etc/zero')).rejects.toThrow('/etc/zero is a symlink: refused');
    // an error of the system names the device path too, not the descriptor path the agent used
    const long = 'n'.repeat(300);
    const err = await writeFileAtomic(root, `/etc/${long}`, 'x').catch((e: Error) => e);
    expect(String(err)).toContain(`ENAMETOOLONG: name too long, lstat '/etc/${long}'`);
  });
});
