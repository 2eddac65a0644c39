import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { configDefaults, defineConfig } from 'vitest/config';
import SpreadSequencer from './test/support/sequencer.js';

// Consoles the tests open run login shells: give them an empty home, so the machine's own profile
// (version managers, slow rehashes, locks a killed shell leaves behind) neither slows nor hangs them.
const testHome = path.join(path.dirname(fileURLToPath(import.meta.url)), 'test', 'artifacts', 'home');
fs.mkdirSync(testHome, { recursive: true });

const api = ['test/api/**/*.test.ts', 'test/compat/**/*.test.ts'];

// Files that change what the whole process sees — module mocks (vi.mock), stubbed globals or
// environment, fake timers — run isolated: a process of their own, as vitest does by default. The
// others share their worker's imports (`isolate: false` below): a worker runs file after file and
// imports the broker, express, kysely, ssh2, pino and the rest once, not once per file (about 1 s
// of CPU each). What a test touches stays its own there too: each file starts its own broker (own
// data directory or PostgreSQL schema), closes what it opened, and restores what it spies on
// (vitest restores every spy after each file). A new file that mocks, stubs or fakes the clock
// belongs in this list.
const isolatedUnit = [
  'agent/sessions/console-unavailable.test.ts',
  'agent/sessions/copy-upload.test.ts',
  'broker/audit/writer.test.ts',
  'broker/cluster/membership.test.ts',
  'broker/remote/recordings.test.ts',
  'broker/remote/sessions.test.ts',
  'web-console/src/screens/console-link.test.ts',
];
const isolatedApi = ['test/api/agent-connections.test.ts', 'test/api/token-expiry.test.ts'];

// The projects that start test brokers on PostgreSQL: a broker's close drops its schema in the
// background, and this set-up drops, at the run's end, what is left of the run's schemas (and, at
// its start, those of runs killed before their end).
const pgSchemas = ['test/support/pg-schemas.ts'];

export default defineConfig({
  test: {
    // In CI a JSON report too, from which .ci/run prints the plain "N passed, N failed" line.
    reporters: process.env.CI ? ['default', ['json', { outputFile: 'test/artifacts/vitest-report.json' }]] : ['default'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Most tests wait on processes, sockets and databases rather than compute: three files at a time
    // (vitest's default on two cores is one) keeps the whole suite within its ten minutes.
    maxWorkers: 3,
    sequence: { sequencer: SpreadSequencer },
    env: { HOME: testHome },
    projects: [
      // The projects whose name ends in "-isolated" hold the files of isolatedUnit and isolatedApi;
      // `--project 'unit*'` runs both halves of the unit files.
      {
        extends: true,
        test: {
          name: 'unit',
          include: [
            'shared/**/*.test.ts',
            'cli/**/*.test.ts',
            'broker/**/*.test.ts',
            'agent/**/*.test.ts',
            'web-console/src/**/*.test.ts',
            'test/support/**/*.test.ts',
          ],
          exclude: [...configDefaults.exclude, ...isolatedUnit],
          isolate: false,
        },
      },
      { extends: true, test: { name: 'unit-isolated', include: isolatedUnit } },
      ...(['sqlite', 'postgres'] as const).flatMap((db) => [
        {
          extends: true as const,
          test: {
            name: `api-${db}`,
            include: api,
            exclude: [...configDefaults.exclude, ...isolatedApi],
            env: { FLEET_TEST_DB: db },
            isolate: false,
            ...(db === 'postgres' ? { globalSetup: pgSchemas } : {}),
          },
        },
        {
          extends: true as const,
          test: { name: `api-${db}-isolated`, include: isolatedApi, env: { FLEET_TEST_DB: db }, ...(db === 'postgres' ? { globalSetup: pgSchemas } : {}) },
        },
      ]),
      // Brokers in the test process, agents and the CLI in processes of their own: shared as the API files.
      {
        extends: true,
        test: { name: 'e2e', include: ['test/e2e/**/*.test.ts'], testTimeout: 120_000, hookTimeout: 120_000, isolate: false, globalSetup: pgSchemas },
      },
      // The browser files run beside the others, in the same three workers (the order the files are
      // handed out, test/support/sequencer.ts, spreads them over the run, one or two at a time).
      // The console is built once, before any browser file.
      {
        extends: true,
        test: {
          name: 'browser',
          include: ['test/browser/**/*.test.ts'],
          globalSetup: ['test/support/browser-build.ts'],
          // A page waits up to 15 s for what it is told to find (support/browser.ts); expect.poll's
          // own default, 1 s, is shorter than a loaded machine takes to draw a screen.
          expect: { poll: { timeout: 15_000 } },
          testTimeout: 120_000,
          hookTimeout: 180_000,
          // A worker that runs browser files one after another keeps its imports between them, and
          // so its Chromium (support/browser.ts); what a test touches stays its own: each file
          // starts its own broker (own data directory or schema), each test opens its own browser
          // context (own cookies, storage and cache). vitest runs a project with `isolate: false`
          // beside others only when they share one maxWorkers (all take the root's three here).
          isolate: false,
        },
      },
    ],
  },
});
