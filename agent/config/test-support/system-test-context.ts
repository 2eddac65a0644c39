/** A BundleContext over a temp tree for bundle tests: real commands, a file store in memory, reports collected. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ReportSeverity } from '../../../shared/protocol.js';
import type { Bundle, BundleContext } from '../bundle.js';
import { hasExecutable, runCommand } from '../command.js';

export const SYSTEM_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export interface TestReport {
  sev: ReportSeverity;
  text: string;
  log?: string;
}

export function testContext(opts: { files?: Record<string, string | Buffer>; parameters?: Record<string, string>; path?: string } = {}) {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bundle-')));
  const root = path.join(dir, 'root');
  const stateDir = path.join(dir, 'state');
  fs.mkdirSync(root);
  fs.mkdirSync(path.join(dir, 'downloads'));
  const reports: TestReport[] = [];
  const fetched: string[] = [];
  const files = opts.files ?? {};
  const env = { ...process.env, PATH: opts.path ?? SYSTEM_PATH };
  const controller = new AbortController();
  let n = 0;
  const ctx: BundleContext = {
    commitId: 'commit-1',
    parameters: opts.parameters ?? {},
    root,
    stateDir,
    run: (argv, o) => runCommand(argv, env, controller.signal, o),
    has: (executable) => hasExecutable(executable, env.PATH),
    fetchFile: async (file) => {
      fetched.push(file);
      if (!(file in files)) throw new Error(`the broker refused ${file}: not found`);
      const temp = path.join(dir, 'downloads', `${++n}`);
      fs.writeFileSync(temp, files[file]);
      return temp;
    },
    report: (sev, text, log) => reports.push({ sev, text, ...(log ? { log } : {}) }),
    signal: controller.signal,
  };
  return {
    ctx,
    dir,
    root,
    reports,
    fetched,
    files,
    /** the reports since the last call */
    take: () => reports.splice(0),
    /** the PATH the bundle's commands and tool checks see */
    setPath: (value: string) => {
      env.PATH = value;
    },
    /** the tree path of a device path */
    at: (devicePath: string) => path.join(root, devicePath),
    cleanup: () => {
      controller.abort();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** parse then apply, as the engine does */
export async function applyBundle<T>(bundle: Bundle<T>, raw: unknown, ctx: BundleContext): Promise<void> {
  await bundle.apply(bundle.parse(raw), ctx);
}

/** A directory with no programs in it: every tool is missing. */
export function emptyPath(dir: string): string {
  const bin = path.join(dir, 'empty-bin');
  fs.mkdirSync(bin, { recursive: true });
  return bin;
}

/** A directory of fake programs (shell scripts) for tools the test machine must not really run. */
export function fakeTools(dir: string, tools: Record<string, string>): string {
  const bin = path.join(dir, 'fake-bin');
  fs.mkdirSync(bin, { recursive: true });
  for (const [name, script] of Object.entries(tools)) fs.writeFileSync(path.join(bin, name), `#!/bin/sh\n${script}\n`, { mode: 0o755 });
  return bin;
}
