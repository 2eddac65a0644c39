import fs from 'node:fs';
import { Writable } from 'node:stream';
import { spawn, type IPty } from 'node-pty';
import { afterEach, expect, it } from 'vitest';
import { FIRST_READ_SIZE } from '../../shared/read-buffers.js';
import { readPtyIntoBuffers, writePtyRead } from './pty-reads.js';

let pty: IPty | undefined;
afterEach(() => {
  pty?.kill();
  pty = undefined;
});

/** `cat` in raw mode in a pty (no tty echo: what comes back is cat's), once it is ready. */
async function rawCat(): Promise<IPty> {
  const p = spawn('/bin/sh', ['-c', 'stty raw -echo; echo ready; exec cat'], { name: 'xterm', cols: 80, rows: 24, encoding: null });
  await new Promise<void>((resolve) => {
    let seen = '';
    const sub = p.onData((d) => {
      seen += d.toString();
      if (seen.includes('ready')) {
        sub.dispose();
        resolve();
      }
    });
  });
  return p;
}

const fdOf = (p: IPty) => (p as unknown as { fd: number }).fd;

/** Sends `key` and waits for it to come back; answers the views that brought it. */
async function roundTrip(p: IPty, key: string): Promise<Buffer[]> {
  const views: Buffer[] = [];
  let seen = '';
  await new Promise<void>((resolve) => {
    const sub = p.onData((d) => {
      views.push(d as unknown as Buffer);
      seen += d.toString();
      if (seen.includes(key)) {
        sub.dispose();
        resolve();
      }
    });
    fs.writeSync(fdOf(p), key);
  });
  return views;
}

it('reads a run of keystrokes into reused buffers, not a new buffer per echo', async () => {
  pty = await rawCat();
  const reads = readPtyIntoBuffers(pty);
  expect(reads).toBeDefined();
  const buffers = new Set<ArrayBufferLike>();
  let echoed = '';
  for (let i = 0; i < 200; i++) {
    const key = String.fromCharCode(97 + (i % 26));
    for (const view of await roundTrip(pty, key)) {
      buffers.add(view.buffer);
      echoed += view.toString();
    }
  }
  expect(echoed).toBe(Array.from({ length: 200 }, (_, i) => String.fromCharCode(97 + (i % 26))).join(''));
  // node-pty's own reads: a buffer per read, 200 here.
  expect(buffers.size).toBeLessThanOrEqual(2);
});

it('never reads into a buffer a view of which is still held, and reuses it once released', async () => {
  pty = await rawCat();
  const reads = readPtyIntoBuffers(pty)!;
  let held: { view: Buffer; release: (error?: unknown) => void } | undefined;
  const sub = pty.onData((d) => {
    if (!held) held = { view: d as unknown as Buffer, release: reads.hold()! };
  });
  await roundTrip(pty, 'A');
  sub.dispose();
  const { view, release } = held!;
  expect(view.toString()).toBe('A');
  const later = new Set<ArrayBufferLike>();
  for (const key of 'bcdefgh') for (const v of await roundTrip(pty, key)) later.add(v.buffer);
  expect(view.toString()).toBe('A');
  expect(later.has(view.buffer)).toBe(false);
  // Released, it goes back to the pool for a later read.
  const spares = reads.buffers.spares;
  release();
  expect(reads.buffers.spares).toBe(spares + 1);
});

it('reads nothing while paused, everything once resumed, and the end of the process', async () => {
  pty = await rawCat();
  readPtyIntoBuffers(pty);
  let seen = '';
  pty.onData((d) => (seen += d.toString()));
  const exited = new Promise<void>((resolve) => pty!.onExit(() => resolve()));
  pty.pause();
  // Typed until the pty takes no more: cat echoes, nobody reads, the echo fills the pty's output
  // buffer, cat waits on its write and the input fills in turn.
  let typed = 0;
  for (;;) {
    try {
      typed += fs.writeSync(fdOf(pty), 'x'.repeat(1024));
    } catch {
      break;
    }
  }
  await new Promise((r) => setTimeout(r, 200));
  expect(typed).toBeGreaterThan(1024);
  expect(seen).toBe('');
  pty.resume();
  await expect.poll(() => seen.length, { timeout: 10_000 }).toBe(typed);
  pty.kill('SIGTERM');
  await exited;
});

it('copies what waits behind other writes to a peer that gives no credit: one read buffer held, not one per read', async () => {
  pty = await rawCat();
  const reads = readPtyIntoBuffers(pty)!;
  // A channel whose peer never credits: its first write never completes, every later one queues.
  const held: Buffer[] = [];
  const stalled = new Writable({ highWaterMark: 1024 * 1024, write: () => {} });
  const write = stalled.write.bind(stalled) as (chunk: Buffer, callback?: () => void) => boolean;
  stalled.write = ((chunk: Buffer, callback?: () => void) => (held.push(chunk), write(chunk, callback))) as typeof stalled.write;
  pty.onData((d) => writePtyRead(stalled, d as unknown as Buffer, reads));
  for (let i = 0; i < 300; i++) await roundTrip(pty, String.fromCharCode(97 + (i % 26)));
  expect(Buffer.concat(held).toString()).toBe(Array.from({ length: 300 }, (_, i) => String.fromCharCode(97 + (i % 26))).join(''));
  // Views of a read buffer (FIRST_READ_SIZE each) among what the channel holds: the first write's alone.
  expect(held.filter((b) => b.buffer.byteLength === FIRST_READ_SIZE)).toHaveLength(1);
});
