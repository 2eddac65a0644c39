import type { TestSpecification, Vitest } from 'vitest/node';
import { describe, expect, it } from 'vitest';
import SpreadSequencer, { RUN } from './sequencer.js';

/** A file of `project` as the sequencer sees it: no timings or sizes from an earlier run. */
function spec(project: string, file: string, isolate = true): TestSpecification {
  return {
    project: { name: project, config: { sequence: { groupOrder: 0 }, isolate } },
    moduleId: `/repo/${file}`,
  } as unknown as TestSpecification;
}

const ctx = {
  config: { root: '/repo', shard: undefined },
  cache: { getFileTestResults: () => undefined, getFileStats: () => undefined },
} as unknown as Vitest;

const order = async (specs: TestSpecification[]) => (await new SpreadSequencer(ctx, {}).sort(specs)).map((s) => `${s.project.name}:${s.moduleId.slice(6)}`);

/** As on a fresh clone: no timings, each file's size (`sizes`, by "project:file"). */
const withSizes = (sizes: Record<string, number>) =>
  ({
    config: { root: '/repo', shard: undefined },
    cache: { getFileTestResults: () => undefined, getFileStats: (key: string) => (key in sizes ? { size: sizes[key] } : undefined) },
  }) as unknown as Vitest;

describe('the suite sequencer', () => {
  it('spreads each project over the run instead of running project after project, the unit files last', async () => {
    const specs = [
      spec('unit', 'u1'),
      spec('unit', 'u2'),
      ...['a1', 'a2', 'a3', 'a4'].map((f) => spec('api-sqlite', f)),
      ...['b1', 'b2'].map((f) => spec('browser', f)),
      ...['e1', 'e2'].map((f) => spec('e2e', f)),
    ];
    expect(await order(specs)).toEqual([
      'browser:b1',
      'api-sqlite:a1',
      'e2e:e1',
      'api-sqlite:a2',
      'browser:b2',
      'api-sqlite:a3',
      'e2e:e2',
      'api-sqlite:a4',
      'unit:u1',
      'unit:u2',
    ]);
  });

  it("hands out a shared project's files in runs, so that a worker keeps its imports for the next file", async () => {
    const shared = Array.from({ length: 2 * RUN + 4 }, (_, i) => spec('api-sqlite', `a${String(i).padStart(2, '0')}`, false));
    const specs = [
      ...shared,
      spec('e2e', 'e1'),
      spec('e2e', 'e2'),
      spec('unit', 'u1', false),
      spec('unit', 'u2', false),
      spec('unit-isolated', 'i1'),
      spec('unit-isolated', 'i2'),
    ];
    const names = shared.map((s) => `api-sqlite:${s.moduleId.slice(6)}`);
    // Three runs of the shared project at 0, 1/3 and 2/3 of the run, the isolated files one by one
    // at 0 and 1/2; the unit files last, spread the same way.
    expect(await order(specs)).toEqual([
      ...names.slice(0, RUN),
      'e2e:e1',
      ...names.slice(RUN, 2 * RUN),
      'e2e:e2',
      ...names.slice(2 * RUN),
      'unit:u1',
      'unit:u2',
      'unit-isolated:i1',
      'unit-isolated:i2',
    ]);
  });

  it('starts the run with one browser file beside the first runs of the other projects, not browser files only', async () => {
    // As in the suite: many browser files (the smallest steps), fewer runs of the shared projects.
    const api = Array.from({ length: 2 * RUN }, (_, i) => spec('api-sqlite', `a${String(i).padStart(2, '0')}`, false));
    const e2e = Array.from({ length: RUN }, (_, i) => spec('e2e', `e${i}`, false));
    const browser = Array.from({ length: 10 }, (_, i) => spec('browser', `b${i}`, false));
    const sorted = await order([...api, ...e2e, ...browser]);
    expect(sorted[0]).toBe('browser:b0');
    // The next browser file only after the first run of each shared project.
    expect(sorted.slice(0, 2 * RUN + 1).filter((s) => s.startsWith('browser:'))).toEqual(['browser:b0']);
    expect(sorted.slice(1, 2 * RUN + 1).sort()).toEqual([...api.slice(0, RUN), ...e2e].map((s) => `${s.project.name}:${s.moduleId.slice(6)}`).sort());
  });

  it('hands out the browser files one at a time though they share imports', async () => {
    const shared = Array.from({ length: 2 * RUN }, (_, i) => spec('api-sqlite', `a${String(i).padStart(2, '0')}`, false));
    const names = shared.map((s) => `api-sqlite:${s.moduleId.slice(6)}`);
    const browser = ['b1', 'b2', 'b3'].map((f) => spec('browser', f, false));
    expect(await order([...shared, ...browser])).toEqual(['browser:b1', ...names.slice(0, RUN), 'browser:b2', ...names.slice(RUN), 'browser:b3']);
  });

  it("hands out at most two browser files in a row, between the other projects' runs, in the suite's shape", async () => {
    // The suite's counts: 41 browser files, 49 shared API files on each database, 35 end-to-end
    // files, two isolated API files on each, the unit files; sizes falling as on a fresh clone.
    const sizes: Record<string, number> = {};
    const project = (name: string, count: number, isolate: boolean) =>
      Array.from({ length: count }, (_, i) => {
        const file = `${name}-${String(i).padStart(2, '0')}`;
        sizes[`${name}:${file}`] = 30_000 - 500 * i;
        return spec(name, file, isolate);
      });
    const specs = [
      ...project('api-postgres', 49, false),
      ...project('api-postgres-isolated', 2, true),
      ...project('api-sqlite', 49, false),
      ...project('api-sqlite-isolated', 2, true),
      ...project('browser', 41, false),
      ...project('e2e', 35, false),
      ...project('unit', 160, false),
      ...project('unit-isolated', 4, true),
    ];
    const sorted = (await new SpreadSequencer(withSizes(sizes), {}).sort(specs)).map((s) => s.project.name);
    expect(sorted).toHaveLength(specs.length);
    const streaks: number[] = [];
    let streak = 0;
    for (const name of [...sorted, 'end']) {
      if (name === 'browser') {
        streak += 1;
      } else if (streak) {
        streaks.push(streak);
        streak = 0;
      }
    }
    // Before, the browser files went out in bursts of three to five (their steps being the smallest,
    // 1/41 against a run's 1/7), three running at once while the API runs waited behind them.
    expect(Math.max(...streaks)).toBe(2);
    // Spread through the run: the browser files are not left to its end.
    expect(sorted.slice(0, Math.floor(sorted.length / 2)).filter((name) => name === 'browser').length).toBeGreaterThanOrEqual(15);
  });

  it("places each project's files by their share of its size (a fresh clone has no timings), not by their count", async () => {
    const sizes = { 'x:x1': 900, 'x:x2': 50, 'x:x3': 50, 'y:y1': 100, 'y:y2': 100, 'y:y3': 100, 'y:y4': 100 };
    const specs = [spec('x', 'x1'), spec('x', 'x2'), spec('x', 'x3'), ...['y1', 'y2', 'y3', 'y4'].map((f) => spec('y', f))];
    // x1 is 90% of x: x's next file goes out when y is 90% through, not a third of the way.
    expect((await new SpreadSequencer(withSizes(sizes), {}).sort(specs)).map((s) => s.moduleId.slice(6))).toEqual(['x1', 'y1', 'y2', 'y3', 'y4', 'x2', 'x3']);
  });

  it('orders each project longest first by the committed expected durations on a fresh clone, so a long file does not end the run', async () => {
    // Sizes say little of a file's time: the longest file is among the smallest.
    const sizes: Record<string, number> = { 'api-sqlite:a0': 9000, 'api-sqlite:a1': 8000, 'unit:long': 1000 };
    const unit = Array.from({ length: 12 }, (_, i) => {
      sizes[`unit:u${String(i).padStart(2, '0')}`] = 5000 - 100 * i;
      return spec('unit', `u${String(i).padStart(2, '0')}`, false);
    });
    const specs = [spec('api-sqlite', 'a0', false), spec('api-sqlite', 'a1', false), ...unit, spec('unit', 'long', false)];
    const expected = { a0: 5, a1: 40, long: 23, ...Object.fromEntries(unit.map((s) => [s.moduleId.slice(6), 0.5])) };
    const sorted = (await new SpreadSequencer(withSizes(sizes), expected).sort(specs)).map((s) => s.moduleId.slice(6));
    // By size (before) the 23 s file, the smallest, went out last, alone at the run's end.
    expect(sorted.indexOf('long')).toBe(2);
    expect(sorted.slice(0, 2)).toEqual(['a1', 'a0']);
    expect(sorted.at(-1)).not.toBe('long');
  });

  it('orders the files missing from the table by their size, scaled to the seconds of those in it', async () => {
    const sizes = { 'x:known': 1000, 'x:big': 40_000, 'x:small': 100, 'x:nostats': 0 };
    const specs = ['small', 'known', 'big', 'nostats'].map((f) => spec('x', f));
    // 1 s a thousand bytes: big is expected at 40 s, small at 0.1 s, the file with no stats last.
    const sorted = (await new SpreadSequencer(withSizes(sizes), { known: 1 }).sort(specs)).map((s) => s.moduleId.slice(6));
    expect(sorted).toEqual(['big', 'known', 'small', 'nostats']);
  });

  it('keeps every file once, each project in its own order', async () => {
    const specs = Array.from({ length: 40 }, (_, i) => spec(['unit', 'api-postgres', 'browser', 'e2e'][i % 4], `f${String(i).padStart(2, '0')}`, i % 2 === 0));
    const sorted = await order(specs);
    expect([...sorted].sort()).toEqual(specs.map((s) => `${s.project.name}:${s.moduleId.slice(6)}`).sort());
    for (const project of ['unit', 'api-postgres', 'browser', 'e2e']) {
      const mine = sorted.filter((s) => s.startsWith(`${project}:`));
      expect(mine).toEqual([...mine].sort());
    }
  });
});
