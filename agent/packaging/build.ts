/**
 * `npm run build:agent [-- --out <dir>] [--version <v>] [--bundle-only]`: the edge agent as something a
 * device installs. `--version` embeds another version than package.json's (tests build two versions);
 * `--bundle-only` skips the packages. Agents update themselves from the broker's fleet-agent.mjs.
 *
 *   <out>/fleet-agent.mjs        agent/main.ts and everything it imports, one ESM file (esbuild), the
 *                                version embedded; run with `node` alone (no tsx)
 *   <out>/package.json           its runtime dependencies at their exact versions
 *   <out>/node_modules/          those dependencies only: node-pty (its native binary built for this
 *                                machine's architecture) and ws
 *   <out>/fleet-agent_<version>_<arch>.deb           the Debian package (dpkg-deb --build)
 *   <out>/fleet-agent-<version>-linux-<arch>.tar.gz  the same tree for other Linux systems
 *   <out>/install.sh             the installer the broker serves at GET /install.sh
 *
 * Both packages hold /usr/lib/fleet-agent/ (the three above), /usr/bin/fleet-agent and the systemd
 * unit /usr/lib/systemd/system/fleet-agent.service; they need Node.js >= 20 from the system.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build, type Plugin } from 'esbuild';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const HERE = path.join(ROOT, 'agent', 'packaging');

/** What the bundle leaves outside: native code (node-pty) and ws, installed beside it. */
export const RUNTIME_DEPENDENCIES = ['node-pty', 'ws'] as const;
/**
 * Node's flags for the installed agent (measured in docs/performance.md, "The agent idle: memory"):
 * - `--max-semi-space-size=1` keeps V8's young generation at 1 MiB (16 by default), which an idle
 *   agent does not need;
 * - `--expose-gc` lets the agent collect once after each inventory (agent/memory.ts): an idle agent
 *   allocates too little for V8 to collect by itself, so what a burst left would stay committed;
 * - `--compact-on-every-full-gc` makes that collection (and any full one) move the survivors
 *   together, so that the pages they were scattered over go back to the system (about 2 MiB at
 *   idle); the agent's heap is small (under 10 MiB), so the move costs milliseconds;
 * - `--no-short-builtin-calls`: V8 copies its built-in functions next to the code it compiles when the
 *   machine has 4 GiB of memory or more, for slightly shorter calls; on a device with less it does
 *   not, and neither does the agent anywhere now: 1 MiB less of the node binary's pages in RSS.
 * - `--interrupt-budget=2162688 --max-bytecode-size-for-early-opt=0`: V8 hands a function to its
 *   optimising compiler (TurboFan) after 32 times more work than by default (66 KiB of bytecode run),
 *   and no longer a small one on its first tick. The start and each inventory (the dpkg status
 *   parsed, the report masked by ws) are one-off bursts that tiered up a handful of functions, and
 *   the compiler's own code then stayed in RSS (3.5 MiB of the node binary's pages); sustained work
 *   (a tunnel, a copy) still reaches TurboFan within its first megabytes;
 * - `--optimize-for-size`: V8 prefers smaller heaps and code over speed (2 MiB less private memory
 *   at idle);
 * - `--no-sparkplug`: no baseline compiler between the interpreter and TurboFan (0.4 MiB of code);
 * - `--bytecode-old-age=1`: the bytecode of a function that did not run between two full collections
 *   is dropped (compiled again if it runs again): what only the start ran goes at the collection
 *   after the first inventory (0.4 MiB).
 * Together the last four cost sustained work about 5-8 % more CPU per GB (a ws round trip in one
 * process; docs/performance.md, "The agent idle: fourth round").
 * FLEET_AGENT_NODE_FLAGS in the environment replaces them (empty: Node's defaults). Not
 * `--lite-mode`: it would take the idle cost down further, but without JIT the JavaScript that
 * masks every frame the agent sends (ws) runs about 15 times slower, so tunnels and copies would.
 */
export const AGENT_NODE_FLAGS =
  '--max-semi-space-size=1 --expose-gc --compact-on-every-full-gc --no-short-builtin-calls ' +
  '--interrupt-budget=2162688 --max-bytecode-size-for-early-opt=0 --optimize-for-size --no-sparkplug --bytecode-old-age=1';

/**
 * glibc's malloc gives each thread that allocates an arena of its own (up to 8 per core) and keeps
 * what was freed in each: the libuv pool and V8's helper threads left 2-3 MiB so at idle. One arena
 * is plenty for an agent whose work is on one thread. Set by the launcher unless MALLOC_ARENA_MAX is
 * already in the environment, with FLEET_AGENT_MALLOC_ARENA_MAX=launcher beside it so that the agent
 * removes both from its environment at start (agent/memory.ts): consoles and commands it starts get
 * the environment it was given.
 */
export const AGENT_MALLOC_ARENA_MAX = 1;

/**
 * glibc gives memory freed at the top of its heap back to the system once more than this is free
 * there. Its default (128 KiB) grows by itself, up to 32 MiB, each time a large block is freed, and
 * the agent's start frees several: about 0.8 MiB stayed in the idle agent's heap. Set, the threshold
 * stays where it is. Set by the launcher like MALLOC_ARENA_MAX (FLEET_AGENT_MALLOC_TRIM_THRESHOLD_=
 * launcher beside it, removed by the agent at start), unless already in the environment.
 */
export const AGENT_MALLOC_TRIM_THRESHOLD = 262_144;

/**
 * The bundle's first two lines: a shell script that starts node on the bundle itself with
 * AGENT_NODE_FLAGS, AGENT_MALLOC_ARENA_MAX and AGENT_MALLOC_TRIM_THRESHOLD (`exec`: one process), and,
 * to JavaScript, a string and a comment. `#!/usr/bin/env node` could not pass flags everywhere (`env -S` is not in every env).
 */
export const LAUNCHER =
  `#!/bin/sh\n':' //; [ "\${MALLOC_ARENA_MAX+set}" ] || export MALLOC_ARENA_MAX=${AGENT_MALLOC_ARENA_MAX} FLEET_AGENT_MALLOC_ARENA_MAX=launcher; ` +
  `[ "\${MALLOC_TRIM_THRESHOLD_+set}" ] || export MALLOC_TRIM_THRESHOLD_=${AGENT_MALLOC_TRIM_THRESHOLD} FLEET_AGENT_MALLOC_TRIM_THRESHOLD_=launcher; ` +
  `exec node \${FLEET_AGENT_NODE_FLAGS-${AGENT_NODE_FLAGS}} "$0" "$@"\n`;

/**
 * The runtime dependencies are CommonJS: the bundle loads them with require() (the banner's
 * createRequire) instead of `import`. Node imports a CommonJS module into ESM by lexing its source
 * for export names (cjs-module-lexer), which cost the idle agent 2-5 MiB of RSS that it kept
 * (docs/performance.md, "The agent idle: memory"); require() does not lex. The source keeps its
 * `import WebSocket from 'ws'`: each import of one of them resolves to a small CommonJS module of
 * the bundle, `module.exports = require('<name>')`, and esbuild gives ESM importers its exports as
 * Node would (the default export is module.exports). A dynamic `import('node-pty')` still loads it
 * on first use only.
 */
const requireRuntimeDependencies: Plugin = {
  name: 'require-runtime-dependencies',
  setup(b) {
    const names = new RegExp(`^(${RUNTIME_DEPENDENCIES.join('|')})$`);
    b.onResolve({ filter: names }, (args) =>
      args.namespace === 'runtime-dependency' ? { path: args.path, external: true } : { path: args.path, namespace: 'runtime-dependency' },
    );
    b.onLoad({ filter: /.*/, namespace: 'runtime-dependency' }, (args) => ({
      contents: `module.exports = require(${JSON.stringify(args.path)});`,
      loader: 'js',
    }));
  },
};

/** Packages of the broker and the web console: their presence in the bundle fails the build. */
const FORBIDDEN =
  /(^|\/)(broker|web-console|cli)\/|node_modules\/(express|pg|pg-[a-z-]+|better-sqlite3|kysely|multer|nodemailer|stripe|preact|swagger-ui-dist|jsonwebtoken|ssh2)\//;

export interface AgentBuild {
  version: string;
  /** Debian architecture name (amd64, arm64, armhf) */
  arch: string;
  outDir: string;
  bundle: string;
  deb: string;
  tarball: string;
  installScript: string;
  /** bytes the installed tree takes (/usr/lib/fleet-agent, the unit, the link) */
  installedBytes: number;
}

function debArch(): string {
  try {
    return execFileSync('dpkg', ['--print-architecture'], { encoding: 'utf8' }).trim();
  } catch {
    const map: Record<string, string> = { x64: 'amd64', arm64: 'arm64', arm: 'armhf' };
    const arch = map[process.arch];
    if (!arch) throw new Error(`no Debian architecture name for ${process.arch}`);
    return arch;
  }
}

function versionOf(pkgDir: string): string {
  return (JSON.parse(fs.readFileSync(path.join(pkgDir, 'package.json'), 'utf8')) as { version: string }).version;
}

function copyFiltered(from: string, to: string, keep: (rel: string) => boolean, rel = ''): void {
  for (const entry of fs.readdirSync(path.join(from, rel), { withFileTypes: true })) {
    const child = path.join(rel, entry.name);
    if (entry.isDirectory()) copyFiltered(from, to, keep, child);
    else if (entry.isFile() && keep(child)) {
      fs.mkdirSync(path.dirname(path.join(to, child)), { recursive: true });
      fs.copyFileSync(path.join(from, child), path.join(to, child));
    }
  }
}

/** The runtime dependencies as installed in the repository, trimmed to what runs on Linux. */
function copyDependencies(nodeModules: string, to: string): void {
  const pty = path.join(nodeModules, 'node-pty');
  copyFiltered(pty, path.join(to, 'node-pty'), (rel) => {
    if (rel === 'package.json' || rel === 'LICENSE') return true;
    if (rel.startsWith(`lib${path.sep}`)) return rel.endsWith('.js') && !rel.endsWith('.test.js') && !/windows|conpty/i.test(rel);
    // The native module compiled for this machine (npm install built it), and the helper some platforms use.
    return rel === path.join('build', 'Release', 'pty.node') || rel === path.join('build', 'Release', 'spawn-helper');
  });
  if (!fs.existsSync(path.join(to, 'node-pty', 'build', 'Release', 'pty.node'))) {
    throw new Error('node-pty has no build/Release/pty.node: run npm install on this machine first (it compiles it)');
  }
  copyFiltered(
    path.join(nodeModules, 'ws'),
    path.join(to, 'ws'),
    (rel) => rel.endsWith('.js') || rel.endsWith('.mjs') || rel === 'package.json' || rel === 'LICENSE',
  );
}

/** Fixed modes, whatever the umask of the build: directories and executables 0755, files 0644. */
function normaliseModes(dir: string, executables: Set<string>): void {
  fs.chmodSync(dir, 0o755);
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) normaliseModes(p, executables);
    else if (entry.isFile()) fs.chmodSync(p, executables.has(p) ? 0o755 : 0o644);
  }
}

function treeBytes(dir: string): number {
  let total = 0;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) total += treeBytes(p);
    else total += fs.lstatSync(p).size;
  }
  return total;
}

export interface BuildOptions {
  /** the version embedded and packaged (default: package.json's); tests build two versions of one tree */
  version?: string;
  /** false: the bundle, package.json and node_modules only (no .deb, tarball or install.sh) */
  packages?: boolean;
}

export async function buildAgent(outDir = path.join(ROOT, 'dist', 'agent'), options: BuildOptions = {}): Promise<AgentBuild> {
  const version = options.version ?? versionOf(ROOT);
  if (!/^[0-9][A-Za-z0-9.+~-]*$/.test(version)) throw new Error(`package.json version "${version}" is not usable as a package version`);
  const arch = debArch();
  const nodeModules = path.join(ROOT, 'node_modules');
  fs.rmSync(outDir, { recursive: true, force: true });
  fs.mkdirSync(outDir, { recursive: true });

  // 1. The bundle.
  const bundle = path.join(outDir, 'fleet-agent.mjs');
  const result = await build({
    entryPoints: [path.join(ROOT, 'agent', 'main.ts')],
    outfile: bundle,
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'esm',
    external: [...RUNTIME_DEPENDENCIES],
    plugins: [requireRuntimeDependencies],
    define: { __FLEET_AGENT_VERSION__: JSON.stringify(version) },
    // ws and node-pty are required (see requireRuntimeDependencies), as are built-ins by bundled CommonJS code.
    banner: {
      js: `${LAUNCHER}import { createRequire as __fleetCreateRequire } from 'node:module';\nconst require = __fleetCreateRequire(import.meta.url);`,
    },
    minifyWhitespace: true,
    minifySyntax: true,
    legalComments: 'none',
    metafile: true,
    logLevel: 'warning',
  });
  const foreign = Object.keys(result.metafile.inputs).filter((input) => FORBIDDEN.test(input));
  if (foreign.length) throw new Error(`the agent bundle pulled in broker/console code: ${foreign.join(', ')}`);

  // 2. Its runtime dependencies, at the versions installed here.
  const dependencies = Object.fromEntries(RUNTIME_DEPENDENCIES.map((name) => [name, versionOf(path.join(nodeModules, name))]));
  const manifest = {
    name: 'fleet-agent',
    version,
    description: 'Fleet edge agent (bundled build)',
    license: 'Apache-2.0',
    private: true,
    type: 'module',
    bin: { 'fleet-agent': 'fleet-agent.mjs' },
    engines: { node: '>=20' },
    dependencies,
  };
  fs.writeFileSync(path.join(outDir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  copyDependencies(nodeModules, path.join(outDir, 'node_modules'));
  if (options.packages === false) {
    fs.chmodSync(bundle, 0o755);
    return { version, arch, outDir, bundle, deb: '', tarball: '', installScript: '', installedBytes: treeBytes(outDir) };
  }

  // 3. The installed tree, staged; packaged twice.
  const stage = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-agent-stage-'));
  try {
    const lib = path.join(stage, 'usr', 'lib', 'fleet-agent');
    fs.mkdirSync(lib, { recursive: true });
    for (const name of ['fleet-agent.mjs', 'package.json', 'node_modules']) fs.cpSync(path.join(outDir, name), path.join(lib, name), { recursive: true });
    const unitDir = path.join(stage, 'usr', 'lib', 'systemd', 'system');
    fs.mkdirSync(unitDir, { recursive: true });
    fs.copyFileSync(path.join(ROOT, 'agent', 'fleet-agent.service'), path.join(unitDir, 'fleet-agent.service'));
    fs.mkdirSync(path.join(stage, 'usr', 'bin'), { recursive: true });
    fs.symlinkSync('../lib/fleet-agent/fleet-agent.mjs', path.join(stage, 'usr', 'bin', 'fleet-agent'));

    const debian = path.join(stage, 'DEBIAN');
    fs.mkdirSync(debian);
    const scripts = ['postinst', 'prerm', 'postrm'];
    for (const name of scripts) fs.copyFileSync(path.join(HERE, 'debian', name), path.join(debian, name));
    normaliseModes(stage, new Set([path.join(lib, 'fleet-agent.mjs'), ...scripts.map((s) => path.join(debian, s))]));
    const installedBytes = treeBytes(path.join(stage, 'usr'));
    fs.writeFileSync(
      path.join(debian, 'control'),
      [
        'Package: fleet-agent',
        `Version: ${version}`,
        `Architecture: ${arch}`,
        'Maintainer: Fleet <fleet@localhost>',
        `Installed-Size: ${Math.ceil(installedBytes / 1024)}`,
        'Depends: nodejs (>= 20)',
        'Section: admin',
        'Priority: optional',
        'Description: Fleet edge agent',
        ' Enrols this device with a Fleet broker and serves remote access (console, tunnels,',
        ' file copy) over one outbound WebSocket. Runs as the fleet-agent systemd service (root),',
        ' configured in /etc/fleet-agent, state in /var/lib/fleet-agent.',
        '',
      ].join('\n'),
    );
    fs.chmodSync(path.join(debian, 'control'), 0o644);

    const deb = path.join(outDir, `fleet-agent_${version}_${arch}.deb`);
    execFileSync('dpkg-deb', ['--root-owner-group', '--build', stage, deb], { stdio: ['ignore', 'ignore', 'inherit'] });
    const tarball = path.join(outDir, `fleet-agent-${version}-linux-${arch}.tar.gz`);
    execFileSync('tar', ['--sort=name', '--owner=0', '--group=0', '--numeric-owner', '-czf', tarball, '-C', stage, 'usr'], { stdio: 'inherit' });

    // 4. The installer, for this version (the broker fills in its own URL when serving it).
    const installScript = path.join(outDir, 'install.sh');
    fs.writeFileSync(installScript, fs.readFileSync(path.join(HERE, 'install.sh'), 'utf8').replaceAll('__FLEET_AGENT_VERSION__', version), { mode: 0o644 });
    fs.chmodSync(installScript, 0o644);
    fs.chmodSync(bundle, 0o755);
    return { version, arch, outDir, bundle, deb, tarball, installScript, installedBytes };
  } finally {
    fs.rmSync(stage, { recursive: true, force: true });
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const i = process.argv.indexOf('--out');
  const out = i > 0 ? path.resolve(process.argv[i + 1] ?? '') : undefined;
  const v = process.argv.indexOf('--version');
  const version = v > 0 ? process.argv[v + 1] : undefined;
  const packages = !process.argv.includes('--bundle-only');
  const mib = (n: number) => `${(n / 1024 / 1024).toFixed(1)} MiB`;
  buildAgent(out, { version, packages }).then(
    (b) => {
      const rel = (p: string) => path.relative(process.cwd(), p) || '.';
      process.stdout.write(
        `fleet-agent ${b.version} (${b.arch}) in ${rel(b.outDir)}\n` +
          `  bundle   ${rel(b.bundle)}  ${mib(fs.statSync(b.bundle).size)}\n` +
          (b.deb ? `  .deb     ${rel(b.deb)}  ${mib(fs.statSync(b.deb).size)}\n` : '') +
          (b.tarball ? `  tarball  ${rel(b.tarball)}  ${mib(fs.statSync(b.tarball).size)}\n` : '') +
          `  installed size ${mib(b.installedBytes)}; needs Node.js >= 20\n`,
      );
    },
    (err: Error) => {
      process.stderr.write(`build:agent failed: ${err.message}\n`);
      process.exit(1);
    },
  );
}
