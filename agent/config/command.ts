/**
 * Running the device's own tools for configuration bundles: argv only (no shell unless a bundle
 * asks for `sh -c` explicitly, as qbee's after-commands do), bounded in time and in the output
 * kept, killed when the run is aborted.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { CommandResult } from './bundle.js';

/** Default time a command may take before it is killed. */
export const COMMAND_TIMEOUT_MS = 5 * 60_000;
/** Output kept per stream: the tail, which is where failures explain themselves. */
export const OUTPUT_TAIL_BYTES = 32 * 1024;

/** Keeps the last `limit` bytes written to it. */
class Tail {
  private parts: Buffer[] = [];
  private size = 0;
  dropped = false;
  constructor(private readonly limit: number) {}
  push(chunk: Buffer): void {
    this.parts.push(chunk);
    this.size += chunk.length;
    while (this.size - this.parts[0].length >= this.limit) {
      this.size -= this.parts.shift()!.length;
      this.dropped = true;
    }
  }
  text(): string {
    let all = Buffer.concat(this.parts);
    if (all.length > this.limit) {
      all = all.subarray(all.length - this.limit);
      this.dropped = true;
    }
    return (this.dropped ? '[…]' : '') + all.toString('utf8');
  }
}

export interface RunOptions {
  input?: string;
  timeoutMs?: number;
  /** added to the base environment */
  env?: Record<string, string>;
  cwd?: string;
}

/** Runs argv without a shell. A program that cannot start answers code null with the reason in stderr. */
export function runCommand(argv: string[], baseEnv: NodeJS.ProcessEnv, signal: AbortSignal, options: RunOptions = {}): Promise<CommandResult> {
  return new Promise((resolve) => {
    if (argv.length === 0 || !argv[0]) return resolve({ code: null, stdout: '', stderr: 'no command given' });
    if (signal.aborted) return resolve({ code: null, stdout: '', stderr: 'the configuration run was stopped' });
    const stdout = new Tail(OUTPUT_TAIL_BYTES);
    const stderr = new Tail(OUTPUT_TAIL_BYTES);
    let settled = false;
    let killedFor: string | undefined;
    const child = spawn(argv[0], argv.slice(1), {
      env: { ...baseEnv, ...options.env },
      cwd: options.cwd ?? '/',
      stdio: ['pipe', 'pipe', 'pipe'],
      // its own process group, so a timeout also ends what it started in the foreground
      detached: true,
    });
    const kill = (why: string) => {
      if (settled) return;
      killedFor = why;
      try {
        if (child.pid) process.kill(-child.pid, 'SIGKILL');
      } catch {
        child.kill('SIGKILL');
      }
    };
    const timer = setTimeout(
      () => kill(`timed out after ${Math.round((options.timeoutMs ?? COMMAND_TIMEOUT_MS) / 1000)} s`),
      options.timeoutMs ?? COMMAND_TIMEOUT_MS,
    );
    const onAbort = () => kill('the configuration run was stopped');
    signal.addEventListener('abort', onAbort, { once: true });
    const finish = (result: CommandResult) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      resolve(result);
    };
    child.stdout.on('data', (d: Buffer) => stdout.push(d));
    child.stderr.on('data', (d: Buffer) => stderr.push(d));
    child.stdin.on('error', () => {}); // a program that does not read its input
    child.on('error', (err: NodeJS.ErrnoException) => {
      const why = err.code === 'ENOENT' ? `${argv[0]}: command not found` : `${argv[0]}: ${err.message}`;
      finish({ code: null, stdout: '', stderr: why });
    });
    child.on('close', (code) => {
      const err = stderr.text();
      finish({ code: killedFor ? null : code, stdout: stdout.text(), stderr: killedFor ? `${err}${err ? '\n' : ''}${argv[0]}: ${killedFor}` : err });
    });
    child.stdin.end(options.input ?? '');
  });
}

/** True when `file` may be executed by this process (X_OK; a directory counts too, as for access(2)). */
export async function isExecutable(file: string): Promise<boolean> {
  try {
    await fs.access(file, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** True when `executable` (a name looked up on `pathVar`, or an absolute path) is an executable file. */
export async function hasExecutable(executable: string, pathVar: string | undefined): Promise<boolean> {
  const candidates = executable.includes('/')
    ? [executable]
    : (pathVar ?? '')
        .split(':')
        .filter(Boolean)
        .map((dir) => path.join(dir, executable));
  for (const file of candidates) {
    try {
      const stat = await fs.stat(file);
      if (!stat.isFile()) continue;
      await fs.access(file, fs.constants.X_OK);
      return true;
    } catch {
      // not here
    }
  }
  return false;
}

/** The output of a command for a report's log: stdout then stderr. */
export function outputOf(result: CommandResult): string {
  return [result.stdout, result.stderr].filter((s) => s.length > 0).join(result.stdout.endsWith('\n') ? '' : '\n');
}

/** Why a command failed, in a few words. */
export function failureOf(result: CommandResult): string {
  if (result.code === null) return result.stderr.split('\n').filter(Boolean).pop() ?? 'did not run';
  return `exit code ${result.code}`;
}
