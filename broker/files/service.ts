import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from 'pino';
import type { Config } from '../environment.js';
import { ensurePrivateDir, PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, uploadTmpDir } from '../data-dir.js';
import { conflict, notFound } from '../errors.js';
import { DigestCache, digestOf } from './digests.js';
import { extensionOf, mimeOf } from './mime.js';
import { formatPath, parseName, parseStorePath, STAGING_DIR } from './paths.js';
import { checkTarget, moveTarget, pathError, quotaExceeded } from './rules.js';
import { matchesPattern, parseFileSearch } from './search.js';
import type { Download, FileEntry, FileStats, FileStore, ListQuery } from './store.js';

interface Usage {
  files: number;
  dirs: number;
  bytes: number;
}

/**
 * Listings hash files up to this size when the digest is not known yet (uploads are hashed as they
 * land, so this matters only for files that were in the store when the broker started). Larger
 * ones show their digest through GET /file/metadata, which always computes it.
 */
const DIGEST_IN_LISTING_MAX_BYTES = 64 * 1024 * 1024;
const MIB = 1024 * 1024;

function isMissing(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

/** fsync a folder so a rename in it survives a crash; filesystems that cannot are skipped. */
async function syncDir(dir: string): Promise<void> {
  let handle: fsp.FileHandle | undefined;
  try {
    handle = await fsp.open(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
    await handle.sync();
  } catch {
    // Not every filesystem supports fsync on a folder; the rename itself is still atomic.
  } finally {
    await handle?.close();
  }
}

/** Where a store path sits on disk, found without following any symbolic link. */
interface Located {
  real: string;
  /** Absent when the entry does not exist. */
  stat?: fs.Stats;
}

/**
 * The file store: a folder tree under `<DATA_DIR>/files`, addressed by "/"-rooted virtual paths.
 *
 * - Every path is parsed by `paths.ts` and then walked component by component with lstat: a
 *   symbolic link, or anything that is neither a file nor a folder, anywhere on the way is refused,
 *   and existing entries are checked again with realpath. Downloads open with O_NOFOLLOW.
 * - Uploads are staged in a hidden folder at the top of the store (same filesystem), fsynced and
 *   renamed into place, so a crash never leaves a partial file visible; the staging folder is
 *   emptied at start and never listed or addressable.
 * - Usage (files, folders, bytes) is counted by one walk at start and then kept up to date by
 *   every change; a walk costs about 25 µs per entry (0.5 s for 20,000 files), too much to
 *   repeat for each upload's quota check. Changes run one at a time (a promise chain); the long
 *   part of an upload — staging and hashing — runs outside it, with its size reserved against
 *   the quota.
 */
export class FilesService implements FileStore {
  private root = '';
  private staging = '';
  private usage: Usage = { files: 0, dirs: 0, bytes: 0 };
  /** Bytes of uploads being staged, counted against the quota before they land. */
  private reserved = 0;
  private chain: Promise<unknown> = Promise.resolve();
  /** sha256 by `dev:ino:size:mtimeMs`: survives renames and moves, misses after any rewrite. */
  private readonly digests = new DigestCache();

  constructor(
    private readonly config: Pick<Config, 'dataDir' | 'fileQuotaBytes'>,
    private readonly logger: Logger,
  ) {}

  async init(): Promise<void> {
    const dir = path.join(this.config.dataDir, 'files');
    ensurePrivateDir(dir, this.logger);
    this.root = await fsp.realpath(dir);
    this.staging = path.join(this.root, STAGING_DIR);
    // Whatever an interrupted upload left behind is not part of the store: half-received bodies in
    // DATA_DIR/tmp (where uploads are received) and half-staged files.
    const received = uploadTmpDir(this.config.dataDir);
    await fsp.rm(received, { recursive: true, force: true });
    ensurePrivateDir(received);
    await fsp.rm(this.staging, { recursive: true, force: true });
    await fsp.mkdir(this.staging, { recursive: true, mode: PRIVATE_DIR_MODE });
    this.usage = await this.measure(this.root, true);
    this.usage.dirs -= 1; // the root itself is not counted
  }

  async close(): Promise<void> {
    await this.chain.catch(() => undefined);
  }

  /** Counts, used bytes and the quota. */
  stats(): FileStats {
    const quota = this.config.fileQuotaBytes;
    return {
      files: this.usage.files,
      dirs: this.usage.dirs,
      bytes: this.usage.bytes,
      quota_bytes: quota,
      count_files: this.usage.files,
      quota: Math.floor(quota / MIB),
      used: Math.round((this.usage.bytes / MIB) * 1000) / 1000,
    };
  }

  /**
   * Stores an uploaded file as `<folder><originalName>`. Missing folders on the way are created
   * (like `mkdir -p`). An existing file is kept unless `replace`; a folder of that name is never
   * replaced.
   */
  async upload(folderInput: string, file: { path: string; originalName: string; size: number }, replace: boolean): Promise<{ file: string; path: string }> {
    const folder = parseStorePath(folderInput, 'path');
    // The path names a folder with or without its trailing "/" (qbee-cli sends "/configs").
    const name = parseName(file.originalName, 'file');
    const target = [...folder.segments, name];
    checkTarget(target, 'file');

    // Answer the cheap refusals before staging a possibly large file.
    const before = await this.locate(target, 'path');
    this.checkReplaceable(before, target, replace);
    this.checkQuota(file.size - (before.stat?.size ?? 0), this.reserved);

    const staged = path.join(this.staging, `${crypto.randomUUID()}.part`);
    this.reserved += file.size;
    try {
      const sha256 = await this.stage(file.path, staged);
      return await this.exclusive(async () => {
        const at = await this.locate(target, 'path');
        this.checkReplaceable(at, target, replace);
        const oldSize = at.stat?.size ?? 0;
        this.checkQuota(file.size - oldSize, 0);
        const created = await this.ensureFolder(folder.segments, 'path');
        await fsp.rename(staged, at.real);
        await syncDir(path.dirname(at.real));
        this.usage.dirs += created;
        this.usage.bytes += file.size - oldSize;
        if (!at.stat) this.usage.files += 1;
        const st = await fsp.lstat(at.real);
        this.digests.remember(st, sha256);
        return { file: name, path: formatPath(folder.segments, true) };
      });
    } finally {
      this.reserved -= file.size;
      await fsp.rm(staged, { force: true });
    }
  }

  /** Opens a file for download; the stream owns the descriptor. */
  async download(input: string): Promise<Download> {
    const p = parseStorePath(input, 'path');
    const at = await this.locate(p.segments, 'path');
    if (!at.stat) throw notFound(`File ${formatPath(p.segments)}`);
    if (!at.stat.isFile()) throw pathError('path', `${formatPath(p.segments)} is a folder; list it with GET /files or name a file.`, 'not_a_file');
    if (p.folder) throw pathError('path', `${formatPath(p.segments)} is a file, not a folder: drop the trailing "/".`, 'not_a_folder');
    const handle = await fsp.open(at.real, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
    try {
      const st = await handle.stat();
      if (!st.isFile() || st.ino !== at.stat.ino) throw pathError('path', 'the file changed while it was opened; try again.');
      return { name: p.segments[p.segments.length - 1], size: st.size, stream: handle.createReadStream({ autoClose: true }) };
    } catch (err) {
      await handle.close();
      throw err;
    }
  }

  /** One entry, with its digest computed whatever its size. */
  async metadata(input: string): Promise<FileEntry> {
    const p = parseStorePath(input, 'path');
    const at = await this.locate(p.segments, 'path');
    if (!at.stat) throw notFound(`${formatPath(p.segments)}`);
    return this.entry(p.segments, at, Number.MAX_SAFE_INTEGER);
  }

  /**
   * A folder's entries (folders first, then by `sort_field`). With `search` and no `path`, every
   * entry of the store whose name contains the text (case-insensitive); with both, that folder's.
   */
  async list(q: ListQuery): Promise<{ items: FileEntry[]; total: number }> {
    const search = parseFileSearch(q.search);
    const base = q.path === undefined || q.path === '' ? { segments: [], folder: true } : parseStorePath(q.path, 'path');
    const at = await this.locate(base.segments, 'path');
    if (!at.stat) throw notFound(`Folder ${formatPath(base.segments)}`);
    if (!at.stat.isDirectory()) throw pathError('path', `${formatPath(base.segments)} is a file, not a folder.`, 'not_a_folder');

    const searching = search.name !== undefined || search.path !== undefined;
    const recursive = searching && (q.path === undefined || q.path === '');
    const found: { segments: string[]; at: Located }[] = [];
    await this.collect(base.segments, at.real, recursive, found);
    // Names compare case-insensitively (a search box); paths exactly, since clients delete what they match.
    const matched = found.filter(
      (f) =>
        (!search.name || matchesPattern(search.name, f.segments[f.segments.length - 1], true)) &&
        (!search.path || matchesPattern(search.path, formatPath(f.segments))),
    );

    const rows = matched.map((f) => ({ ...f, shown: this.describe(f.segments, f.at.stat as fs.Stats) }));
    const dir = q.sort_direction === 'desc' ? -1 : 1;
    rows.sort((a, b) => {
      if (a.shown.is_dir !== b.shown.is_dir) return a.shown.is_dir ? -1 : 1;
      const x = a.shown[q.sort_field];
      const y = b.shown[q.sort_field];
      const c = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
      return (c || a.shown.path.localeCompare(b.shown.path)) * dir;
    });
    const page = rows.slice(q.offset, q.offset + q.items_per_page);
    const items: FileEntry[] = [];
    for (const row of page) items.push(await this.entry(row.segments, row.at, DIGEST_IN_LISTING_MAX_BYTES));
    return { items, total: rows.length };
  }

  /** Creates `<path>/<name>` (and missing folders above it). `created` is false when it existed. */
  async createDir(parentInput: string, nameInput: string): Promise<{ created: boolean; entry: FileEntry }> {
    const parent = parseStorePath(parentInput, 'path');
    const name = parseName(nameInput, 'name');
    const target = [...parent.segments, name];
    checkTarget(target, 'name');
    return this.exclusive(async () => {
      const above = await this.locate(parent.segments, 'path');
      if (above.stat && !above.stat.isDirectory()) throw pathError('path', `${formatPath(parent.segments)} is a file, not a folder.`, 'not_a_folder');
      const at = await this.locate(target, 'name');
      if (at.stat?.isDirectory()) return { created: false, entry: await this.entry(target, at, 0) };
      if (at.stat) throw conflict('file_exists', `${formatPath(target)} exists and is a file.`, { path: formatPath(target) });
      this.usage.dirs += await this.ensureFolder(target, 'path');
      return { created: true, entry: await this.entry(target, await this.locate(target, 'name'), 0) };
    });
  }

  /** Renames in place (`name`) or moves (`newPath`; ending in "/" keeps the name). */
  async move(input: string, change: { name?: string; newPath?: string }): Promise<FileEntry> {
    const { source, target, field, same } = moveTarget(input, change);

    return this.exclusive(async () => {
      const from = await this.locate(source.segments, 'path');
      if (!from.stat) throw notFound(formatPath(source.segments));
      if (same) return this.entry(target, from, DIGEST_IN_LISTING_MAX_BYTES);
      const to = await this.locate(target, field);
      if (to.stat) throw conflict('file_exists', `${formatPath(target)} exists already; delete it first or pick another name.`, { path: formatPath(target) });
      this.usage.dirs += await this.ensureFolder(target.slice(0, -1), field);
      await fsp.rename(from.real, to.real);
      await syncDir(path.dirname(to.real));
      if (path.dirname(to.real) !== path.dirname(from.real)) await syncDir(path.dirname(from.real));
      return this.entry(target, await this.locate(target, field), DIGEST_IN_LISTING_MAX_BYTES);
    });
  }

  /** Deletes a file, or a folder: an empty one, or with everything in it when `recursive`. */
  async remove(input: string, recursive: boolean): Promise<{ path: string }> {
    const p = parseStorePath(input, 'path');
    if (p.segments.length === 0) throw pathError('path', 'the top of the file store cannot be deleted.');
    const shown = formatPath(p.segments);
    return this.exclusive(async () => {
      const at = await this.locate(p.segments, 'path');
      if (!at.stat) throw notFound(shown);
      if (at.stat.isFile()) {
        if (p.folder) throw pathError('path', `${shown} is a file, not a folder.`, 'not_a_folder');
        await fsp.unlink(at.real);
        this.usage.files -= 1;
        this.usage.bytes -= at.stat.size;
      } else {
        const inside = await fsp.readdir(at.real);
        if (inside.length > 0 && !recursive) {
          throw conflict('folder_not_empty', `${shown} is not empty; delete what is in it first, or send recursive=true.`, { path: shown });
        }
        const gone = await this.measure(at.real, false);
        // rm does not follow symbolic links: a link inside is removed, never its target.
        await fsp.rm(at.real, { recursive: true });
        this.usage.files -= gone.files;
        this.usage.dirs -= gone.dirs;
        this.usage.bytes -= gone.bytes;
      }
      await syncDir(path.dirname(at.real));
      return { path: shown };
    });
  }

  // ---------------------------------------------------------------------------------------------

  /** Runs changes one at a time, so checks and the change they guard cannot interleave. */
  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.chain.then(fn, fn);
    this.chain = run.catch(() => undefined);
    return run;
  }

  /** A path built from a folder and a name: within the length limit and not the staging folder. */
  private checkReplaceable(at: Located, target: string[], replace: boolean): void {
    if (!at.stat) return;
    const shown = formatPath(target);
    if (at.stat.isDirectory()) throw conflict('file_exists', `${shown} is a folder; a file cannot replace it.`, { path: shown });
    if (!replace) throw conflict('file_exists', `${shown} exists already; send replace=true to overwrite it.`, { path: shown });
  }

  /** `growth` bytes more would still fit, besides `pending` bytes being staged. */
  private checkQuota(growth: number, pending: number): void {
    const quota = this.config.fileQuotaBytes;
    if (growth > 0 && this.usage.bytes + pending + growth > quota) throw quotaExceeded(quota, this.usage.bytes + pending, growth);
  }

  /**
   * Finds a store path on disk. Each existing component is lstat-ed: a symbolic link, a special
   * file, or a file where a folder is needed is refused (400 naming `field`); the walk stops at the
   * first missing component. An existing entry is checked once more with realpath.
   */
  private async locate(segments: string[], field: string): Promise<Located> {
    let current = this.root;
    let stat: fs.Stats | undefined = undefined;
    for (let i = 0; i < segments.length; i++) {
      current = path.join(current, segments[i]);
      try {
        stat = await fsp.lstat(current);
      } catch (err) {
        if (!isMissing(err)) throw err;
        return { real: path.join(this.root, ...segments) };
      }
      const shown = formatPath(segments.slice(0, i + 1));
      if (stat.isSymbolicLink()) throw pathError(field, `${shown} is a symbolic link; the file store does not follow links.`);
      if (!stat.isFile() && !stat.isDirectory()) throw pathError(field, `${shown} is neither a file nor a folder.`);
      if (i < segments.length - 1 && !stat.isDirectory()) throw pathError(field, `${shown} is a file, not a folder.`, 'not_a_folder');
    }
    if (segments.length === 0) stat = await fsp.lstat(this.root);
    const resolved = await fsp.realpath(current);
    if (resolved !== current) throw pathError(field, `${formatPath(segments)} does not resolve inside the file store.`);
    return { real: current, stat };
  }

  /** Creates the folders of `segments` that are missing; returns how many it made. */
  private async ensureFolder(segments: string[], field: string): Promise<number> {
    let made = 0;
    for (let i = 1; i <= segments.length; i++) {
      const at = await this.locate(segments.slice(0, i), field);
      if (at.stat) continue; // locate refused files and links on the way
      await fsp.mkdir(at.real, { mode: PRIVATE_DIR_MODE });
      made += 1;
    }
    return made;
  }

  /** Moves (or copies, across filesystems) the received file into staging, hashes and fsyncs it. */
  private async stage(received: string, staged: string): Promise<string> {
    try {
      await fsp.rename(received, staged);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err;
      await fsp.copyFile(received, staged);
    }
    const handle = await fsp.open(staged, fs.constants.O_RDWR | fs.constants.O_NOFOLLOW);
    try {
      await handle.chmod(PRIVATE_FILE_MODE);
      const sha256 = await digestOf(handle);
      await handle.sync();
      return sha256;
    } finally {
      await handle.close();
    }
  }

  /** Files, folders (including `dir` itself) and bytes under `dir`; links and special files are skipped. */
  private async measure(dir: string, skipStaging: boolean): Promise<Usage> {
    const usage: Usage = { files: 0, dirs: 1, bytes: 0 };
    const entries = await fsp.readdir(dir, { withFileTypes: true });
    for (const e of entries) {
      if (skipStaging && e.name === STAGING_DIR) continue;
      const full = path.join(dir, e.name);
      if (e.isDirectory()) {
        const sub = await this.measure(full, false);
        usage.files += sub.files;
        usage.dirs += sub.dirs;
        usage.bytes += sub.bytes;
      } else if (e.isFile()) {
        const st = await fsp.lstat(full);
        usage.files += 1;
        usage.bytes += st.size;
      }
    }
    return usage;
  }

  /** The entries of a folder (and, when `recursive`, of every folder below it). */
  private async collect(segments: string[], dir: string, recursive: boolean, out: { segments: string[]; at: Located }[]): Promise<void> {
    const entries = await fsp.readdir(dir, { withFileTypes: true });
    for (const e of entries) {
      if (segments.length === 0 && e.name === STAGING_DIR) continue;
      if (!e.isFile() && !e.isDirectory()) continue; // links and special files are not part of the store
      const real = path.join(dir, e.name);
      let stat: fs.Stats;
      try {
        stat = await fsp.lstat(real);
      } catch (err) {
        if (isMissing(err)) continue; // deleted meanwhile
        throw err;
      }
      const child = [...segments, e.name];
      out.push({ segments: child, at: { real, stat } });
      if (recursive && stat.isDirectory()) await this.collect(child, real, true, out);
    }
  }

  private describe(segments: string[], stat: fs.Stats): FileEntry {
    const name = segments.length ? segments[segments.length - 1] : '';
    const isDir = stat.isDirectory();
    const extension = isDir ? '' : extensionOf(name);
    const born = stat.birthtimeMs > 0 ? stat.birthtimeMs : stat.ctimeMs;
    return {
      name,
      path: formatPath(segments),
      type: isDir ? 'dir' : 'file',
      is_dir: isDir,
      size: isDir ? 0 : stat.size,
      mtime: stat.mtime.toISOString(),
      created: Math.floor(born / 1000),
      extension,
      mime: isDir ? 'inode/directory' : mimeOf(extension),
    };
  }

  /** The entry, with its digest when known or when the file is at most `hashUpTo` bytes. */
  private async entry(segments: string[], at: Located, hashUpTo: number): Promise<FileEntry> {
    const stat = at.stat as fs.Stats;
    const shown = this.describe(segments, stat);
    if (stat.isFile()) {
      let sha256 = this.digests.get(stat);
      if (!sha256 && stat.size <= hashUpTo) sha256 = await this.digests.hash(at.real, stat);
      if (sha256) Object.assign(shown, { sha256, digest: sha256 });
    }
    return shown;
  }
}
