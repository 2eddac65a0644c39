/**
 * Where a whole run's time went, from vitest's JSON report (`test/artifacts/vitest-report.json` in
 * CI, or `--reporter=json --outputFile=…`):
 *
 *   node --import tsx test/support/suite-report.ts test/artifacts/vitest-report.json [workers]
 *
 * Prints each kind of file's file-seconds (a file's first test's start to its last test's end, as the
 * report has it: its imports and its `beforeAll` before the first test are not in it), how many files
 * ran at once through the run (and how many of them browser files), the run's last files, and the
 * longest files and tests. The report names files, not projects: a file of both API projects is
 * counted twice under "api".
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** One file's entry in vitest's JSON report (what these scripts read of it). */
export interface FileResult {
  name: string;
  startTime: number;
  endTime: number;
  status: string;
  assertionResults: { fullName: string; duration?: number | null; status: string }[];
}

/** vitest's JSON report, as written by its `json` reporter. */
export interface Report {
  numTotalTests: number;
  testResults: FileResult[];
}

export function readReport(file: string): Report {
  return JSON.parse(fs.readFileSync(file, 'utf8')) as Report;
}

export type Kind = 'browser' | 'e2e' | 'api' | 'unit';

export function kindOf(file: string): Kind {
  if (file.includes('/test/browser/')) return 'browser';
  if (file.includes('/test/e2e/')) return 'e2e';
  if (file.includes('/test/api/') || file.includes('/test/compat/')) return 'api';
  return 'unit';
}

/** Seconds of each `step` from the run's start with the number of files running (all, browser). */
export function concurrency(files: FileResult[], step: number): { at: number; all: number; browser: number }[] {
  const start = Math.min(...files.map((f) => f.startTime));
  const end = Math.max(...files.map((f) => f.endTime));
  const rows: { at: number; all: number; browser: number }[] = [];
  for (let t = start; t < end; t += step * 1000) {
    let all = 0;
    let browser = 0;
    for (const f of files) {
      // The share of this step the file ran in.
      const overlap = Math.max(0, Math.min(f.endTime, t + step * 1000) - Math.max(f.startTime, t)) / (step * 1000);
      all += overlap;
      if (kindOf(f.name) === 'browser') browser += overlap;
    }
    rows.push({ at: (t - start) / 1000, all, browser });
  }
  return rows;
}

function main(): void {
  const [reportPath, workersArg] = process.argv.slice(2);
  if (!reportPath) throw new Error('usage: suite-report.ts <vitest JSON report> [workers]');
  const workers = Number(workersArg ?? 3);
  const report = readReport(reportPath);
  const files = report.testResults.filter((f) => f.assertionResults.length > 0);
  const start = Math.min(...files.map((f) => f.startTime));
  const end = Math.max(...files.map((f) => f.endTime));
  const seconds = (f: FileResult) => (f.endTime - f.startTime) / 1000;
  const short = (name: string) => name.replace(/^.*?\/(test|broker|agent|cli|shared|web-console)\//, '$1/');
  const wall = (end - start) / 1000;
  const total = files.reduce((sum, f) => sum + seconds(f), 0);
  console.log(
    `${files.length} files, ${report.numTotalTests} tests; first test to last: ${wall.toFixed(0)} s; file-seconds ${total.toFixed(0)} (${(total / wall).toFixed(2)} files at once on average)`,
  );

  console.log('\nfile-seconds by kind (files; first start, last end, seconds from the first test)');
  for (const kind of ['browser', 'e2e', 'api', 'unit'] as Kind[]) {
    const mine = files.filter((f) => kindOf(f.name) === kind);
    if (!mine.length) continue;
    const sum = mine.reduce((s, f) => s + seconds(f), 0);
    const first = (Math.min(...mine.map((f) => f.startTime)) - start) / 1000;
    const last = (Math.max(...mine.map((f) => f.endTime)) - start) / 1000;
    console.log(`  ${kind.padEnd(8)} ${sum.toFixed(0).padStart(6)} s  (${mine.length} files; ${first.toFixed(0)}–${last.toFixed(0)} s)`);
  }

  const step = 30;
  console.log(`\nfiles running, mean over each ${step} s (of ${workers} workers; b = of them browser files)`);
  let idle = 0;
  for (const row of concurrency(files, step)) {
    idle += Math.max(0, workers - row.all) * step;
    console.log(`  ${row.at.toFixed(0).padStart(5)} s  ${row.all.toFixed(2)}  b ${row.browser.toFixed(2)}  ${'#'.repeat(Math.round(row.all * 10))}`);
  }
  console.log(`worker-seconds outside any file's tests: ${idle.toFixed(0)} (imports, set-up and tear-down, waiting for the next file, the tail)`);

  console.log('\nthe last files to end');
  for (const f of [...files].sort((a, b) => b.endTime - a.endTime).slice(0, 8)) {
    console.log(`  ${((f.startTime - start) / 1000).toFixed(0).padStart(5)}–${((f.endTime - start) / 1000).toFixed(0).padEnd(5)} s  ${short(f.name)}`);
  }
  console.log('\nthe longest files');
  for (const f of [...files].sort((a, b) => seconds(b) - seconds(a)).slice(0, 25)) {
    console.log(`  ${seconds(f).toFixed(1).padStart(6)} s  from ${((f.startTime - start) / 1000).toFixed(0).padStart(4)} s  ${short(f.name)}`);
  }
  console.log('\nthe longest tests');
  const tests = files.flatMap((f) => f.assertionResults.map((a) => ({ file: short(f.name), name: a.fullName, duration: (a.duration ?? 0) / 1000 })));
  for (const t of tests.sort((a, b) => b.duration - a.duration).slice(0, 25))
    console.log(`  ${t.duration.toFixed(1).padStart(6)} s  ${t.file}: ${t.name.slice(0, 110)}`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main();
