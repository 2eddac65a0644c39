import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { PTY_INPUT_MAX, PtyInput } from './pty-input.js';

// A FIFO opened read-write and non-blocking stands in for the pty's master side: what the writer
// wrote can be read back in the same turn, and its buffer (64 KiB) fills like a pty's.
let dir: string;
let fd: number;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-pty-input-'));
  const fifo = path.join(dir, 'in');
  execFileSync('mkfifo', [fifo]);
  fd = fs.openSync(fifo, fs.constants.O_RDWR | fs.constants.O_NONBLOCK);
});
afterEach(() => {
  fs.closeSync(fd);
  fs.rmSync(dir, { recursive: true, force: true });
});

function readAll(): Buffer {
  const parts: Buffer[] = [];
  const buf = Buffer.alloc(64 * 1024);
  for (;;) {
    try {
      const n = fs.readSync(fd, buf);
      if (n === 0) break;
      parts.push(Buffer.from(buf.subarray(0, n)));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') break;
      throw err;
    }
  }
  return Buffer.concat(parts);
}

it('writes a keystroke in the turn it arrives, not through the thread pool', () => {
  const input = new PtyInput(fd);
  expect(input.write(Buffer.from('a'))).toBe(true);
  expect(readAll().toString()).toBe('a');
  expect(input.waiting).toBe(0);
});

it('keeps what a full pty does not take, in order, asks its caller to stop past the bound, and says when to go on', async () => {
  const input = new PtyInput(fd);
  const paste = Buffer.alloc(PTY_INPUT_MAX * 3);
  for (let i = 0; i < paste.length; i++) paste[i] = i % 251;
  const head = paste.subarray(0, 1000);
  const caller = Buffer.from(paste.subarray(1000));
  expect(input.write(head)).toBe(true);
  // The rest does not fit in the FIFO's buffer: the writer returns at once, holding the remainder.
  expect(input.write(caller)).toBe(false);
  expect(input.waiting).toBeGreaterThan(PTY_INPUT_MAX);
  caller.fill(0); // the writer copied what it holds: the caller's buffer is its own again
  const drained = new Promise<void>((resolve) => input.once('drain', resolve));
  const got: Buffer[] = [];
  while (input.waiting > 0) {
    got.push(readAll());
    await new Promise((r) => setTimeout(r, 5));
  }
  await drained;
  got.push(readAll());
  expect(Buffer.concat(got).equals(paste)).toBe(true);
});

it('stops writing once closed, and a failed write closes it without throwing', () => {
  const input = new PtyInput(fd);
  input.close();
  expect(input.write(Buffer.from('x'))).toBe(true);
  expect(readAll().length).toBe(0);
  const broken = new PtyInput(-1);
  const errors: Error[] = [];
  broken.on('error', (err) => errors.push(err));
  expect(broken.write(Buffer.from('x'))).toBe(true);
  expect(errors).toHaveLength(1);
  expect(broken.write(Buffer.from('y'))).toBe(true);
  expect(errors).toHaveLength(1);
});
