/**
 * What the software bundles (package management, software management, firewall, metrics monitor,
 * containers, rauc) share: data parsing with readable errors, qbee's `$(name)` parameters, pre-conditions,
 * output tails for reports, paths under the context's root, and a small per-bundle state file.
 */
import { mkdir, readFile, writeFile, rename } from 'node:fs/promises';
import path from 'node:path';
import type { z } from 'zod';
import type { BundleContext, CommandResult } from '../bundle.js';
import { shell } from '../helpers.js';

/** `$(key)` parameters and `{{ key }}` templates render as the file bundle renders them: one implementation. */
export { renderTemplate, resolveParameters, resolveTemplateValue } from '../template.js';

/** Parses bundle data with a zod schema; the error names the field that is wrong. */
export function parseBundleData<S extends z.ZodType>(bundle: string, schema: S, data: unknown): z.infer<S> {
  const result = schema.safeParse(data);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const where = issue.path.length > 0 ? issue.path.join('.') : 'data';
  throw new Error(`${bundle}: ${where}: ${issue.message}`);
}

/**
 * A pre-condition is a shell command: empty or exit 0 means go on. Its `$(key)`s reach the shell as
 * data (see shell()); an unknown one throws ParameterError naming it, which fails the bundle.
 */
export async function preConditionHolds(ctx: BundleContext, preCondition: string | undefined): Promise<boolean> {
  const command = preCondition?.trim() ?? '';
  if (command === '') return true;
  const result = await shell(ctx, command, 60_000);
  return result.code === 0;
}

const TAIL_LIMIT = 4096;

/** The last part of a command's output, for a report's log. */
export function outputTail(result: Pick<CommandResult, 'stdout' | 'stderr'>, secrets: string[] = []): string {
  let text = [result.stdout.trim(), result.stderr.trim()].filter(Boolean).join('\n');
  for (const secret of secrets) if (secret) text = text.split(secret).join('********');
  return text.length > TAIL_LIMIT ? text.slice(text.length - TAIL_LIMIT) : text;
}

/** Why a command failed, in one line. */
export function failureReason(result: CommandResult): string {
  const firstLine = (result.stderr.trim() || result.stdout.trim()).split('\n').pop() ?? '';
  return result.code === null ? `did not finish${firstLine ? `: ${firstLine}` : ''}` : `exit code ${result.code}${firstLine ? `: ${firstLine}` : ''}`;
}

/** An absolute device path placed under the context's root (`/` on a device, a temp directory in tests). */
export function underRoot(ctx: BundleContext, devicePath: string): string {
  return path.join(ctx.root, path.resolve('/', devicePath));
}

/** A JSON state file of one bundle in the agent's state directory. */
export async function readBundleState<T>(ctx: BundleContext, name: string, fallback: T): Promise<T> {
  try {
    return JSON.parse(await readFile(path.join(ctx.stateDir, 'bundles', `${name}.json`), 'utf8')) as T;
  } catch {
    return fallback;
  }
}

export async function writeBundleState(ctx: BundleContext, name: string, state: unknown): Promise<void> {
  const dir = path.join(ctx.stateDir, 'bundles');
  await mkdir(dir, { recursive: true });
  const file = path.join(dir, `${name}.json`);
  await writeFile(`${file}.tmp`, JSON.stringify(state), { mode: 0o600 });
  await rename(`${file}.tmp`, file);
}

/**
 * Splits an argument string the way a shell splits words (quotes and backslashes), without expanding
 * anything: `docker_args` and `command` run without a shell.
 */
export function splitWords(text: string): string[] {
  const words: string[] = [];
  let current = '';
  let inWord = false;
  let quote: '"' | "'" | null = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quote === "'") {
      if (c === "'") quote = null;
      else current += c;
    } else if (quote === '"') {
      if (c === '"') quote = null;
      else if (c === '\\' && i + 1 < text.length && '"\\$`'.includes(text[i + 1]!)) current += text[++i];
      else current += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      inWord = true;
    } else if (c === '\\' && i + 1 < text.length) {
      current += text[++i];
      inWord = true;
    } else if (/\s/.test(c)) {
      if (inWord) words.push(current);
      current = '';
      inWord = false;
    } else {
      current += c;
      inWord = true;
    }
  }
  if (quote) throw new Error(`unbalanced ${quote} quote`);
  if (inWord) words.push(current);
  return words;
}

/**
 * Asks the engine for a reboot after the run when it offers that (the BundleContext of today does not:
 * the bundle then says so in a report).
 */
export function requestReboot(ctx: BundleContext, why: string): void {
  const withReboot = ctx as BundleContext & { requestReboot?: (why: string) => void };
  if (typeof withReboot.requestReboot === 'function') withReboot.requestReboot(why);
  else ctx.report('WARN', `Reboot required: ${why}`);
}
