import fs from 'node:fs/promises';
import path from 'node:path';
import { AgentRefusal } from '../../shared/codes.js';
import { normalizeDevicePath, pathWithin } from '../../shared/resources.js';

/** How access refusals read; the broker recognises them by their code (shared/codes.ts), not by this. */
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
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new AgentRefusal('not_found', `The directory ${shown} does not exist on the device.`);
    throw new AgentRefusal('io_error', `The directory ${shown} cannot be read on the device: ${code ?? (err as Error).message}.`);
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
  if (normalized === null) throw new AgentRefusal('invalid_request', `The path ${JSON.stringify(requested)} is not an absolute path.`);
  if (normalized === '/') throw new AgentRefusal('not_a_file', 'The path names the root directory, not a file.');
  const name = path.posix.basename(normalized);
  const dir = await realDirectory(path.posix.dirname(normalized), path.posix.dirname(normalized));
  let target = path.posix.join(dir, name);
  if (direction === 'download') {
    try {
      target = await fs.realpath(target);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new AgentRefusal('not_found', `No file ${normalized} on the device.`);
      throw new AgentRefusal(
        'io_error',
        `The file ${normalized} cannot be read on the device: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}.`,
      );
    }
  }
  if (allowed) await requireWithinGrant(normalized, target, allowed);
  return { target, dir: path.posix.dirname(target), name: path.posix.basename(target) };
}

/** The allowed roots as the kernel sees them; a root that does not exist on this device allows nothing. */
async function resolvedRoots(allowed: string[]): Promise<string[]> {
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
  return roots;
}

/**
 * Refuses a resolved path (`target`, symlinks resolved) outside every allowed root, themselves
 * resolved. `normalized` is the path as asked, to tell a symlink escape from a path outside.
 */
export async function requireWithinGrant(normalized: string, target: string, allowed: string[]): Promise<void> {
  const roots = await resolvedRoots(allowed);
  if (roots.some((root) => pathWithin(root, target))) return;
  // Within the grant as written but not once resolved: a symlink (of the path or of a root) leads elsewhere.
  const asWritten = allowed.some((root) => {
    const clean = normalizeDevicePath(root);
    return clean !== null && pathWithin(clean, normalized);
  });
  throw new AgentRefusal(
    asWritten ? 'symlink_escape' : 'path_outside_grant',
    `${NOT_ALLOWED_PREFIX} ${normalized} resolves outside the directories your grant allows (${allowed.join(', ') || 'none'}).`,
  );
}
