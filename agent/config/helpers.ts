/** Small pieces every bundle uses: tool checks, qbee's shell commands, bundle state files. */
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
