/** Filesystem helpers for bundles: paths under the bundle root, atomic writes, the passwd database. */
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';

/** An absolute device path placed under `root` (`/` on a device, a temp tree in tests). */
export function underRoot(root: string, devicePath: string): string {
  if (!devicePath.startsWith('/')) throw new Error(`absolute path required, got ${devicePath}`);
  const normal = path.posix.normalize(devicePath);
  return root === '/' ? normal : path.join(root, normal);
}

export async function sha256OfFile(file: string): Promise<string | undefined> {
  try {
    const data = await fs.readFile(file);
    return crypto.createHash('sha256').update(data).digest('hex');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

export const sha256 = (data: Buffer | string) => crypto.createHash('sha256').update(data).digest('hex');

/**
 * Creates the missing directories of `dir` (below `root`), refusing to go through a symlink or a
 * file: a symlinked directory planted by someone else must not redirect what the agent writes.
 */
export async function makeDirectories(root: string, dir: string, mode = 0o750, owner?: { uid: number; gid: number }): Promise<void> {
  const relative = path.relative(root, dir);
  if (relative.startsWith('..')) throw new Error(`${dir} is outside ${root}`);
  let current = root;
  for (const part of relative.split(path.sep).filter(Boolean)) {
    current = path.join(current, part);
    let stat;
    try {
      stat = await fs.lstat(current);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      await fs.mkdir(current, { mode });
      if (owner && process.getuid?.() === 0) await fs.chown(current, owner.uid, owner.gid);
      continue;
    }
    if (stat.isSymbolicLink()) throw new Error(`refusing to write through the symlink ${current}`);
    if (!stat.isDirectory()) throw new Error(`${current} is not a directory`);
  }
}

/**
 * Writes `data` to `target` so that a reader sees the old or the new file, never half of one: a
 * temporary file beside it, flushed, then renamed over it. An existing file keeps its mode
 * unless `mode` is forced; a symlink at `target` is refused.
 */
export async function writeFileAtomic(
  target: string,
  data: Buffer | string,
  opts: { mode?: number; forceMode?: boolean; owner?: { uid: number; gid: number } } = {},
): Promise<void> {
  let mode = opts.mode ?? 0o640;
  let owner = opts.owner;
  try {
    const existing = await fs.lstat(target);
    if (existing.isSymbolicLink()) throw new Error(`refusing to replace the symlink ${target}`);
    if (existing.isDirectory()) throw new Error(`${target} is a directory`);
    if (!opts.forceMode) mode = existing.mode & 0o7777;
    owner ??= { uid: existing.uid, gid: existing.gid };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const temp = path.join(path.dirname(target), `.${path.basename(target)}.${crypto.randomBytes(6).toString('hex')}.fleet-tmp`);
  const handle = await fs.open(temp, 'wx', 0o600);
  try {
    await handle.writeFile(data);
    await handle.chmod(mode);
    if (owner && process.getuid?.() === 0) await handle.chown(owner.uid, owner.gid);
    await handle.sync();
    await handle.close();
    await fs.rename(temp, target);
  } catch (err) {
    await handle.close().catch(() => {});
    await fs.rm(temp, { force: true });
    throw err;
  }
}

export interface PasswdEntry {
  name: string;
  uid: number;
  gid: number;
  home: string;
  shell: string;
}

/** The users of `<root>/etc/passwd`. */
export async function readPasswd(root: string): Promise<PasswdEntry[]> {
  const text = await fs.readFile(underRoot(root, '/etc/passwd'), 'utf8');
  return text
    .split('\n')
    .map((line) => line.split(':'))
    .filter((f) => f.length >= 7 && f[0])
    .map((f) => ({ name: f[0], uid: Number(f[2]), gid: Number(f[3]), home: f[5], shell: f[6] }));
}
