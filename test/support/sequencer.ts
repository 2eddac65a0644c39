/**
 * The order the suite's files are handed to its workers (`sequence.sequencer` in vitest.config.ts).
 *
 * vitest's own order runs one project after another (by name: the API files, then the browser
 * files, then end-to-end, then unit): the browser files would all start together and fill every
 * worker, and the long end-to-end files would start late and end the run alone. This keeps vitest's
 * order within each project (failed first, then longest first when it has timings from an earlier
 * run, the files' order otherwise) and spreads each project's files evenly over the run instead:
 * the browser files run beside the API and end-to-end files, and the unit files, many and short,
 * come last to fill the workers as the longer files end.
 *
 * A project with `isolate: false` goes out in runs of RUN files: vitest keeps a worker (and the
 * imports in it) for the next file only when the next file handed out is of the same project; one
 * file of each project in turn would start nearly every file in a fresh worker, importing the broker
 * afresh. A file of an isolated project starts a fresh worker anyway: those go out one at a time,
 * as do the browser files (ONE_AT_A_TIME).
 *
 * Each project's files (or runs) are placed from the start of the run at even steps, a browser file
 * first where they tie: the run starts with one browser file (the longest, when vitest has timings)
 * beside the first runs of the other projects. Placed from the middles of their steps, the browser
 * files, having the smallest steps, came first: the three longest ran together as the run's only
 * files for its first 97 s (2026-11-27), pages waiting with a core idle.
 */
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Projects whose files are short enough to be the run's last, filling the gaps. */
const LAST = new Set(['unit', 'unit-isolated']);

/**
 * Projects whose files go out one at a time even though they share imports: a browser file draws
 * pages in the run's one Chromium, the heaviest on CPU of all the files, and runs best beside files
 * that wait (a run of them would have three at once; the page waits are 15 s).
 */
const ONE_AT_A_TIME = new Set(['browser']);

/**
 * Files of a shared (`isolate: false`) project handed out one after another: with three workers a
 * run starts about three fresh workers, so runs of 8 start about one file in three afresh, and
 * still put every project beside the others through the run.
 */
export const RUN = 8;

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
        .flatMap((list) => {
          const size = list[0].project.config.isolate === false && !ONE_AT_A_TIME.has(list[0].project.name) ? RUN : 1;
          const runs = Math.ceil(list.length / size);
          const first = ONE_AT_A_TIME.has(list[0].project.name) ? 0 : 1;
          return Array.from({ length: runs }, (_, index) => ({ specs: list.slice(index * size, (index + 1) * size), at: index / runs, first }));
        })
        .sort((a, b) => a.at - b.at || a.first - b.first)
        .flatMap(({ specs }) => specs);
    const lists = [...byProject.entries()];
    return [
      ...spread(lists.filter(([name]) => !LAST.has(name)).map(([, list]) => list)),
      ...spread(lists.filter(([name]) => LAST.has(name)).map(([, list]) => list)),
    ];
  }
}
