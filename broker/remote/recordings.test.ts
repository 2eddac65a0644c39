import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ConsoleRecorder, RECORDING_BUFFER_MAX, recordingPath } from './recordings.js';

const silent = { warn: () => {} };
let dir: string;
const id = '33333333-3333-4333-8333-333333333333';

function fresh(): string {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'recordings-'));
  return dir;
}

afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

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
