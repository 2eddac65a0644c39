/**
 * A BundleContext for tests of the software bundles (package management, containers, firewall …): a temp
 * root and state directory, real commands run without a shell, files of a fake file store, and the
 * reports it got. Options let a test put fake tools first on the PATH, give every command extra
 * environment, or run every command inside a network namespace the test made.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { ReportSeverity } from '../../../shared/protocol.js';
import type { BundleContext, CommandResult } from '../bundle.js';
import { isExecutable } from '../command.js';

export interface RecordedReport {
  severity: ReportSeverity;
  text: string;
  log?: string;
}

export interface SoftwareTestContextOptions {
  parameters?: Record<string, string>;
  /** the fake file store: path → content */
  files?: Record<string, string | Buffer>;
  /** the PATH commands see (and `has` searches); defaults to the test process's PATH */
  path?: string;
  /** directories put before that PATH (fake tools) */
  pathPrepend?: string[];
  /** environment every command gets on top of the test process's */
  env?: Record<string, string>;
  /** argv prefix every command runs under, e.g. `nsenter -t PID -n` */
  wrap?: string[];
  /** use this root instead of a fresh temp directory */
  root?: string;
}

export interface SoftwareTestContext {
  ctx: BundleContext;
  reports: RecordedReport[];
  /** every argv the bundle ran, in order */
  commands: string[][];
  root: string;
  stateDir: string;
  /** the fake file store; tests may change it between runs */
  files: Map<string, string | Buffer>;
  /** forgets the reports and commands of earlier runs */
  clear(): void;
  cleanup(): Promise<void>;
}

const OUTPUT_LIMIT = 1024 * 1024;

/** Runs argv without a shell; output bounded, killed after the timeout. */
export function runCommand(
  argv: string[],
  options: { input?: string; timeoutMs?: number; env?: Record<string, string>; signal?: AbortSignal } = {},
): Promise<CommandResult> {
  return new Promise((resolve) => {
    const child = spawn(argv[0]!, argv.slice(1), {
      env: { ...process.env, ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
      signal: options.signal,
    });
    let stdout = '';
    let stderr = '';
    const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 120_000);
    child.stdout.on('data', (chunk: Buffer) => {
      if (stdout.length < OUTPUT_LIMIT) stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      if (stderr.length < OUTPUT_LIMIT) stderr += chunk.toString();
    });
    child.on('error', (err) => {
      clearTimeout(timer);
      resolve({ code: null, stdout, stderr: stderr + String(err.message) });
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
    child.stdin.on('error', () => undefined);
    child.stdin.end(options.input ?? '');
  });
}

export async function createSoftwareTestContext(options: SoftwareTestContextOptions = {}): Promise<SoftwareTestContext> {
  const base = await mkdtemp(path.join(tmpdir(), 'bundle-test-'));
  const root = options.root ?? path.join(base, 'root');
  const stateDir = path.join(base, 'state');
  const fetchDir = path.join(base, 'fetched');
  await mkdir(root, { recursive: true });
  await mkdir(stateDir, { recursive: true });
  await mkdir(fetchDir, { recursive: true });
  const searchPath = [...(options.pathPrepend ?? []), options.path ?? process.env.PATH ?? ''].filter(Boolean).join(':');
  const reports: RecordedReport[] = [];
  const commands: string[][] = [];
  const files = new Map(Object.entries(options.files ?? {}));
  const abort = new AbortController();
  let fetched = 0;

  const ctx: BundleContext = {
    commitId: 'c0ffee',
    parameters: options.parameters ?? {},
    root,
    stateDir,
    async run(argv, runOptions = {}) {
      commands.push(argv);
      const full = [...(options.wrap ?? []), ...argv];
      return runCommand(full, {
        ...runOptions,
        env: { ...options.env, PATH: searchPath, ...runOptions.env },
        signal: abort.signal,
      });
    },
    async has(executable) {
      for (const dir of searchPath.split(':')) {
        if (dir && (await isExecutable(path.join(dir, executable)))) return true;
      }
      return false;
    },
    async fetchFile(filePath) {
      const content = files.get(filePath);
      if (content === undefined) throw new Error(`file not found in the file store: ${filePath}`);
      const local = path.join(fetchDir, `${++fetched}-${path.basename(filePath)}`);
      await writeFile(local, content);
      return local;
    },
    report(severity, text, log) {
      reports.push(log === undefined ? { severity, text } : { severity, text, log });
    },
    signal: abort.signal,
  };

  return {
    ctx,
    reports,
    commands,
    root,
    stateDir,
    files,
    clear() {
      reports.length = 0;
      commands.length = 0;
    },
    async cleanup() {
      abort.abort();
      await rm(base, { recursive: true, force: true });
    },
  };
}

/** Writes an executable shell script (a fake tool) into dir. */
export async function writeFakeTool(dir: string, name: string, script: string): Promise<string> {
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, name);
  await writeFile(file, script, { mode: 0o755 });
  return file;
}
