/**
 * The order the suite's files are handed to its workers (`sequence.sequencer` in vitest.config.ts).
 *
 * vitest's own order runs one project after another (by name: the API files, then the browser
 * files, then end-to-end, then unit): the browser files would all start together and fill every
 * worker, and the long end-to-end files would start late and end the run alone. This keeps vitest's
 * order within each project (failed first, then longest first when it has timings from an earlier
 * run, the files' order otherwise) and spreads each project's files evenly over the run instead:
 * the browser files run beside the API and end-to-end files, about one at a time, and the unit
 * files, many and short, come last to fill the workers as the longer files end.
 */
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Projects whose files are short enough to be the run's last, filling the gaps. */
const LAST = new Set(['unit']);

export default class SpreadSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const byProject = new Map<string, TestSpecification[]>();
    for (const spec of sorted) {
      const list = byProject.get(spec.project.name) ?? [];
      list.push(spec);
      byProject.set(spec.project.name, list);
    }
    const spread = (projects: TestSpecification[][]): TestSpecification[] =>
      projects
        .flatMap((list) => list.map((spec, index) => ({ spec, at: (index + 0.5) / list.length })))
        .sort((a, b) => a.at - b.at)
        .map(({ spec }) => spec);
    const lists = [...byProject.entries()];
    return [
      ...spread(lists.filter(([name]) => !LAST.has(name)).map(([, list]) => list)),
      ...spread(lists.filter(([name]) => LAST.has(name)).map(([, list]) => list)),
    ];
  }
}
