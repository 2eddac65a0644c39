/**
 * Filesystem helpers for bundles: device paths under the bundle root and checked directory chains.
 * Reading, hashing and writing files through them is in device-files.ts.
 *
 * The agent runs as root and writes where a configuration says; a local user must not be able to
 * steer those writes or reads (OpenSSH's StrictModes is the model). Every path is walked from the
 * root one component at a time, each directory opened with O_DIRECTORY|O_NOFOLLOW and the next
 * name resolved through the open descriptor (`/proc/self/fd/N/name`, Linux's openat), so a
 * component swapped after it was checked cannot redirect anything: the agent keeps working in the
 * directory it checked. A symlink among the directories is followed only when no one but root
 * could have made it: owned by root (or the agent's own user) in a directory chain that only root
 * can change (e.g. /var/run -> /run); any other is refused, and a symlink at the file itself is
 * never followed nor replaced (e.g. /etc/resolv.conf -> /run/...: refused, not rewritten). A
 * directory writable by every user, or by a group other than root's, is refused. Files are opened O_NOFOLLOW|O_NONBLOCK after an lstat saying they are regular, checked
 * again with fstat (same inode, still regular), and read with a cap. New files are created
 * exclusively (O_EXCL, never through a link) in the checked directory, get their mode and owner
 * through the descriptor (umask plays no part), and are renamed within that directory: nothing is
 * ever written in place or chowned by path, so a hard link planted at a target is replaced, not
 * written through.
 */
import crypto from 'node:crypto';
import { constants as C, type Stats } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';

/** An absolute device path placed under `root` (`/` on a device, a temp tree in tests). */
export function underRoot(root: string, devicePath: string): string {
  if (!devicePath.startsWith('/')) throw new Error(`absolute path required, got ${devicePath}`);
  const normal = path.posix.normalize(devicePath);
  return root === '/' ? normal : path.join(root, normal);
}

export const sha256 = (data: Buffer | string) => crypto.createHash('sha256').update(data).digest('hex');

export interface Owner {
  uid: number;
  gid: number;
}

const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW | C.O_NONBLOCK;
const READ_FLAGS = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK;
/** Symlinks followed in one resolution (the kernel's own limit). */
const MAX_LINKS = 40;

const isRootish = (uid: number) => uid === 0 || uid === (process.geteuid?.() ?? 0);
/** The errno code of an error (ENOENT, …), if any. */
export const errorCode = (err: unknown) => (err as NodeJS.ErrnoException | undefined)?.code;

/** The device path of each directory descriptor, to name it in messages (an fd reused replaces its entry). */
const shownByFd = new Map<number, string>();

/** An error whose message names device paths, not the descriptor paths the agent used. */
function plainError(err: unknown): unknown {
  if (err instanceof Error)
    err.message = err.message.replace(/\/proc\/self\/fd\/(\d+)/g, (whole, fd: string) => {
      const shown = shownByFd.get(Number(fd));
      return shown === undefined ? whole : shown === '/' ? '' : shown;
    });
  return err;
}

export function plain<A extends unknown[], R>(fn: (...args: A) => Promise<R>): (...args: A) => Promise<R> {
  return async (...args: A) => {
    try {
      return await fn(...args);
    } catch (err) {
      throw plainError(err);
    }
  };
}

/** A directory held open; names in it are reached through the descriptor, never by path again. */
export class CheckedDir {
  constructor(
    readonly handle: fs.FileHandle,
    /** the device path it was reached by (for messages) */
    readonly devicePath: string,
    /** true while only root could have changed this directory and every one above it */
    readonly trusted: boolean,
    readonly stat: Stats,
  ) {
    shownByFd.set(handle.fd, devicePath);
  }

  /** The path of `name` in this directory, resolved through the descriptor. */
  at(name: string): string {
    if (!name || name === '.' || name === '..' || name.includes('/') || name.includes('\0')) throw new Error(`invalid file name ${JSON.stringify(name)}`);
    return `/proc/self/fd/${this.handle.fd}/${name}`;
  }

  /** The device path of `name` in this directory. */
  shown(name: string): string {
    return path.posix.join(this.devicePath, name);
  }

  close(): Promise<void> {
    return this.handle.close().catch(() => {});
  }
}

function components(devicePath: string): string[] {
  if (!devicePath.startsWith('/')) throw new Error(`absolute path required, got ${devicePath}`);
  return path.posix.normalize(devicePath).split('/').filter(Boolean);
}

function checkMode(st: Stats, shown: string): void {
  if (st.mode & 0o002) throw new Error(`${shown} is writable by every user: refused`);
  if (st.mode & 0o020 && st.gid !== 0) throw new Error(`${shown} is writable by group ${st.gid}: refused`);
}

/** Where a symlink found at `shown` (in `dir`) points, as a device path; throws unless it is trusted. */
async function followable(dir: CheckedDir, name: string): Promise<string | undefined> {
  const st = await fs.lstat(dir.at(name)).catch(() => undefined);
  if (!st?.isSymbolicLink()) return undefined;
  if (!dir.trusted || !isRootish(st.uid)) throw new Error(`refusing to follow the symlink ${dir.shown(name)}: another user could have made it`);
  const target = await fs.readlink(dir.at(name));
  return path.posix.normalize(target.startsWith('/') ? target : path.posix.join(dir.devicePath, target));
}

export interface OpenDirOptions {
  /** create missing directories with this mode (exactly, whatever the umask) */
  create?: number;
  /** owner of the directories created */
  owner?: Owner;
}

/**
 * Opens `name` in `dir` as a directory: never through a symlink unless trusted (then `link` says
 * where it points), created when missing and asked for.
 */
async function openChild(dir: CheckedDir, name: string, opts: OpenDirOptions): Promise<CheckedDir | { link: string }> {
  const at = dir.at(name);
  const shown = dir.shown(name);
  let handle: fs.FileHandle | undefined;
  let created = false;
  while (!handle) {
    try {
      handle = await fs.open(at, DIR_FLAGS);
    } catch (err) {
      if (errorCode(err) === 'ENOENT' && opts.create !== undefined && !created) {
        await fs.mkdir(at, { mode: opts.create }).catch((e: unknown) => {
          if (errorCode(e) !== 'EEXIST') throw e;
        });
        created = true;
        continue;
      }
      if (errorCode(err) === 'ENOTDIR' || errorCode(err) === 'ELOOP') {
        const link = await followable(dir, name);
        if (link !== undefined) return { link };
        throw new Error(`${shown} is not a directory`);
      }
      throw err;
    }
  }
  try {
    const st = await handle.stat();
    if (!st.isDirectory()) throw new Error(`${shown} is not a directory`);
    // Made by us: its mode exactly (whatever the umask) and its owner. In a directory another user
    // can change, only a directory that is still ours and empty is taken for the one just made.
    if (created && opts.create !== undefined && (dir.trusted || (st.uid === (process.geteuid?.() ?? 0) && st.nlink === 2))) {
      if (opts.owner && process.geteuid?.() === 0) await handle.chown(opts.owner.uid, opts.owner.gid);
      await handle.chmod(opts.create);
    }
    const now = await handle.stat();
    checkMode(now, shown);
    return new CheckedDir(handle, shown, dir.trusted && isRootish(now.uid), now);
  } catch (err) {
    await handle.close().catch(() => {});
    throw err;
  }
}

/** The directory `name` in `dir` (created when missing and asked for); a symlink there is refused. */
async function openSubdirectoryImpl(dir: CheckedDir, name: string, opts: OpenDirOptions = {}): Promise<CheckedDir> {
  const next = await openChild(dir, name, opts);
  if ('link' in next) throw new Error(`${dir.shown(name)} is a symlink: refused`);
  return next;
}

let procChecked = false;

async function openRoot(root: string): Promise<CheckedDir> {
  // the bundle root itself is the agent's configuration (`/` on a device), trusted as given
  const handle = await fs.open(root, C.O_RDONLY | C.O_DIRECTORY);
  if (!procChecked) {
    const seen = await fs.stat(`/proc/self/fd/${handle.fd}`).catch(() => undefined);
    if (!seen?.isDirectory()) {
      await handle.close();
      throw new Error('/proc is not mounted: the agent reaches files through /proc/self/fd and writes nothing without it');
    }
    procChecked = true;
  }
  return new CheckedDir(handle, '/', true, await handle.stat());
}

/**
 * Opens the directory `deviceDir` (below `root`) component by component (see the header): the
 * chain is checked and pinned. The caller closes it.
 */
async function openDirectoryImpl(root: string, deviceDir: string, opts: OpenDirOptions = {}): Promise<CheckedDir> {
  let parts = components(deviceDir);
  let dir = await openRoot(root);
  let links = 0;
  try {
    for (let i = 0; i < parts.length; i++) {
      const next = await openChild(dir, parts[i], opts);
      if ('link' in next) {
        if (++links > MAX_LINKS) throw new Error(`too many symlinks in ${deviceDir}`);
        parts = [...components(next.link), ...parts.slice(i + 1)];
        i = -1;
        await dir.close();
        dir = await openRoot(root);
        continue;
      }
      await dir.close();
      dir = next;
    }
    return dir;
  } catch (err) {
    await dir.close();
    throw err;
  }
}

/**
 * The checked directory of a file and its name there. A symlink at the file itself is not
 * followed (reads and writes refuse it): replacing it would unmake it, writing through it would
 * write elsewhere.
 */
async function openParentImpl(root: string, devicePath: string, opts: OpenDirOptions = {}): Promise<{ dir: CheckedDir; name: string }> {
  const target = path.posix.normalize(devicePath);
  const name = path.posix.basename(target);
  if (!name || name === '..' || target.endsWith('/')) throw new Error(`${devicePath} names no file`);
  return { dir: await openDirectory(root, path.posix.dirname(target), opts), name };
}

/**
 * What is at `name` in `dir` before it is replaced: undefined when nothing; a symlink, a
 * directory or any other file that is not regular (FIFO, device, socket) is refused.
 */
async function replaceableImpl(dir: CheckedDir, name: string): Promise<Stats | undefined> {
  const shown = dir.shown(name);
  const existing = await fs.lstat(dir.at(name)).catch((err: unknown) => {
    if (errorCode(err) === 'ENOENT') return undefined;
    throw err;
  });
  if (!existing) return undefined;
  if (existing.isSymbolicLink()) throw new Error(`refusing to replace the symlink ${shown}`);
  if (existing.isDirectory()) throw new Error(`${shown} is a directory`);
  if (!existing.isFile()) throw new Error(`${shown} is not a regular file: refused`);
  return existing;
}

/**
 * `name` in `dir` opened for reading, when it is a regular file: never through a symlink, never
 * blocking (a FIFO or a device is refused, not opened for reading). undefined when missing.
 */
async function openRegularImpl(dir: CheckedDir, name: string): Promise<{ handle: fs.FileHandle; stat: Stats } | undefined> {
  const shown = dir.shown(name);
  let before: Stats;
  try {
    before = await fs.lstat(dir.at(name));
  } catch (err) {
    if (errorCode(err) === 'ENOENT') return undefined;
    throw err;
  }
  if (before.isSymbolicLink()) throw new Error(`${shown} is a symlink: refused`);
  if (!before.isFile()) throw new Error(`${shown} is not a regular file: refused`);
  const handle = await fs.open(dir.at(name), READ_FLAGS).catch((err: unknown) => {
    if (errorCode(err) === 'ELOOP') throw new Error(`${shown} is a symlink: refused`);
    throw err;
  });
  const stat = await handle.stat();
  if (!stat.isFile() || stat.ino !== before.ino || stat.dev !== before.dev) {
    await handle.close();
    throw new Error(`${shown} changed while it was opened: refused`);
  }
  return { handle, stat };
}

// The public helpers name device paths in their errors.
export const openSubdirectory = plain(openSubdirectoryImpl);
export const openDirectory = plain(openDirectoryImpl);
export const openParent = plain(openParentImpl);
export const replaceable = plain(replaceableImpl);
export const openRegular = plain(openRegularImpl);
