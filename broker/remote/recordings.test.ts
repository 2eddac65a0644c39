import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ConsoleRecorder, RECORD_BATCH_BYTES, RECORD_BATCH_MS, RECORD_WRITE_MS, RECORDING_BUFFER_MAX, recordingPath } from './recordings.js';

const silent = { warn: () => {} };
let dir: string;
const id = '33333333-3333-4333-8333-333333333333';

function fresh(): string {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'recordings-'));
  return dir;
}

afterEach(() => {
  vi.useRealTimers();
  fs.rmSync(dir, { recursive: true, force: true });
});

/** The recorder's clock and batch timer under the test's hand (the disk's callbacks stay real). */
const fakeClock = () => vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'performance'] });

const lines = (file: string) =>
  fs
    .readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));

describe('ConsoleRecorder', () => {
  it('holds at most RECORDING_BUFFER_MAX bytes for the disk and notes what a flood left out as a gap', async () => {
    const recorder = ConsoleRecorder.open(fresh(), id, { cols: 80, rows: 24 }, {}, silent);
    const chunk = Buffer.alloc(64 * 1024, 'y');
    // All at once, before the disk had a turn: the cap must hold.
    for (let i = 0; i < 64; i += 1) recorder.output(chunk);
    await recorder.close();
    const [header, ...events] = lines(recordingPath(dir, id)!);
    expect(header).toMatchObject({ version: 2, width: 80, height: 24 });
    const kept = events.filter((e) => e[1] === 'o').reduce((n, e) => n + e[2].length, 0);
    expect(kept).toBeLessThanOrEqual(RECORDING_BUFFER_MAX);
    const gap = events.find((e) => e[1] === 'm');
    expect(gap?.[2]).toMatch(/^gap: \d+ bytes not recorded$/);
    expect(kept + Number(/\d+/.exec(gap![2])![0])).toBe(64 * chunk.length);
  });

  it('calls for the end of the session instead of a gap when the recording is required', async () => {
    const recorder = ConsoleRecorder.open(fresh(), id, { cols: 80, rows: 24 }, {}, silent, true);
    let ended = 0;
    recorder.overflow = () => (ended += 1);
    const chunk = Buffer.alloc(64 * 1024, 'y');
    for (let i = 0; i < 64; i += 1) recorder.output(chunk);
    await recorder.close();
    expect(ended).toBe(1);
  });

  it('records output in batches stamped with their first byte, a resize and the end in their place', async () => {
    fakeClock();
    const recorder = ConsoleRecorder.open(fresh(), id, { cols: 80, rows: 24 }, {}, silent);
    vi.advanceTimersByTime(100);
    recorder.output(Buffer.from('a'));
    vi.advanceTimersByTime(5);
    recorder.output(Buffer.from('b'));
    recorder.resize(90, 30); // records what is held first
    vi.advanceTimersByTime(1);
    recorder.output(Buffer.from('c'));
    vi.advanceTimersByTime(RECORD_BATCH_MS); // the batch is due
    vi.advanceTimersByTime(4);
    recorder.output(Buffer.alloc(RECORD_BATCH_BYTES, 'x')); // a full batch goes at once
    vi.advanceTimersByTime(3);
    recorder.output(Buffer.from('d'));
    await recorder.close(); // records what is held
    expect(lines(recordingPath(dir, id)!).slice(1)).toEqual([
      [0.1, 'o', 'ab'],
      [0.105, 'r', '90x30'],
      [0.106, 'o', 'c'],
      [0.13, 'o', 'x'.repeat(RECORD_BATCH_BYTES)],
      [0.133, 'o', 'd'],
    ]);
  });

  it('writes typed echoes to the file once a second, each still its own event at its own time', async () => {
    fakeClock();
    const recorder = ConsoleRecorder.open(fresh(), id, { cols: 80, rows: 24 }, {}, silent);
    // Each write handed to the file stream is a write on the thread pool.
    const writes = [vi.spyOn(fs.WriteStream.prototype, 'write')];
    const written = () => writes.reduce((n, spy) => n + spy.mock.calls.length, 0);
    try {
      // 30 keystrokes' echoes, one every 100 ms (someone typing), for 3 s.
      for (let i = 0; i < 30; i += 1) {
        vi.advanceTimersByTime(100);
        recorder.output(Buffer.from(String.fromCharCode(97 + (i % 26))));
      }
      vi.advanceTimersByTime(RECORD_WRITE_MS);
      // The code before wrote each echo on its own, RECORD_BATCH_MS after it: 30 writes.
      expect(written()).toBeGreaterThan(0);
      expect(written()).toBeLessThanOrEqual(4);
      await recorder.close();
    } finally {
      for (const spy of writes) spy.mockRestore();
    }
    const events = lines(recordingPath(dir, id)!).slice(1);
    expect(events).toHaveLength(30);
    expect(events[0]).toEqual([0.1, 'o', 'a']);
    expect(events[29]).toEqual([3, 'o', 'd']);
  });

  it('copies what it holds: a buffer the caller reuses after output() leaves the recording as it was', async () => {
    const recorder = ConsoleRecorder.open(fresh(), id, { cols: 80, rows: 24 }, {}, silent);
    // As ssh2 and a socket may hand over views of one buffer they fill again.
    const reused = Buffer.alloc(8);
    for (const text of ['$ ls\r\n', 'a  b\r\n', '$ ']) {
      reused.fill(0);
      reused.write(text);
      recorder.output(reused.subarray(0, Buffer.byteLength(text)));
      reused.fill('Z');
    }
    await recorder.close();
    expect(
      lines(recordingPath(dir, id)!)
        .slice(1)
        .map((e) => e[2])
        .join(''),
    ).toBe('$ ls\r\na  b\r\n$ ');
  });

  it('applies the cap to batched output: a flood of small chunks keeps at most RECORDING_BUFFER_MAX and counts the rest as a gap', async () => {
    const recorder = ConsoleRecorder.open(fresh(), id, { cols: 80, rows: 24 }, {}, silent);
    const chunk = Buffer.alloc(100, 'y');
    const count = Math.ceil((4 * RECORDING_BUFFER_MAX) / chunk.length);
    for (let i = 0; i < count; i += 1) recorder.output(chunk);
    await recorder.close();
    const events = lines(recordingPath(dir, id)!).slice(1);
    const kept = events.filter((e) => e[1] === 'o').reduce((n, e) => n + e[2].length, 0);
    expect(kept).toBeLessThanOrEqual(RECORDING_BUFFER_MAX);
    const gaps = events.filter((e) => e[1] === 'm').map((e) => Number(/^gap: (\d+) bytes not recorded$/.exec(e[2])![1]));
    expect(kept + gaps.reduce((a, b) => a + b, 0)).toBe(count * chunk.length);
  });

  it('ends a required recording flooded by small chunks', async () => {
    const recorder = ConsoleRecorder.open(fresh(), id, { cols: 80, rows: 24 }, {}, silent, true);
    let ended = 0;
    recorder.overflow = () => (ended += 1);
    const chunk = Buffer.alloc(100, 'y');
    for (let sent = 0; sent < 4 * RECORDING_BUFFER_MAX; sent += chunk.length) recorder.output(chunk);
    await recorder.close();
    expect(ended).toBe(1);
  });

  it('records what it held when closed at once (a session ended abruptly loses nothing)', async () => {
    fakeClock(); // the batch is never due: only close records it
    const recorder = ConsoleRecorder.open(fresh(), id, { cols: 80, rows: 24 }, {}, silent);
    recorder.output(Buffer.from('last words'));
    recorder.output(Buffer.from('€').subarray(0, 2)); // cut off mid-character
    await recorder.close();
    recorder.output(Buffer.from('after the end'));
    expect(lines(recordingPath(dir, id)!).slice(1)).toEqual([[0, 'o', 'last words\ufffd']]);
  });

  it('keeps a character split across chunks whole', async () => {
    const recorder = ConsoleRecorder.open(fresh(), id, { cols: 80, rows: 24 }, {}, silent);
    const euro = Buffer.from('€');
    recorder.output(euro.subarray(0, 1));
    recorder.output(euro.subarray(1));
    await recorder.close();
    expect(
      lines(recordingPath(dir, id)!)
        .slice(1)
        .map((e) => e[2])
        .join(''),
    ).toBe('€');
  });

  it('names files by session id only', () => {
    expect(recordingPath('/data', '../fleet.sqlite')).toBeUndefined();
    expect(recordingPath('/data', id)).toBe(path.join('/data', 'recordings', `${id}.cast`));
  });
});
