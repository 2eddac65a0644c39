/**
 * `npm run build:cli [-- --out <dir>]`: the `fleet` command-line client as users install it, needing
 * only Node.js >= 20 (no tsx, no node_modules, nothing native):
 *
 *   <out>/fleet.mjs                    cli/main.ts: the entry (esbuild, ESM), which reads a plain
 *                                      `fleet devices` line itself and loads commander for the rest
 *   <out>/chunks/*.mjs                 the command line parser (cli/program.ts, commander), each
 *                                      command's code and its dependencies (ws, cli-progress), loaded
 *                                      by fleet.mjs only when needed
 *   <out>/fleet.inputs.json            the source files it was built from (bin/fleet.js runs the build
 *                                      only while none of them is newer)
 *   <out>/fleet-cli-<version>.tar.gz   bin/fleet (the launcher) and lib/fleet-cli/ (fleet.mjs and
 *                                      chunks/), for a prefix
 *   <out>/install-cli.sh               the installer the broker serves at GET /install-cli.sh
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const HERE = path.join(ROOT, 'cli', 'packaging');
export const CLI_BUNDLE = 'fleet.mjs';
export const CLI_INPUTS = 'fleet.inputs.json';
/** The directory of the bundle's chunks, beside it. */
export const CLI_CHUNKS = 'chunks';
export const CLI_INSTALLER = 'install-cli.sh';
/** The tarball names GET /install/{artifact} serves for the CLI. */
export const CLI_TARBALL = /^fleet-cli-[0-9][A-Za-z0-9.+~-]{0,63}\.tar\.gz$/;
/** Code of the broker and the agent, and native packages: their presence in the bundle fails the build. */
const FORBIDDEN =
  /(^|\/)(broker|agent|web-console)\/|node_modules\/(express|pg|better-sqlite3|kysely|node-pty|bufferutil|utf-8-validate|ssh2|cpu-features|tsx)\//;

export interface CliBuild {
  version: string;
  outDir: string;
  bundle: string;
  tarball: string;
  installScript: string;
}

/** The launcher: CommonJS (no package.json beside it says otherwise), checks the Node.js version. */
const LAUNCHER = `#!/usr/bin/env node
// The fleet command-line client (installed from a fleet broker's install-cli.sh).
'use strict';
if (Number(process.versions.node.split('.')[0]) < 20) {
  process.stderr.write('fleet: needs Node.js 20 or later (this is ' + process.version + ').\\n');
  process.exit(1);
}
// Node.js 22+ keeps the compiled bundle in its compile cache: later starts skip parsing it.
const { enableCompileCache } = require('node:module');
if (typeof enableCompileCache === 'function') {
  try {
    enableCompileCache();
  } catch {
    // no cache directory: start without it
  }
}
import('../lib/fleet-cli/fleet.mjs');
`;

export async function buildCli(outDir = path.join(ROOT, 'dist', 'cli'), options: { version?: string } = {}): Promise<CliBuild> {
  const version = options.version ?? (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
  if (!/^[0-9][A-Za-z0-9.+~-]{0,63}$/.test(version)) throw new Error(`version "${version}" is not usable in a file name`);
  fs.mkdirSync(outDir, { recursive: true });
  // Built beside, then renamed into place: a broker serving this directory never sees half a file.
  const stage = fs.mkdtempSync(path.join(outDir, '.build-'));
  try {
    const bundle = path.join(stage, CLI_BUNDLE);
    const result = await build({
      entryPoints: { fleet: path.join(ROOT, 'cli', 'main.ts') },
      outdir: stage,
      outExtension: { '.js': '.mjs' },
      // Commands are import()ed by main.ts when they run: each becomes a chunk of its own.
      splitting: true,
      chunkNames: `${CLI_CHUNKS}/[name]-[hash]`,
      bundle: true,
      platform: 'node',
      target: 'node20',
      format: 'esm',
      // ws loads these optional native helpers inside try/catch; without them it uses plain JavaScript.
      external: ['bufferutil', 'utf-8-validate'],
      // CommonJS dependencies (commander, ws) call require() for Node built-ins (in every chunk).
      banner: {
        js: "#!/usr/bin/env node\nimport { createRequire as __fleetCreateRequire } from 'node:module';\nconst require = __fleetCreateRequire(import.meta.url);",
      },
      minifyWhitespace: true,
      minifySyntax: true,
      legalComments: 'none',
      metafile: true,
      logLevel: 'warning',
    });
    const inputs = Object.keys(result.metafile.inputs);
    const foreign = inputs.filter((input) => FORBIDDEN.test(input));
    if (foreign.length) throw new Error(`the CLI bundle pulled in code it must not carry: ${foreign.join(', ')}`);
    fs.chmodSync(bundle, 0o755);
    const chunks = fs.readdirSync(path.join(stage, CLI_CHUNKS)).sort();
    const sources = inputs.filter((i) => !i.includes('node_modules/')).map((i) => path.relative(ROOT, path.resolve(ROOT, i)));
    fs.writeFileSync(path.join(stage, CLI_INPUTS), `${JSON.stringify(sources)}\n`);

    const tree = path.join(stage, 'tree');
    fs.mkdirSync(path.join(tree, 'bin'), { recursive: true });
    fs.mkdirSync(path.join(tree, 'lib', 'fleet-cli'), { recursive: true });
    fs.writeFileSync(path.join(tree, 'bin', 'fleet'), LAUNCHER, { mode: 0o755 });
    fs.chmodSync(path.join(tree, 'bin', 'fleet'), 0o755);
    fs.copyFileSync(bundle, path.join(tree, 'lib', 'fleet-cli', CLI_BUNDLE));
    fs.chmodSync(path.join(tree, 'lib', 'fleet-cli', CLI_BUNDLE), 0o644);
    fs.mkdirSync(path.join(tree, 'lib', 'fleet-cli', CLI_CHUNKS));
    for (const chunk of chunks) {
      fs.copyFileSync(path.join(stage, CLI_CHUNKS, chunk), path.join(tree, 'lib', 'fleet-cli', CLI_CHUNKS, chunk));
      fs.chmodSync(path.join(tree, 'lib', 'fleet-cli', CLI_CHUNKS, chunk), 0o644);
    }
    const tarName = `fleet-cli-${version}.tar.gz`;
    execFileSync('tar', ['--sort=name', '--owner=0', '--group=0', '--numeric-owner', '-czf', path.join(stage, tarName), '-C', tree, 'bin', 'lib']);
    fs.rmSync(tree, { recursive: true });
    fs.copyFileSync(path.join(HERE, CLI_INSTALLER), path.join(stage, CLI_INSTALLER));

    // Older tarballs go: the broker serves (and install-cli.sh names) the one of this build.
    for (const name of fs.readdirSync(outDir)) if (CLI_TARBALL.test(name) && name !== tarName) fs.rmSync(path.join(outDir, name), { force: true });
    // The chunks (named by their content's hash) go in before the bundle that loads them, and the
    // previous build's only after it: a run that started with the old bundle still finds its chunks.
    fs.mkdirSync(path.join(outDir, CLI_CHUNKS), { recursive: true });
    for (const chunk of chunks) fs.renameSync(path.join(stage, CLI_CHUNKS, chunk), path.join(outDir, CLI_CHUNKS, chunk));
    for (const name of [tarName, CLI_INSTALLER, CLI_INPUTS, CLI_BUNDLE]) fs.renameSync(path.join(stage, name), path.join(outDir, name));
    for (const name of fs.readdirSync(path.join(outDir, CLI_CHUNKS)))
      if (!chunks.includes(name)) fs.rmSync(path.join(outDir, CLI_CHUNKS, name), { recursive: true, force: true });
    return {
      version,
      outDir,
      bundle: path.join(outDir, CLI_BUNDLE),
      tarball: path.join(outDir, tarName),
      installScript: path.join(outDir, CLI_INSTALLER),
    };
  } finally {
    fs.rmSync(stage, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const at = process.argv.indexOf('--out');
  const out = at >= 0 ? path.resolve(process.argv[at + 1] ?? '') : undefined;
  const result = await buildCli(out);
  const rel = (p: string) => path.relative(process.cwd(), p) || p;
  console.log(`cli build: ${rel(result.bundle)} (${(fs.statSync(result.bundle).size / 1024).toFixed(0)} KiB), ${rel(result.tarball)}`);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  main().catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
