import fs from 'node:fs/promises';
import path from 'node:path';
import { normalizeDevicePath, pathWithin } from '../../shared/resources.js';

/** Refusals the broker reports to the user as 403 (its relay recognises the prefix). */
export const NOT_ALLOWED_PREFIX = 'Not allowed on this device:';

export interface CopyTarget {
  /** The file as the kernel sees it: the real directory, and for downloads the real file. */
  target: string;
  dir: string;
  name: string;
}

async function realDirectory(dir: string, shown: string): Promise<string> {
  try {
    const real = await fs.realpath(dir);
    if (!(await fs.stat(real)).isDirectory()) throw Object.assign(new Error('not a directory'), { code: 'ENOTDIR' });
    return real;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new Error(`The directory ${shown} does not exist on the device.`);
    throw new Error(`The directory ${shown} cannot be read on the device: ${code ?? (err as Error).message}.`);
  }
}

/**
 * Re-checks a copy path on the device, whatever the broker decided: normalise it, resolve
 * symlinks in its directory (and, for a download, the file itself), and require the result to lie
 * within one of the `allowed` roots, themselves resolved. A symlink planted inside an allowed
 * directory therefore cannot lead outside it.
 */
export async function resolveCopyTarget(requested: string, direction: 'upload' | 'download', allowed?: string[]): Promise<CopyTarget> {
  const normalized = normalizeDevicePath(requested);
  if (normalized === null) throw new Error(`The path ${JSON.stringify(requested)} is not an absolute path.`);
  if (normalized === '/') throw new Error('The path names the root directory, not a file.');
  const name = path.posix.basename(normalized);
  const dir = await realDirectory(path.posix.dirname(normalized), path.posix.dirname(normalized));
  let target = path.posix.join(dir, name);
  if (direction === 'download') {
    try {
      target = await fs.realpath(target);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(`No file ${normalized} on the device.`);
      throw new Error(`The file ${normalized} cannot be read on the device: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}.`);
    }
  }
  if (allowed) {
    const roots: string[] = [];
    for (const root of allowed) {
      const clean = normalizeDevicePath(root);
      if (clean === null) continue;
      try {
        roots.push(await fs.realpath(clean));
      } catch {
        // an allowed directory that does not exist on this device allows nothing
      }
    }
    if (!roots.some((root) => pathWithin(root, target))) {
      throw new Error(`${NOT_ALLOWED_PREFIX} ${normalized} resolves outside the directories your grant allows (${allowed.join(', ') || 'none'}).`);
    }
  }
  return { target, dir: path.posix.dirname(target), name: path.posix.basename(target) };
}
