/**
 * `npm run build:broker [-- --out <dir>]`: the broker as plain JavaScript for production, started
 * with `node <out>/main.js` (one process, no tsx):
 *
 *   <out>/main.js            broker/main.ts and everything it imports, one ESM file (esbuild); the
 *                            packages of node_modules stay outside (imported at run time)
 *   <out>/main.js.map        its source map (`node --enable-source-maps` names the .ts lines)
 *   <out>/web-console/       a copy of the web console build (`npm run build`)
 *
 * The packages are resolved as node does, from the directories above <out>: the default
 * <out> (dist/broker of the checkout) uses the checkout's node_modules.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

export interface BrokerBuild {
  outDir: string;
  main: string;
  bytes: number;
}

export async function buildBroker(outDir = path.join(ROOT, 'dist', 'broker')): Promise<BrokerBuild> {
  const webDist = path.join(ROOT, 'web-console', 'dist');
  if (!fs.existsSync(path.join(webDist, 'index.html'))) throw new Error('the web console is not built: run `npm run build` first');
  fs.rmSync(outDir, { recursive: true, force: true });
  fs.mkdirSync(outDir, { recursive: true });
  const main = path.join(outDir, 'main.js');
  await build({
    entryPoints: [path.join(ROOT, 'broker', 'main.ts')],
    outfile: main,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    // Native modules (better-sqlite3, bufferutil) and packages that load files of their own (pino's
    // workers, swagger-ui-dist) must stay packages; the project's own code is what gets bundled.
    packages: 'external',
    sourcemap: true,
    define: { FLEET_BUNDLE: 'true' },
    logLevel: 'warning',
  });
  fs.cpSync(webDist, path.join(outDir, 'web-console'), { recursive: true });
  return { outDir, main, bytes: fs.statSync(main).size };
}

async function cli(): Promise<void> {
  const at = process.argv.indexOf('--out');
  const out = at >= 0 ? path.resolve(process.argv[at + 1] ?? '') : undefined;
  const result = await buildBroker(out);
  console.log(
    `broker build: ${path.relative(process.cwd(), result.main) || result.main} (${(result.bytes / 1024).toFixed(0)} KiB); start it with node ${path.relative(process.cwd(), result.main)}`,
  );
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  cli().catch((err) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}
