import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Channel } from '../../shared/mux.js';
import type { ChannelControl } from '../../shared/protocol.js';
import { readTar, writeTar, type TarEntry } from '../../shared/tar.js';
import { muxPair } from '../../test/support/mux-pair.js';
import { handleChannel } from './index.js';

let dir: string;
beforeAll(() => {
  dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-archive-')));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

let cleanup: (() => void) | undefined;
afterEach(() => {
  cleanup?.();
  cleanup = undefined;
});

async function open(params: { direction: 'upload' | 'download'; path: string; allowed?: string[] }): Promise<Channel> {
  const { broker, close } = await muxPair((ch) => handleChannel(ch, { stateDir: os.tmpdir(), log: () => {} }), 256 * 1024);
  cleanup = close;
  const { channel } = await broker.open('copy', { ...params, format: 'tar.gz' });
  return channel;
}

function result(channel: Channel): Promise<Extract<ChannelControl, { type: 'result' }>> {
  return new Promise((resolve) => channel.on('control', (m: ChannelControl) => m.type === 'result' && resolve(m)));
}

async function upload(target: string, entries: TarEntry[], allowed?: string[]) {
  const channel = await open({ direction: 'upload', path: target, ...(allowed ? { allowed } : {}) });
  const answer = result(channel);
  channel.write(zlib.gzipSync(writeTar(entries)));
  return answer;
}

describe('copies as gzip tar', () => {
  it('archives a directory tree, keeping its top name, and leaves out a symlink leading outside it', async () => {
    const tree = path.join(dir, 'tree');
    fs.mkdirSync(path.join(tree, 'sub'), { recursive: true });
    fs.writeFileSync(path.join(tree, 'sub', 'f.txt'), 'f');
    fs.writeFileSync(path.join(dir, 'secret.txt'), 'secret');
    fs.symlinkSync(path.join(dir, 'secret.txt'), path.join(tree, 'out-link'));
    fs.symlinkSync('sub/f.txt', path.join(tree, 'in-link'));
    const channel = await open({ direction: 'download', path: tree });
    const parts: Buffer[] = [];
    channel.on('data', (d: Buffer) => parts.push(d));
    const ended = new Promise((r) => channel.once('end', r));
    const answer = result(channel);
    channel.end();
    await ended;
    expect(await answer).toMatchObject({ ok: true });
    const entries = readTar(zlib.gunzipSync(Buffer.concat(parts)));
    expect(entries.map((e) => `${e.type}:${e.name}${e.linkname ? `->${e.linkname}` : ''}`).sort()).toEqual([
      'directory:tree/',
      'directory:tree/sub/',
      'file:tree/sub/f.txt',
      'symlink:tree/in-link->sub/f.txt',
    ]);
  });

  it('refuses an entry climbing out of the destination and writes nothing outside it', async () => {
    const target = path.join(dir, 'dest-escape');
    fs.mkdirSync(target);
    const answer = await upload(target, [
      { name: 'ok.txt', type: 'file', mode: 0o644, data: Buffer.from('ok') },
      { name: '../escaped.txt', type: 'file', mode: 0o644, data: Buffer.from('pwned') },
    ]);
    expect(answer).toMatchObject({ ok: false });
    expect(answer.error).toMatch(/outside the destination/);
    expect(fs.existsSync(path.join(dir, 'escaped.txt'))).toBe(false);
  });

  it('refuses a symlink pointing outside, and a write through a link planted in the destination', async () => {
    const target = path.join(dir, 'dest-links');
    fs.mkdirSync(target);
    const viaArchive = await upload(target, [{ name: 'link', type: 'symlink', mode: 0o777, linkname: '/etc' }]);
    expect(viaArchive).toMatchObject({ ok: false });
    expect(fs.existsSync(path.join(target, 'link'))).toBe(false);

    fs.mkdirSync(path.join(dir, 'elsewhere'));
    fs.symlinkSync(path.join(dir, 'elsewhere'), path.join(target, 'planted'));
    const throughLink = await upload(target, [{ name: 'planted/x.txt', type: 'file', mode: 0o644, data: Buffer.from('x') }]);
    expect(throughLink).toMatchObject({ ok: false });
    expect(fs.existsSync(path.join(dir, 'elsewhere', 'x.txt'))).toBe(false);
  });

  it('extracts only under the directories a grant allows', async () => {
    const granted = path.join(dir, 'granted');
    fs.mkdirSync(granted);
    const channelRefused = await open({ direction: 'upload', path: path.join(dir, 'not-granted'), allowed: [granted] }).catch((e: Error) => e);
    expect(channelRefused).toBeInstanceOf(Error);
    const answer = await upload(
      path.join(granted, 'new-dir'),
      [
        { name: 'd/', type: 'directory', mode: 0o755 },
        { name: 'd/a.txt', type: 'file', mode: 0o4755, data: Buffer.from('a') },
      ],
      [granted],
    );
    expect(answer).toMatchObject({ ok: true, bytes: 1 });
    const written = path.join(granted, 'new-dir', 'a.txt');
    expect(fs.readFileSync(written, 'utf8')).toBe('a');
    // set-id bits in an archive are not carried onto the device
    expect(fs.statSync(written).mode & 0o7000).toBe(0);
  });
});
