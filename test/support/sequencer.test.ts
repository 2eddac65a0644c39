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

const order = async (specs: TestSpecification[]) => (await new SpreadSequencer(ctx).sort(specs)).map((s) => `${s.project.name}:${s.moduleId.slice(6)}`);

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
