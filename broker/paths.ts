/**
 * Where the broker finds the files it serves, the same from the source tree (`npm start`, tsx) and
 * from the build (`node dist/broker/main.js`). The build sets FLEET_BUNDLE; its web console is the
 * copy made beside the bundle, so the build directory does not depend on the checkout's layout.
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** Replaced by `true` in the build (esbuild `define`); undefined when running from source. */
declare const FLEET_BUNDLE: boolean | undefined;

export const BUNDLED = typeof FLEET_BUNDLE !== 'undefined' && FLEET_BUNDLE === true;

/** The directory of this module: broker/ from source, the build directory (dist/broker) in the build. */
const HERE = path.dirname(fileURLToPath(import.meta.url));

/** The repository root when running from source. */
export const SOURCE_ROOT = path.resolve(HERE, '..');

/** The web console build: web-console/dist from source, <build>/web-console in the build. */
export const WEB_DIST = BUNDLED ? path.join(HERE, 'web-console') : path.join(SOURCE_ROOT, 'web-console', 'dist');

/** The Swagger UI files of the API sandbox, wherever node_modules resolves swagger-ui-dist. */
export function swaggerDist(): string {
  return path.dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
}

/** The agent artifacts when AGENT_ARTIFACTS_DIR is unset: dist/agent of the checkout, or beside the build (dist/broker → dist/agent). */
export const DEFAULT_AGENT_ARTIFACTS_DIR = BUNDLED ? path.resolve(HERE, '..', 'agent') : path.join(SOURCE_ROOT, 'dist', 'agent');

/** The CLI build when CLI_ARTIFACTS_DIR is unset: dist/cli of the checkout, or beside the build (dist/broker → dist/cli). */
export const DEFAULT_CLI_ARTIFACTS_DIR = BUNDLED ? path.resolve(HERE, '..', 'cli') : path.join(SOURCE_ROOT, 'dist', 'cli');
