import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { Channel } from '../../shared/mux.js';
import { BULK_FRAME } from '../../shared/mux.js';
import { sessionPair } from '../../test/support/session-pair.js';
import { UPLOAD_FLUSH_EVERY, UPLOAD_QUEUE } from './copy.js';

const WINDOW = 256 * 1024;
const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');

let dir: string;
let cleanup: (() => void) | undefined;
beforeAll(() => {
  dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-upload-')));
});
afterEach(() => {
  vi.restoreAllMocks();
  cleanup?.();
  cleanup = undefined;
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

type FileHandle = fs.promises.FileHandle;

/** The prototype of every fs.promises FileHandle: the agent's file writes and flushes go through it. */
async function fileHandles(): Promise<FileHandle> {
  const handle = await fs.promises.open(path.join(dir, '.probe'), 'w');
  await handle.close();
  return Object.getPrototypeOf(handle) as FileHandle;
}

/** A disk that does not keep up: every file write waits until `flowing` is set; `writes` counts them. */
async function stalledDisk() {
  const proto = await fileHandles();
  const waiting: (() => void)[] = [];
  const disk = { writes: 0, flowing: false, bytes: 0 };
  for (const name of ['write', 'writev'] as const) {
    const original = proto[name] as (...args: unknown[]) => Promise<unknown>;
    vi.spyOn(proto, name).mockImplementation(async function (this: FileHandle, ...args: unknown[]) {
      disk.writes += 1;
      const first = args[0] as Buffer | Buffer[];
      disk.bytes += Array.isArray(first) ? first.reduce((n, b) => n + b.length, 0) : first.length;
      if (!disk.flowing) await new Promise<void>((resolve) => waiting.push(resolve));
      return original.apply(this, args);
    } as never);
  }
  return {
    disk,
    flow: () => {
      disk.flowing = true;
      for (const resolve of waiting.splice(0)) resolve();
    },
  };
}

/** What the broker side sent so far, once it stopped changing (the agent holds back the rest). */
async function settledBytesOut(channel: Channel): Promise<number> {
  let last = -1;
  while (channel.stats.bytesOut !== last) {
    last = channel.stats.bytesOut;
    await new Promise((r) => setTimeout(r, 300));
  }
  return last;
}

async function openUpload(name: string) {
  const p = await sessionPair(WINDOW);
  cleanup = p.close;
  const target = path.join(dir, name);
  const { channel } = await p.broker.open('copy', { direction: 'upload', path: target, checksum: false });
  const result = new Promise<any>((r) => channel.on('control', (m) => m.type === 'result' && r(m)));
  channel.resume();
  return { channel, target, result, agentSide: p.agentChannels[0] };
}

describe('uploads while the disk writes', () => {
  it("reads on while a file write runs: the channel's credit goes back to the broker, which sends on up to the upload's queue", async () => {
    const { disk, flow } = await stalledDisk();
    const { channel, target, result } = await openUpload('queued.bin');
    const content = crypto.randomBytes(4 * 1024 * 1024);
    channel.write(content);
    await expect.poll(() => disk.writes).toBe(1);
    // The first write waits on the disk; what the broker sent beyond it and the window was read on.
    await expect.poll(() => channel.stats.bytesOut - disk.bytes, { timeout: 10_000 }).toBeGreaterThanOrEqual(UPLOAD_QUEUE);
    expect(disk.writes).toBe(1);
    flow();
    channel.end();
    expect(await result).toMatchObject({ ok: true, bytes: content.length });
    expect(sha(fs.readFileSync(target))).toBe(sha(content));
    // The pieces waiting at each write went in one writev: a handful of writes, not one per frame.
    expect(disk.writes).toBeLessThan(content.length / BULK_FRAME);
  });

  it('holds at most its queue, one write and the window whatever the broker floods while the disk stalls, then writes it all', async () => {
    const { disk, flow } = await stalledDisk();
    const { channel, target, result, agentSide } = await openUpload('flooded.bin');
    const content = crypto.randomBytes(24 * 1024 * 1024);
    for (let at = 0; at < content.length; at += 1024 * 1024) channel.write(content.subarray(at, at + 1024 * 1024));
    await expect.poll(() => disk.writes).toBe(1);
    const sent = await settledBytesOut(channel);
    // Held at the agent: the write waiting on the disk, the queue read beyond it, the channel's window.
    expect(sent).toBeLessThanOrEqual(disk.bytes + UPLOAD_QUEUE + BULK_FRAME + WINDOW);
    expect(agentSide.readableLength).toBeLessThanOrEqual(WINDOW);
    expect(disk.writes).toBe(1);
    flow();
    channel.end();
    expect(await result).toMatchObject({ ok: true, bytes: content.length });
    expect(sha(fs.readFileSync(target))).toBe(sha(content));
  });
});

describe('uploads flushed as they are written', () => {
  it('flushes the file to disk while it is written, so the final fsync has little left', async () => {
    const proto = await fileHandles();
    const datasync = vi.spyOn(proto, 'datasync');
    const { channel, target, result } = await openUpload('flushed.bin');
    const content = crypto.randomBytes(3 * UPLOAD_FLUSH_EVERY);
    channel.end(content);
    expect(await result).toMatchObject({ ok: true, bytes: content.length });
    expect(datasync.mock.calls.length).toBeGreaterThanOrEqual(1);
    expect(sha(fs.readFileSync(target))).toBe(sha(content));
  });

  it('fails an upload whose flush failed (a later fsync need not report it again), leaving nothing behind', async () => {
    const proto = await fileHandles();
    vi.spyOn(proto, 'datasync').mockRejectedValue(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' }));
    const { channel, target, result } = await openUpload('unflushed.bin');
    channel.end(crypto.randomBytes(3 * UPLOAD_FLUSH_EVERY));
    expect(await result).toMatchObject({ ok: false, error: expect.stringMatching(/EIO/) });
    expect(fs.existsSync(target)).toBe(false);
    expect(fs.readdirSync(dir).filter((f) => f.endsWith('.fleet-upload'))).toEqual([]);
  });
});

describe('uploads the disk took only part of', () => {
  it('fails an upload whose last write took fewer bytes than given, leaving nothing behind', async () => {
    const proto = await fileHandles();
    const original = proto.writev as (...args: unknown[]) => Promise<{ bytesWritten: number; buffers: Buffer[] }>;
    vi.spyOn(proto, 'writev').mockImplementation(async function (this: FileHandle, ...args: unknown[]) {
      const done = await original.apply(this, args);
      return { ...done, bytesWritten: done.bytesWritten - 1 };
    } as never);
    const { channel, target, result } = await openUpload('short.bin');
    channel.end(crypto.randomBytes(64 * 1024));
    expect(await result).toMatchObject({ ok: false, error: expect.stringMatching(/wrote \d+ of the 65536 bytes/) });
    expect(fs.existsSync(target)).toBe(false);
    expect(fs.readdirSync(dir).filter((f) => f.endsWith('.fleet-upload'))).toEqual([]);
  });
});
