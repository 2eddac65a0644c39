/**
 * AGENT_NODE_FLAGS keep V8's optimising compiler out of the agent's one-off bursts: an inventory of a
 * device with about a thousand Debian packages (this is what tiered parseDpkgStatus up under Node's
 * defaults, and the compiler's code then stayed in the idle agent's RSS), while sustained work still
 * gets optimised.
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { AGENT_NODE_FLAGS } from './build.js';

const ITEMS = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'inventory-items.ts');

/** Runs `code` (an ES module importing parseDpkgStatus) under the agent's flags; V8's --trace-opt lines. */
function traceOpt(code: string): string {
  const run = spawnSync(
    process.execPath,
    [
      ...AGENT_NODE_FLAGS.split(' '),
      '--trace-opt',
      '--import',
      'tsx',
      '--input-type=module',
      '-e',
      `import { parseDpkgStatus } from ${JSON.stringify(ITEMS)};\n${code}`,
    ],
    { encoding: 'utf8' },
  );
  expect(run.stderr).toBe('');
  expect(run.status).toBe(0);
  return run.stdout;
}

/** A dpkg status file of `n` installed packages, about 900 bytes each as on a Debian system. */
const STATUS = `const paragraph = (i) => [
  'Package: package-' + i, 'Status: install ok installed', 'Priority: optional', 'Section: libs',
  'Installed-Size: ' + (i * 7), 'Maintainer: Debian Maintainers <debian@example.org>', 'Architecture: amd64',
  'Version: 1.' + i + '-2', 'Depends: libc6 (>= 2.34), libssl3 (>= 3.0.0)',
  'Description: package number ' + i, ...Array.from({ length: 10 }, (_, l) => ' line ' + l + ' of the long description of this package, as dpkg keeps it'),
].join('\\n');
const status = (n) => Array.from({ length: n }, (_, i) => paragraph(i)).join('\\n\\n') + '\\n';`;

it('an inventory of 1000 packages runs without optimising the parser', () => {
  const out = traceOpt(
    `${STATUS}\nconst packages = parseDpkgStatus(status(1000));\nif (packages.length !== 1000) throw new Error(String(packages.length));\nJSON.stringify(packages);`,
  );
  expect(out).not.toMatch(/marking .*parseDpkgStatus/);
});

it('sustained work is still optimised', () => {
  const out = traceOpt(`${STATUS}\nconst text = status(1000);\nfor (let i = 0; i < 30; i++) parseDpkgStatus(text);`);
  expect(out).toMatch(/marking .*parseDpkgStatus/);
});
