/**
 * The `fleet` CLI as the broker serves it: GET /install-cli.sh and the tarball under /install/, from
 * CLI_ARTIFACTS_DIR (`npm run build:cli`). Running from source, the broker builds it there itself on
 * the first request that finds it missing or older than its sources (one build at a time); the
 * production build (dist/broker) serves what `npm run build:cli` left beside it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Logger } from 'pino';
import { BUNDLED, SOURCE_ROOT } from '../paths.js';

/** The tarball names GET /install/{artifact} serves for the CLI (cli/packaging/build.ts makes them). */
export const CLI_TARBALL = /^fleet-cli-[0-9][A-Za-z0-9.+~-]{0,63}\.tar\.gz$/;
export const CLI_INSTALLER = 'install-cli.sh';
const INPUTS = 'fleet.inputs.json';

export interface CliArtifacts {
  installer: string;
  tarball: string;
  tarballName: string;
}

/** The build in `dir`, if complete: the installer and one tarball. */
function present(dir: string): CliArtifacts | undefined {
  let names: string[];
  try {
    names = fs.readdirSync(dir);
  } catch {
    return undefined;
  }
  const tarballName = names.filter((n) => CLI_TARBALL.test(n)).sort()[0];
  if (!tarballName || !names.includes(CLI_INSTALLER)) return undefined;
  return { installer: path.join(dir, CLI_INSTALLER), tarball: path.join(dir, tarballName), tarballName };
}

/** From source: is the build in `dir` older than a source file it was made from (or than package.json)? */
function stale(dir: string, found: CliArtifacts): boolean {
  try {
    const at = fs.statSync(found.tarball).mtimeMs;
    const inputs = JSON.parse(fs.readFileSync(path.join(dir, INPUTS), 'utf8')) as unknown;
    if (!Array.isArray(inputs)) return true;
    return [...inputs, 'package.json', path.join('cli', 'packaging', CLI_INSTALLER)].some(
      (file) => typeof file !== 'string' || fs.statSync(path.join(SOURCE_ROOT, file)).mtimeMs > at,
    );
  } catch {
    return true;
  }
}

const canBuild = () => !BUNDLED && fs.existsSync(path.join(SOURCE_ROOT, 'cli', 'packaging', 'build.ts'));
const building = new Map<string, Promise<void>>();
/** A failed build is not tried again for this long (anyone may ask for /install-cli.sh). */
const RETRY_MS = 60_000;
const failedAt = new Map<string, number>();

/** The CLI build of `dir`, built first when running from source and it is missing or stale; undefined when there is none. */
export async function cliArtifacts(dir: string, logger: Logger): Promise<CliArtifacts | undefined> {
  const found = present(dir);
  if (!canBuild() || (found && !stale(dir, found))) return found;
  if (Date.now() - (failedAt.get(dir) ?? -Infinity) < RETRY_MS) return found;
  let pending = building.get(dir);
  if (!pending) {
    pending = (async () => {
      // Not a static import: the production bundle neither carries the build script nor needs esbuild.
      const { buildCli } = (await import(pathToFileURL(path.join(SOURCE_ROOT, 'cli', 'packaging', 'build.ts')).href)) as {
        buildCli: (out: string) => Promise<unknown>;
      };
      await buildCli(dir);
      logger.info({ dir }, 'CLI built for /install-cli.sh');
    })()
      .catch((err: unknown) => {
        failedAt.set(dir, Date.now());
        logger.warn({ err, dir }, 'CLI build failed');
      })
      .finally(() => building.delete(dir));
    building.set(dir, pending);
  }
  await pending;
  return present(dir);
}
