/**
 * The `fleet` command on PATH, as an installed CLI is: the block `fleet ssh-config` writes runs
 * `fleet ssh-proxy` as ssh's ProxyCommand, once per connection. The CLI is built once per process
 * (cli/packaging/build.ts, into a temporary directory) so that each start is the bundle's, as users
 * have it, not a TypeScript compile.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { buildCli } from '../../cli/packaging/build.js';

let dir: Promise<string> | undefined;

async function fleetDir(): Promise<string> {
  const made = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bin-'));
  process.once('exit', () => fs.rmSync(made, { recursive: true, force: true }));
  const build = await buildCli(path.join(made, 'cli'));
  const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;
  fs.writeFileSync(path.join(made, 'fleet'), `#!/bin/sh\nexec ${quote(process.execPath)} ${quote(build.bundle)} "$@"\n`, { mode: 0o755 });
  return made;
}

/** `env` with the `fleet` of this checkout first on its PATH. */
export async function withFleetOnPath(env: NodeJS.ProcessEnv): Promise<NodeJS.ProcessEnv> {
  dir ??= fleetDir();
  return { ...env, PATH: `${await dir}${path.delimiter}${env.PATH ?? ''}` };
}
