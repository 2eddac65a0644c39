/**
 * Reading this machine for the inventory: text clipped to the broker's limits (control characters
 * replaced), files read whole, commands run bounded in time and output, executables looked up on PATH.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { INVENTORY_LIMITS } from '../shared/inventory-limits.js';

const COMMAND_TIMEOUT_MS = 15_000;
const COMMAND_MAX_BYTES = 32 * 1024 * 1024;

const clip = (s: string, max: number = INVENTORY_LIMITS.short) => (s.length > max ? s.slice(0, max) : s);
export const clipLong = (s: string) => clip(s, INVENTORY_LIMITS.long);
// Control characters are replaced: the broker shows these strings to people.
export const clean = (s: unknown, max: number = INVENTORY_LIMITS.short) =>
  clip(
    (typeof s === 'string' ? s : typeof s === 'number' ? String(s) : Array.isArray(s) ? s.join(',') : '').replace(/[\u0000-\u001f\u007f-\u009f]/g, ' '),
    max,
  );

export function run(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: COMMAND_TIMEOUT_MS, maxBuffer: COMMAND_MAX_BYTES, env: { ...process.env, LC_ALL: 'C' } }, (err, stdout) =>
      err ? reject(err) : resolve(stdout),
    );
  });
}

export function readText(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return undefined;
  }
}

/** Is `cmd` an executable somewhere on PATH? */
export function onPath(cmd: string): boolean {
  for (const dir of (process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin').split(':')) {
    try {
      fs.accessSync(`${dir}/${cmd}`, fs.constants.X_OK);
      return true;
    } catch {
      // next
    }
  }
  return false;
}

/** The value when it is a plain object, else an empty one. */
export const asRecord = (v: unknown): Record<string, unknown> => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {});
