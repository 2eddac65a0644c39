/**
 * One entry of a device directory reached without following a planted symlink: the agent runs as
 * root and a local user may have swapped any component, so the entry's parent is resolved, opened,
 * and checked against the grant's roots as the kernel names the directory actually opened; the
 * caller then acts through that open descriptor (mkdir, remove, rename), so the final component is
 * never followed. Linux only: without /proc a swap cannot be ruled out, and the operation is refused.
 */
import { constants as C } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { AgentRefusal } from '../../shared/codes.js';
import { normalizeDevicePath } from '../../shared/resources.js';
import { requireWithinGrant, resolveCopyTarget } from './paths.js';

export const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NONBLOCK;

/** A path's parent directory held open, and the name within it. */
export interface HeldEntry {
  /** `/proc/self/fd/<n>/<name>`: the entry through the open parent */
  entry: string;
  /** the entry as the kernel names the opened parent */
  real: string;
  close(): Promise<void>;
}

/** An errno code, or the message of an error without one. */
export function reason(err: unknown): string {
  return (err as NodeJS.ErrnoException).code ?? (err as Error).message;
}

/**
 * Opens the parent of `requested` and checks the entry within the `allowed` roots (anywhere when
 * absent). `operation` names what cannot be done without /proc ("Directories can only be made").
 */
export async function holdEntry(requested: string, allowed: string[] | undefined, operation: string): Promise<HeldEntry> {
  const { dir, name } = await resolveCopyTarget(requested, 'upload', allowed);
  // The path as asked (resolveCopyTarget refused it unless absolute), to tell a symlink escape from a path outside.
  const normalized = normalizeDevicePath(requested) ?? requested;
  let parent: fs.FileHandle;
  try {
    parent = await fs.open(dir, DIR_FLAGS);
  } catch (err) {
    throw new AgentRefusal('io_error', `Cannot open ${path.posix.dirname(normalized)} on the device: ${reason(err)}.`);
  }
  const close = () => parent.close().catch(() => {});
  try {
    const held = `/proc/self/fd/${parent.fd}`;
    const opened = await fs.readlink(held).catch(() => {
      throw new AgentRefusal('unsupported', `${operation} on a device with /proc (Linux).`);
    });
    const real = path.posix.join(opened, name);
    if (allowed) await requireWithinGrant(normalized, real, allowed);
    return { entry: path.posix.join(held, name), real, close };
  } catch (err) {
    await close();
    throw err;
  }
}
