/** Small pieces every bundle uses: tool checks, qbee's shell commands, bundle state files. */
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import type { BundleContext, CommandResult } from './bundle.js';
import { failureOf, outputOf } from './command.js';
import { resolveCommand } from './template.js';

/**
 * True when every tool is on the device. Otherwise reports which are missing, at ERR, and the
 * bundle applies nothing.
 */
export async function requireTools(ctx: BundleContext, tools: string[], what: string): Promise<boolean> {
  const missing: string[] = [];
  for (const tool of tools) if (!(await ctx.has(tool))) missing.push(tool);
  if (missing.length === 0) return true;
  ctx.report('ERR', `${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} not installed on this device: ${what} not applied.`);
  return false;
}

/**
 * Runs a qbee command string (after-command, pre-condition, start/stop command) with `sh -c`; each
 * `$(key)` reaches the shell as an environment variable the script references, never as script
 * text (resolveCommand). Throws ParameterError, naming the key, when a `$(key)` is unknown.
 */
export function shell(ctx: BundleContext, command: string, timeoutMs?: number): Promise<CommandResult> {
  const { script, env } = resolveCommand(command, ctx.parameters);
  return ctx.run(['sh', '-c', script], { ...(timeoutMs ? { timeoutMs } : {}), ...(Object.keys(env).length > 0 ? { env } : {}) });
}

/** Reports a command's outcome: `ok` at INFO, a failure at ERR with why; both carry the output. Returns success. */
export function reportCommand(ctx: BundleContext, result: CommandResult, ok: string, failed: string): boolean {
  if (result.code === 0) {
    ctx.report('INFO', ok, outputOf(result));
    return true;
  }
  ctx.report('ERR', `${failed}: ${failureOf(result)}`, outputOf(result));
  return false;
}

/** qbee's `[label] message`. */
export function withLabel(label: string, message: string): string {
  return label ? `[${label}] ${message}` : message;
}

/** What a bundle remembers between runs (in the agent's state directory). */
export async function readState<T>(ctx: BundleContext, name: string): Promise<T | undefined> {
  try {
    return JSON.parse(await fs.readFile(path.join(ctx.stateDir, `${name}.json`), 'utf8')) as T;
  } catch {
    return undefined;
  }
}

export async function writeState(ctx: BundleContext, name: string, value: unknown): Promise<void> {
  await fs.mkdir(ctx.stateDir, { recursive: true, mode: 0o700 });
  const file = path.join(ctx.stateDir, `${name}.json`);
  await fs.writeFile(`${file}.tmp`, JSON.stringify(value), { mode: 0o600 });
  await fs.rename(`${file}.tmp`, file);
}

/**
 * Fetches `source` of the file store into the open file `into`, streamed with its sha256 computed
 * on the way (at most `max` bytes): straight from the broker when the context can, else through
 * the context's temporary file.
 */
export async function fetchInto(ctx: BundleContext, source: string, into: fs.FileHandle, max: number): Promise<{ size: number; sha256: string }> {
  if (ctx.fetchFileInto) return ctx.fetchFileInto(source, into);
  const temp = await ctx.fetchFile(source);
  try {
    const input = await fs.open(temp, 'r');
    try {
      const hash = crypto.createHash('sha256');
      const buffer = Buffer.alloc(256 * 1024);
      let size = 0;
      for (;;) {
        const { bytesRead } = await input.read(buffer, 0, buffer.length, null);
        if (bytesRead === 0) break;
        size += bytesRead;
        if (size > max) throw new Error(`${source} is larger than ${max} bytes`);
        hash.update(buffer.subarray(0, bytesRead));
        await into.write(buffer, 0, bytesRead);
      }
      return { size, sha256: hash.digest('hex') };
    } finally {
      await input.close();
    }
  } finally {
    await fs.rm(temp, { force: true });
  }
}
