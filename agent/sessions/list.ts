/**
 * Directory listings for the web console's file browser: a copy channel with direction `list`,
 * answered in the open's info. The agent runs as root and a local user may have planted symlinks,
 * so the directory is resolved and checked against the grant's roots as a copy is, then checked
 * again as the kernel names the directory actually opened (a component swapped for a symlink in
 * between is caught), and read through that open descriptor. Entries are lstat'ed, never followed:
 * a symlink is shown as one, and opening it is a listing or a copy of its own, checked again.
 * The answer is bounded in entries and bytes and says when it was cut.
 */
import { constants as C } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import { MAX_LIST_BYTES, MAX_LIST_ENTRIES, type CopyParams, type DirectoryEntry, type DirectoryListing } from '../../shared/protocol.js';
import { normalizeDevicePath } from '../../shared/resources.js';
import type { SessionContext } from './context.js';
import { requireWithinGrant } from './paths.js';
import { isoTime } from '../iso-time.js';

const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NONBLOCK;

function refusalFor(err: unknown, shown: string): AgentRefusal {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ENOENT') return new AgentRefusal('not_found', `The directory ${shown} does not exist on the device.`);
  if (code === 'ENOTDIR') return new AgentRefusal('not_a_directory', `${shown} is not a directory on the device.`);
  return new AgentRefusal('io_error', `The directory ${shown} cannot be read on the device: ${code ?? (err as Error).message}.`);
}

function typeOf(st: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }): DirectoryEntry['type'] {
  if (st.isSymbolicLink()) return 'symlink';
  if (st.isDirectory()) return 'dir';
  if (st.isFile()) return 'file';
  return 'other';
}

/** An mtime as ISO 8601; a time out of Date's range (a planted file can carry any) reads as the epoch. */
function mtimeIso(ms: number): string {
  return Number.isNaN(new Date(ms).getTime()) ? isoTime(0) : isoTime(ms);
}

/**
 * Lists a directory within the `allowed` roots (every directory when absent): folders first, then
 * files, by name; at most MAX_LIST_ENTRIES entries and MAX_LIST_BYTES of JSON.
 */
export async function listDirectory(requested: string, allowed?: string[]): Promise<DirectoryListing> {
  const normalized = normalizeDevicePath(requested);
  if (normalized === null) throw new AgentRefusal('invalid_request', `The path ${JSON.stringify(requested)} is not an absolute path.`);
  let real: string;
  try {
    real = await fs.realpath(normalized);
  } catch (err) {
    throw refusalFor(err, normalized);
  }
  if (allowed) await requireWithinGrant(normalized, real, allowed);
  let handle: fs.FileHandle;
  try {
    handle = await fs.open(real, DIR_FLAGS);
  } catch (err) {
    throw refusalFor(err, normalized);
  }
  try {
    // The directory actually opened, as the kernel names it (Linux): read through the descriptor from here on.
    const held = `/proc/self/fd/${handle.fd}`;
    const opened = await fs.readlink(held).then(
      (name) => ({ base: held, path: name }),
      () => ({ base: real, path: real }), // no /proc: the check above stands
    );
    if (allowed) await requireWithinGrant(normalized, opened.path, allowed);
    const entries: DirectoryEntry[] = [];
    let truncated = false;
    let bytes = 0;
    const dir = await fs.opendir(opened.base, { bufferSize: 64 });
    for await (const dirent of dir) {
      if (entries.length >= MAX_LIST_ENTRIES) {
        truncated = true;
        break; // closes the directory
      }
      let st;
      try {
        st = await fs.lstat(path.posix.join(opened.base, dirent.name));
      } catch {
        continue; // gone meanwhile, or a name that is not UTF-8 (not reachable by this name)
      }
      const type = typeOf(st);
      const entry: DirectoryEntry = { name: dirent.name, type, size: type === 'file' ? st.size : 0, mtime: mtimeIso(st.mtimeMs) };
      const size = Buffer.byteLength(JSON.stringify(entry)) + 1;
      if (bytes + size > MAX_LIST_BYTES) {
        truncated = true;
        break;
      }
      bytes += size;
      entries.push(entry);
    }
    entries.sort((a, b) => Number(b.type === 'dir') - Number(a.type === 'dir') || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return { path: opened.path, entries, truncated };
  } finally {
    await handle.close().catch(() => {});
  }
}

/** Serves a `list` channel: the listing goes in the open's answer; the channel then only waits for the broker's end. */
export async function openList(channel: Channel, params: CopyParams, ctx: SessionContext): Promise<Record<string, unknown>> {
  const listing = await listDirectory(params.path, params.allowed);
  ctx.log('directory listed', { ch: channel.id, path: listing.path, entries: listing.entries.length, truncated: listing.truncated });
  channel.once('end', () => channel.end());
  channel.resume();
  return { ...listing };
}
