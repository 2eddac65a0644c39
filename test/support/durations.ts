/**
 * The suite's expected durations (test/support/durations.json), what the sequencer
 * (test/support/sequencer.ts) orders the files by when vitest has no timings of its own, as on a
 * fresh clone in CI. Made from a whole run's JSON report (`test/artifacts/vitest-report.json`,
 * written when CI is set):
 *
 *   CI=true npx vitest run
 *   node --import tsx test/support/durations.ts test/artifacts/vitest-report.json [root]
 *
 * Each file's seconds are its first test's start to its last test's end, as the report has them
 * (its imports and its `beforeAll` before the first test are not in them). A file of both API
 * projects is in the report twice, under the same name: the longer counts. Refresh the table when
 * files are added or change much; a file not in it is ordered by its size (sequencer.ts). The
 * report names files by absolute path in the checkout that ran; `root` is that checkout (by
 * default the directory the report's `test/artifacts` is in).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { readReport, type FileResult } from './suite-report.js';

export const DURATIONS_FILE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'durations.json');

/** What the table is made of: a file's name, its span, and whether it ran any test. */
type FileSpan = Pick<FileResult, 'name' | 'startTime' | 'endTime'> & { assertionResults: readonly unknown[] };

/** Each file's expected seconds (by its path from `root`), from a JSON report's results, keys sorted. */
export function durationsFrom(results: readonly FileSpan[], root: string): Record<string, number> {
  const seconds = new Map<string, number>();
  for (const f of results) {
    if (!f.assertionResults.length) continue;
    const file = path.relative(root, f.name).split(path.sep).join('/');
    const s = Math.max(0.1, Math.round((f.endTime - f.startTime) / 100) / 10);
    seconds.set(file, Math.max(s, seconds.get(file) ?? 0));
  }
  return Object.fromEntries([...seconds].sort(([a], [b]) => (a < b ? -1 : 1)));
}

/** The committed table (empty when absent or unreadable: the sequencer falls back to sizes). */
export function readDurations(file = DURATIONS_FILE): Record<string, number> {
  try {
    const table = JSON.parse(fs.readFileSync(file, 'utf8')) as unknown;
    if (!table || typeof table !== 'object' || Array.isArray(table)) return {};
    return Object.fromEntries(Object.entries(table).filter(([, s]) => typeof s === 'number' && Number.isFinite(s) && s > 0));
  } catch {
    return {};
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [reportPath, rootArg] = process.argv.slice(2);
  if (!reportPath) throw new Error('usage: durations.ts <vitest JSON report> [root]');
  const report = readReport(reportPath);
  const root = path.resolve(rootArg ?? path.join(path.dirname(reportPath), '..', '..'));
  const table = durationsFrom(report.testResults, root);
  fs.writeFileSync(DURATIONS_FILE, `${JSON.stringify(table, null, 2)}\n`);
  console.log(
    `${Object.keys(table).length} files, ${Object.values(table)
      .reduce((a, b) => a + b, 0)
      .toFixed(0)} file-seconds -> ${path.relative(process.cwd(), DURATIONS_FILE)}`,
  );
}
