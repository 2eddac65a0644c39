import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { extractTree, humanBytes, parseRemote } from './commands/cp.js';
import { humanDuration } from './devices.js';
import { writeTar, type TarEntry } from '../shared/tar.js';

describe('fleet cp', () => {
  it('shows sizes, speeds and time left in human units', () => {
    expect(humanBytes(512)).toBe('512 B');
    expect(humanBytes(1536)).toBe('1.5 KiB');
    expect(humanBytes(25 * 1024 * 1024)).toBe('25 MiB');
    expect(humanDuration(7)).toBe('0:07');
    expect(humanDuration(125)).toBe('2:05');
    expect(humanDuration(3 * 3600 + 61)).toBe('3:01:01');
    expect(humanDuration(Infinity)).toBe('--:--');
  });

  it('reads device paths as absolute only', () => {
    expect(parseRemote('dev:/tmp')).toEqual({ device: 'dev', path: '/tmp' });
    expect(parseRemote('./local:file')).toBeUndefined();
    expect(() => parseRemote('dev:tmp/x')).toThrow(/paths on a device are absolute: write dev:\/tmp\/x/);
  });
});

describe('fleet cp -r from a device: extraction', () => {
  let dir: string;
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cp-extract-'));
  });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));
  const tar = (entries: TarEntry[]) =>
    (async function* () {
      yield writeTar(entries);
    })();

  it('writes the tree as the local path, with its modes', async () => {
    await extractTree(
      tar([
        { name: 'tree/', type: 'directory', mode: 0o750 },
        { name: 'tree/run.sh', type: 'file', mode: 0o755, data: Buffer.from('#!/bin/sh\n') },
        { name: 'tree/link', type: 'symlink', mode: 0o777, linkname: 'run.sh' },
      ]),
      path.join(dir, 'copy'),
    );
    expect(fs.statSync(path.join(dir, 'copy')).mode & 0o777).toBe(0o750);
    expect(fs.statSync(path.join(dir, 'copy', 'run.sh')).mode & 0o777).toBe(0o755);
    expect(fs.readlinkSync(path.join(dir, 'copy', 'link'))).toBe('run.sh');
  });

  it('refuses entries that would land outside the destination, and leaves out links leading out', async () => {
    const into = path.join(dir, 'into');
    fs.mkdirSync(into);
    await expect(
      extractTree(
        tar([
          { name: 'tree/', type: 'directory', mode: 0o755 },
          { name: '../escaped', type: 'file', mode: 0o644, data: Buffer.from('x') },
        ]),
        into,
      ),
    ).rejects.toThrow(/outside the copy/);
    expect(fs.existsSync(path.join(dir, 'escaped'))).toBe(false);
    await expect(
      extractTree(
        tar([
          { name: 'tree/', type: 'directory', mode: 0o755 },
          { name: 'tree/out', type: 'symlink', mode: 0o777, linkname: dir },
          { name: 'tree/out/planted', type: 'file', mode: 0o644, data: Buffer.from('x') },
        ]),
        into,
      ),
    ).rejects.toThrow(/outside the copy/);
    expect(fs.existsSync(path.join(into, 'tree', 'out'))).toBe(false);
    expect(fs.existsSync(path.join(dir, 'planted'))).toBe(false);
  });
});
