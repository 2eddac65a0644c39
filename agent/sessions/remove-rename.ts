/**
 * Removing a file, removing an empty directory, and renaming (sftp's rm, rmdir and rename): copy
 * channels with direction `remove`, `rmdir` and `rename` (to `to`), answered in the open's info. As
 * for mkdir, the agent runs as root and a local user may have planted symlinks: each path's parent
 * is resolved and opened, checked against the grant's roots as the kernel names the directory
 * actually opened, and the operation made through that open descriptor, so the final component is
 * never followed (a symlink is removed or renamed itself, never what it points to).
 */
import fs from 'node:fs/promises';
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { CopyParams } from '../../shared/protocol.js';
import type { SessionContext } from './context.js';
import { holdEntry, reason } from './held-entry.js';

function failure(err: unknown, what: string): AgentRefusal {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return new AgentRefusal('not_found', `No ${what} on the device.`);
  if (code === 'EISDIR' || code === 'EPERM' || code === 'ENOTDIR') return new AgentRefusal('not_a_file', `Cannot remove ${what}: ${reason(err)}.`);
  return new AgentRefusal('io_error', `Cannot change ${what} on the device: ${reason(err)}.`);
}

/** Removes one file (or symlink, never what it points to) within the grant; a directory is refused. */
export async function removeFile(requested: string, allowed?: string[]): Promise<string> {
  const held = await holdEntry(requested, allowed, 'Files can only be removed or renamed');
  try {
    const stat = await fs.lstat(held.entry).catch((err: unknown) => {
      throw failure(err, requested);
    });
    if (stat.isDirectory()) throw new AgentRefusal('not_a_file', `${requested} is a directory: remove it with rmdir.`);
    await fs.unlink(held.entry).catch((err: unknown) => {
      throw failure(err, requested);
    });
    return held.real;
  } finally {
    await held.close();
  }
}

/** Removes one empty directory within the grant; a symlink to one is refused (never followed). */
export async function removeDirectory(requested: string, allowed?: string[]): Promise<string> {
  const held = await holdEntry(requested, allowed, 'Files can only be removed or renamed');
  try {
    const stat = await fs.lstat(held.entry).catch((err: unknown) => {
      throw failure(err, requested);
    });
    if (!stat.isDirectory()) throw new AgentRefusal('not_a_directory', `${requested} is not a directory.`);
    await fs.rmdir(held.entry).catch((err: unknown) => {
      if ((err as NodeJS.ErrnoException).code === 'ENOTEMPTY') throw new AgentRefusal('io_error', `${requested} is not empty.`);
      throw failure(err, requested);
    });
    return held.real;
  } finally {
    await held.close();
  }
}

/** Renames `from` to `to`, both within the grant; an existing `to` is refused, never replaced. */
export async function renameEntry(from: string, to: string, allowed?: string[]): Promise<string> {
  const source = await holdEntry(from, allowed, 'Files can only be removed or renamed');
  try {
    const target = await holdEntry(to, allowed, 'Files can only be removed or renamed');
    try {
      await fs.lstat(source.entry).catch((err: unknown) => {
        throw failure(err, from);
      });
      const exists = await fs.lstat(target.entry).then(
        () => true,
        () => false,
      );
      if (exists) throw new AgentRefusal('exists', `${to} already exists on the device.`);
      await fs.rename(source.entry, target.entry).catch((err: unknown) => {
        throw failure(err, from);
      });
      return target.real;
    } finally {
      await target.close();
    }
  } finally {
    await source.close();
  }
}

/** Serves a `remove`, `rmdir` or `rename` channel: the result goes in the open's answer; the channel then only waits for the broker's end. */
export async function openRemoveRename(channel: Channel, params: CopyParams, ctx: SessionContext): Promise<Record<string, unknown>> {
  let done: string;
  if (params.direction === 'rename') {
    if (typeof params.to !== 'string') throw new AgentRefusal('invalid_request', 'A rename needs the path to rename to.');
    done = await renameEntry(params.path, params.to, params.allowed);
  } else if (params.direction === 'rmdir') done = await removeDirectory(params.path, params.allowed);
  else done = await removeFile(params.path, params.allowed);
  ctx.log(`${params.direction} done`, { ch: channel.id, path: done });
  channel.once('end', () => channel.end());
  channel.resume();
  return { path: done };
}
