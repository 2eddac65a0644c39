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
 * Each project's files (or runs) are placed from the start of the run by their share of the
 * project's expected time (durations from an earlier run when vitest has them; on a fresh clone, as
 * in CI, the committed table of expected seconds, support/durations.json, made from a whole run's
 * report by support/durations.ts, and the sizes of files not in it), longest first, a browser
 * file first where they tie: the run starts with one browser
 * file (the largest or longest) beside the first runs of the other projects. The browser files are
 * then merged between the other projects' runs, at most BROWSER_IN_A_ROW at a time, those left at
 * the end between the unit files' runs. Placed by count at even steps, the browser files (41, the
 * smallest steps) went out in bursts of three to five between pairs of API runs: three browser
 * files at once on two cores for a while, then none (2026-11-27, ninth round).
 */
import { relative, sep } from 'node:path';
import { BaseSequencer, type TestSpecification, type Vitest } from 'vitest/node';
import { readDurations } from './durations.js';

/** Projects whose files are short enough to be the run's last, filling the gaps. */
const LAST = new Set(['unit', 'unit-isolated']);

/**
 * Projects whose files go out one at a time even though they share imports: a browser file draws
 * pages in the run's one Chromium, the heaviest on CPU of all the files, and runs best beside files
 * that wait. They are merged between the other projects' runs by their share of their project's
 * time, at most BROWSER_IN_A_ROW of them in a row: about one or two browser files running at once,
 * never three.
 */
const ONE_AT_A_TIME = new Set(['browser']);

/**
 * Browser files handed out one after another at most: two, so that a worker that ends one keeps its
 * imports for the next (vitest keeps a worker when the next file handed out is of its project), and
 * the third worker is on another project's files.
 */
export const BROWSER_IN_A_ROW = 2;

/**
 * Files of a shared (`isolate: false`) project handed out one after another: with three workers a
 * run starts about three fresh workers, so runs of 8 start about one file in three afresh, and
 * still put every project beside the others through the run.
 */
export const RUN = 8;

interface Item {
  specs: TestSpecification[];
  /** Where the item starts within its project: the share of the project's weight before it, 0 to 1. */
  at: number;
  first: number;
}

export default class SpreadSequencer extends BaseSequencer {
  /** Expected seconds by file (support/durations.json), for when vitest has no timings of its own. */
  private readonly expected: Record<string, number>;

  constructor(ctx: Vitest, expected: Record<string, number> = readDurations()) {
    super(ctx);
    this.expected = expected;
  }

  /**
   * What a file is expected to take, relative to the other files of its project: its duration in an
   * earlier run when vitest has one for every file of the project (`cached`: vitest has ordered the
   * files by it already). Else, as on a fresh clone (CI has no timings), its expected seconds from
   * the committed table, a file not in it by its size in bytes scaled by the seconds per byte of
   * those of its project that are; with none of them in the table, the sizes alone (a larger file
   * has more tests).
   */
  private weights(list: TestSpecification[]): { weights: number[]; cached: boolean } {
    const key = (spec: TestSpecification) => `${spec.project.name}:${relative(this.ctx.config.root, spec.moduleId)}`;
    const durations = list.map((spec) => this.ctx.cache.getFileTestResults(key(spec))?.duration);
    if (durations.every((d) => d !== undefined && d > 0)) return { weights: durations as number[], cached: true };
    const sizes = list.map((spec) => Math.max(1, this.ctx.cache.getFileStats(key(spec))?.size ?? 1));
    const expected = list.map((spec) => this.expected[relative(this.ctx.config.root, spec.moduleId).split(sep).join('/')]);
    let seconds = 0;
    let bytes = 0;
    expected.forEach((s, i) => {
      if (s === undefined) return;
      seconds += s;
      bytes += sizes[i];
    });
    if (!bytes) return { weights: sizes, cached: false };
    return { weights: expected.map((s, i) => (s !== undefined ? s : (sizes[i] * seconds) / bytes)), cached: false };
  }

  /**
   * A project's files as items (one file, or a run of RUN for a shared project), each placed at its
   * share of the project's weight; longest first, so that the long files start early in the run
   * and each project's last files, those that end the run, are its shortest.
   */
  private items(files: TestSpecification[]): Item[] {
    const name = files[0].project.name;
    const size = files[0].project.config.isolate === false && !ONE_AT_A_TIME.has(name) ? RUN : 1;
    const { weights: unordered, cached } = this.weights(files);
    // With vitest's own timings the files are in vitest's order already (failed first, then longest).
    const order = files.map((_, i) => i);
    if (!cached) order.sort((a, b) => unordered[b] - unordered[a] || a - b);
    const list = order.map((i) => files[i]);
    const weights = order.map((i) => unordered[i]);
    const total = weights.reduce((a, b) => a + b, 0);
    const items: Item[] = [];
    let before = 0;
    for (let index = 0; index < list.length; index += size) {
      items.push({ specs: list.slice(index, index + size), at: before / total, first: ONE_AT_A_TIME.has(name) ? 0 : 1 });
      before += weights.slice(index, index + size).reduce((a, b) => a + b, 0);
    }
    return items;
  }

  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files);
    const byProject = new Map<string, TestSpecification[]>();
    for (const spec of sorted) {
      const list = byProject.get(spec.project.name) ?? [];
      list.push(spec);
      byProject.set(spec.project.name, list);
    }
    const byShare = (a: Item, b: Item) => a.at - b.at || a.first - b.first;
    // The other projects' items by their share; before each, the one-at-a-time files whose share has
    // come, at most BROWSER_IN_A_ROW of them. Those whose share is still to come after the last item
    // go on between the items of the next part (the unit files), all due at once.
    const spread = (projects: TestSpecification[][], carried: Item[]): { out: TestSpecification[]; left: Item[] } => {
      const others = projects.filter((list) => !ONE_AT_A_TIME.has(list[0].project.name)).flatMap((list) => this.items(list));
      const single = projects.filter((list) => ONE_AT_A_TIME.has(list[0].project.name)).flatMap((list) => this.items(list));
      others.sort(byShare);
      single.sort(byShare);
      single.unshift(...carried.map((item) => ({ ...item, at: 0 })));
      const out: TestSpecification[] = [];
      for (const item of others) {
        for (let n = 0; n < BROWSER_IN_A_ROW && single.length && single[0].at <= item.at; n++) out.push(...single.shift()!.specs);
        out.push(...item.specs);
      }
      return { out, left: single };
    };
    const lists = [...byProject.values()];
    const before = spread(
      lists.filter((list) => !LAST.has(list[0].project.name)),
      [],
    );
    const last = spread(
      lists.filter((list) => LAST.has(list[0].project.name)),
      before.left,
    );
    return [...before.out, ...last.out, ...last.left.flatMap((item) => item.specs)];
  }
}
