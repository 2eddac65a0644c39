/**
 * Device files read, hashed and written through the checked directories of fsutil.ts: reads and
 * hashes capped in size, atomic replacement (a temporary file created exclusively beside the
 * target, renamed over it), removal, and the passwd database. fsutil.ts says what is checked.
 */
import crypto from 'node:crypto';
import { constants as C } from 'node:fs';
import fs from 'node:fs/promises';
import { errorCode, openDirectory, openParent, openRegular, plain, replaceable, type CheckedDir, type Owner } from './fsutil.js';
import { parsePasswdLine, type PasswdEntry } from '../passwd.js';

export type { PasswdEntry };

const CREATE_FLAGS = C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW;
/** Default cap of a read of a device file. */
export const MAX_READ_BYTES = 64 * 1024 * 1024;

/** All of an open file, refusing one larger than `max` bytes (it stops reading there). */
export async function readCapped(handle: fs.FileHandle, max: number, shown: string): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  const buffer = Buffer.alloc(64 * 1024);
  for (;;) {
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, null);
    if (bytesRead === 0) return Buffer.concat(chunks, total);
    total += bytesRead;
    if (total > max) throw new Error(`${shown} is larger than ${max} bytes: refused`);
    chunks.push(Buffer.from(buffer.subarray(0, bytesRead)));
  }
}

/** The sha256 of an open file, or undefined when it is larger than `max` bytes (it stops reading there). */
export async function hashCapped(handle: fs.FileHandle, max: number): Promise<string | undefined> {
  const hash = crypto.createHash('sha256');
  const buffer = Buffer.alloc(256 * 1024);
  let total = 0;
  for (;;) {
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, null);
    if (bytesRead === 0) return hash.digest('hex');
    total += bytesRead;
    if (total > max) return undefined;
    hash.update(buffer.subarray(0, bytesRead));
  }
}

/** The device file `devicePath`, read with a cap; undefined when missing. */
async function readDeviceFileImpl(root: string, devicePath: string, max = MAX_READ_BYTES): Promise<Buffer | undefined> {
  const { dir, name } = await openParent(root, devicePath);
  try {
    const file = await openRegular(dir, name);
    if (!file) return undefined;
    try {
      return await readCapped(file.handle, max, dir.shown(name));
    } finally {
      await file.handle.close();
    }
  } catch (err) {
    if (errorCode(err) === 'ENOENT') return undefined;
    throw err;
  } finally {
    await dir.close();
  }
}

/**
 * The sha256 of the device file `devicePath`; undefined when it is missing, or larger than `max`
 * (then it differs from anything the agent would write). Throws for a symlink or a file that is not
 * regular.
 */
async function sha256OfFileImpl(root: string, devicePath: string, max = MAX_READ_BYTES): Promise<string | undefined> {
  let opened: { dir: CheckedDir; name: string };
  try {
    opened = await openParent(root, devicePath);
  } catch (err) {
    if (errorCode(err) === 'ENOENT') return undefined;
    throw err;
  }
  const { dir, name } = opened;
  try {
    return await sha256In(dir, name, max);
  } finally {
    await dir.close();
  }
}

/** The sha256 of `name` in `dir` (see sha256OfFile). */
async function sha256InImpl(dir: CheckedDir, name: string, max = MAX_READ_BYTES): Promise<string | undefined> {
  const file = await openRegular(dir, name);
  if (!file) return undefined;
  try {
    return await hashCapped(file.handle, max);
  } finally {
    await file.handle.close();
  }
}

/**
 * Creates the missing directories of the device directory `deviceDir` (mode exactly `mode`,
 * owned by `owner`), refusing to go through an untrusted symlink or a file.
 */
async function makeDirectoriesImpl(root: string, deviceDir: string, mode = 0o750, owner?: Owner): Promise<void> {
  const dir = await openDirectory(root, deviceDir, { create: mode, ...(owner ? { owner } : {}) });
  await dir.close();
}

export interface WriteOptions {
  /** mode of a new file; an existing file keeps its own unless `forceMode` */
  mode?: number;
  forceMode?: boolean;
  /** owner of the file written; by default the existing file's (when it has no other link), else the agent's */
  owner?: Owner;
}

/** What fills the temporary file: bytes, or a writer that returns false to keep the old file after all. */
export type FileContent = Buffer | string | ((handle: fs.FileHandle) => Promise<boolean>);

/**
 * Replaces `name` in the checked directory `dir` so that a reader sees the old or the new file,
 * never half of one: a temporary file created exclusively beside it, filled, given its mode and
 * owner through its descriptor, flushed, then renamed over it within the same directory. A
 * symlink, a directory or any other non-regular file at `name` is refused. False when the writer
 * kept the old file.
 */
async function writeAtomicInImpl(dir: CheckedDir, name: string, content: FileContent, opts: WriteOptions = {}): Promise<boolean> {
  const shown = dir.shown(name);
  let mode = opts.mode ?? 0o640;
  let owner = opts.owner;
  const existing = await replaceable(dir, name);
  if (existing) {
    if (!opts.forceMode) mode = existing.mode & 0o7777;
    if (existing.nlink === 1) owner ??= { uid: existing.uid, gid: existing.gid };
  }
  const tempName = `.${name.slice(0, 100)}.${crypto.randomBytes(6).toString('hex')}.fleet-tmp`;
  const temp = dir.at(tempName);
  const handle = await fs.open(temp, CREATE_FLAGS, 0o600);
  let renamed = false;
  try {
    let keep = true;
    if (typeof content === 'function') keep = await content(handle);
    else await handle.writeFile(content);
    if (!keep) return false;
    // owner first: a chown clears the set-id bits the mode may carry
    if (owner && process.geteuid?.() === 0) await handle.chown(owner.uid, owner.gid);
    await handle.chmod(mode);
    await handle.sync();
    const ours = await handle.stat();
    const there = await fs.lstat(temp);
    if (there.ino !== ours.ino || there.dev !== ours.dev) throw new Error(`the temporary file beside ${shown} was replaced: refused`);
    await fs.rename(temp, dir.at(name));
    renamed = true;
    await dir.handle.sync().catch(() => {});
    return true;
  } finally {
    await handle.close().catch(() => {});
    if (!renamed)
      await fs.unlink(temp).catch(() => {
        // already gone
      });
  }
}

/** writeAtomicIn for the device path `devicePath` below `root`. */
async function writeFileAtomicImpl(root: string, devicePath: string, content: FileContent, opts: WriteOptions = {}): Promise<boolean> {
  const { dir, name } = await openParent(root, devicePath);
  try {
    return await writeAtomicIn(dir, name, content, opts);
  } finally {
    await dir.close();
  }
}

/** Removes the device file `devicePath` (not through an untrusted symlink); false when it was missing. */
async function removeDeviceFileImpl(root: string, devicePath: string): Promise<boolean> {
  const { dir, name } = await openParent(root, devicePath);
  try {
    await fs.unlink(dir.at(name));
    return true;
  } catch (err) {
    if (errorCode(err) === 'ENOENT') return false;
    throw err;
  } finally {
    await dir.close();
  }
}

/** The users of `<root>/etc/passwd`. */
export async function readPasswd(root: string): Promise<PasswdEntry[]> {
  const data = await readDeviceFile(root, '/etc/passwd', 16 * 1024 * 1024);
  if (!data) throw Object.assign(new Error('/etc/passwd does not exist'), { code: 'ENOENT' });
  return data
    .toString('utf8')
    .split('\n')
    .map(parsePasswdLine)
    .filter((e): e is PasswdEntry => e !== null);
}

// The public helpers name device paths in their errors.
export const readDeviceFile = plain(readDeviceFileImpl);
export const sha256OfFile = plain(sha256OfFileImpl);
export const sha256In = plain(sha256InImpl);
export const makeDirectories = plain(makeDirectoriesImpl);
export const writeAtomicIn = plain(writeAtomicInImpl);
export const writeFileAtomic = plain(writeFileAtomicImpl);
export const removeDeviceFile = plain(removeDeviceFileImpl);
