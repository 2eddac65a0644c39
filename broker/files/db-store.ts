import crypto from 'node:crypto';
import fs from 'node:fs';
import { Readable } from 'node:stream';
import { sql, type Selectable } from 'kysely';
import type { Config } from '../environment.js';
import type { Store } from '../db/database.js';
import type { FileNodesTable } from '../db/schema.js';
import { conflict, notFound } from '../errors.js';
import { formatPath, parseName, parseStorePath } from './paths.js';
import { extensionOf, mimeOf } from './mime.js';
import { checkTarget, moveTarget, pathError, quotaExceeded } from './rules.js';
import { matchesPattern, parseFileSearch } from './search.js';
import type { Download, FileEntry, FileStats, FileStore, ListQuery } from './store.js';

/** Bytes per stored chunk: what an upload or a download holds in memory at a time. */
export const CHUNK_BYTES = 256 * 1024;
const MIB = 1024 * 1024;

type Node = Selectable<FileNodesTable>;

/** Path of an entry as stored: "/"-rooted, folders without a trailing "/". */
const keyOf = (segments: readonly string[]) => formatPath(segments);

/**
 * The file store in the database (FILE_STORE=db): every broker on the database serves the same
 * files. Entries are rows of `file_nodes` (path, folder or file, size, sha256); a file's content is
 * rows of `file_chunks` of CHUNK_BYTES each (PostgreSQL bytea, SQLite blob).
 *
 * - Uploads are read from the received temporary file one chunk at a time, hashed as they go, and
 *   written in the transaction that also writes the entry (the request's own, when the router opened
 *   one): a crash or a refusal leaves neither chunks nor entry behind, and a replaced file's old
 *   chunks go in the same transaction.
 * - Downloads stream chunk by chunk (one query each, nothing else held) and check the length and
 *   the sha256 on the way: a stream whose content does not match what was stored is cut with an
 *   error instead of ending normally. A download running while its file is replaced or deleted is
 *   cut the same way.
 * - Changes run in transactions; quota and usage are sums over the table, so every broker sees
 *   the same figures (two brokers finishing uploads at the same instant may together pass the quota
 *   by up to one file).
 */
export class DbFilesService implements FileStore {
  constructor(
    private readonly store: Pick<Store, 'db' | 'transaction' | 'dialect'>,
    private readonly config: Pick<Config, 'fileQuotaBytes'>,
  ) {}

  async init(): Promise<void> {}

  async close(): Promise<void> {}

  async stats(): Promise<FileStats> {
    const usage = await this.usage();
    const quota = this.config.fileQuotaBytes;
    return {
      files: usage.files,
      dirs: usage.dirs,
      bytes: usage.bytes,
      quota_bytes: quota,
      count_files: usage.files,
      quota: Math.floor(quota / MIB),
      used: Math.round((usage.bytes / MIB) * 1000) / 1000,
    };
  }

  async upload(folderInput: string, file: { path: string; originalName: string; size: number }, replace: boolean): Promise<{ file: string; path: string }> {
    const folder = parseStorePath(folderInput, 'path');
    // The path names a folder with or without its trailing "/" (qbee-cli sends "/configs").
    const name = parseName(file.originalName, 'file');
    const target = [...folder.segments, name];
    checkTarget(target, 'file');
    return this.store.transaction(async () => {
      const db = this.store.db;
      const before = await this.node(target, 'path', true);
      checkReplaceable(before, target, replace);
      await this.checkQuota(file.size - Number(before?.size ?? 0));
      await this.ensureFolder(folder.segments, 'path');
      const blobId = crypto.randomUUID();
      const hash = crypto.createHash('sha256');
      let size = 0;
      let seq = 0;
      // One chunk in memory at a time: the next is read once this one is written.
      for await (const chunk of fs.createReadStream(file.path, { highWaterMark: CHUNK_BYTES })) {
        const data = chunk as Buffer;
        hash.update(data);
        size += data.length;
        await db.insertInto('file_chunks').values({ blob_id: blobId, seq, data }).execute();
        seq += 1;
      }
      const now = new Date();
      const row = { size, sha256: hash.digest('hex'), blob_id: blobId, mtime: now.toISOString() };
      if (before) {
        await db.updateTable('file_nodes').set(row).where('path', '=', before.path).execute();
        if (before.blob_id) await db.deleteFrom('file_chunks').where('blob_id', '=', before.blob_id).execute();
      } else {
        const inserted = await db
          .insertInto('file_nodes')
          .values({ path: keyOf(target), parent: keyOf(folder.segments), name, is_dir: 0, created: Math.floor(now.getTime() / 1000), ...row })
          .onConflict((oc) => oc.column('path').doNothing())
          .returning('path')
          .executeTakeFirst();
        // Another broker stored the same path meanwhile: as if it had been there before.
        if (!inserted) throw conflict('file_exists', `${keyOf(target)} exists already; send replace=true to overwrite it.`, { path: keyOf(target) });
      }
      return { file: name, path: formatPath(folder.segments, true) };
    });
  }

  async download(input: string): Promise<Download> {
    const p = parseStorePath(input, 'path');
    const node = await this.node(p.segments, 'path');
    if (!node) throw notFound(`File ${formatPath(p.segments)}`);
    if (node.is_dir) throw pathError('path', `${formatPath(p.segments)} is a folder; list it with GET /files or name a file.`, 'not_a_file');
    if (p.folder) throw pathError('path', `${formatPath(p.segments)} is a file, not a folder: drop the trailing "/".`, 'not_a_folder');
    const size = Number(node.size);
    return { name: node.name, size, stream: Readable.from(this.chunks(node.path, node.blob_id as string, size, node.sha256 as string)) };
  }

  async metadata(input: string): Promise<FileEntry> {
    const p = parseStorePath(input, 'path');
    const node = await this.node(p.segments, 'path');
    if (!node) throw notFound(formatPath(p.segments));
    return entryOf(node);
  }

  async list(q: ListQuery): Promise<{ items: FileEntry[]; total: number }> {
    const search = parseFileSearch(q.search);
    const base = q.path === undefined || q.path === '' ? { segments: [], folder: true } : parseStorePath(q.path, 'path');
    if (base.segments.length > 0) {
      const at = await this.node(base.segments, 'path');
      if (!at) throw notFound(`Folder ${formatPath(base.segments)}`);
      if (!at.is_dir) throw pathError('path', `${formatPath(base.segments)} is a file, not a folder.`, 'not_a_folder');
    }
    const searching = search.name !== undefined || search.path !== undefined;
    const recursive = searching && (q.path === undefined || q.path === '');
    const key = keyOf(base.segments);
    let query = this.store.db.selectFrom('file_nodes').selectAll();
    query = recursive ? query : query.where('parent', '=', key);
    const found = await query.execute();
    const matched = found.filter((n) => (!search.name || matchesPattern(search.name, n.name, true)) && (!search.path || matchesPattern(search.path, n.path)));
    const rows = matched.map(entryOf);
    const dir = q.sort_direction === 'desc' ? -1 : 1;
    rows.sort((x, y) => {
      if (x.is_dir !== y.is_dir) return x.is_dir ? -1 : 1;
      const a = x[q.sort_field];
      const b = y[q.sort_field];
      const c = typeof a === 'number' && typeof b === 'number' ? a - b : String(a).localeCompare(String(b));
      return (c || x.path.localeCompare(y.path)) * dir;
    });
    return { items: rows.slice(q.offset, q.offset + q.items_per_page), total: rows.length };
  }

  async createDir(parentInput: string, nameInput: string): Promise<{ created: boolean; entry: FileEntry }> {
    const parent = parseStorePath(parentInput, 'path');
    const name = parseName(nameInput, 'name');
    const target = [...parent.segments, name];
    checkTarget(target, 'name');
    return this.store.transaction(async () => {
      const above = parent.segments.length ? await this.node(parent.segments, 'path') : undefined;
      if (above && !above.is_dir) throw pathError('path', `${formatPath(parent.segments)} is a file, not a folder.`, 'not_a_folder');
      const at = await this.node(target, 'name', true);
      if (at?.is_dir) return { created: false, entry: entryOf(at) };
      if (at) throw conflict('file_exists', `${formatPath(target)} exists and is a file.`, { path: formatPath(target) });
      await this.ensureFolder(target, 'path');
      return { created: true, entry: entryOf((await this.node(target, 'name')) as Node) };
    });
  }

  async move(input: string, change: { name?: string; newPath?: string }): Promise<FileEntry> {
    const { source, target, field, same } = moveTarget(input, change);

    return this.store.transaction(async () => {
      const db = this.store.db;
      const from = await this.node(source.segments, 'path', true);
      if (!from) throw notFound(formatPath(source.segments));
      if (same) return entryOf(from);
      if (await this.node(target, field, true)) {
        throw conflict('file_exists', `${formatPath(target)} exists already; delete it first or pick another name.`, { path: formatPath(target) });
      }
      await this.ensureFolder(target.slice(0, -1), field);
      const oldKey = from.path;
      const newKey = keyOf(target);
      await db
        .updateTable('file_nodes')
        .set({ path: newKey, parent: keyOf(target.slice(0, -1)), name: target[target.length - 1] })
        .where('path', '=', oldKey)
        .execute();
      if (from.is_dir) {
        // Everything below moves with it: the old prefix is replaced by the new one.
        const cut = oldKey.length + 1;
        await db
          .updateTable('file_nodes')
          .set({
            path: sql<string>`cast(${newKey} as text) || substr(path, ${cut})`,
            parent: sql<string>`cast(${newKey} as text) || substr(parent, ${cut})`,
          })
          .where(sql<boolean>`substr(path, 1, ${cut}) = ${`${oldKey}/`}`)
          .execute();
      }
      return entryOf((await this.node(target, field)) as Node);
    });
  }

  async remove(input: string, recursive: boolean): Promise<{ path: string }> {
    const p = parseStorePath(input, 'path');
    if (p.segments.length === 0) throw pathError('path', 'the top of the file store cannot be deleted.');
    const shown = formatPath(p.segments);
    return this.store.transaction(async () => {
      const db = this.store.db;
      const at = await this.node(p.segments, 'path', true);
      if (!at) throw notFound(shown);
      if (!at.is_dir) {
        if (p.folder) throw pathError('path', `${shown} is a file, not a folder.`, 'not_a_folder');
        if (at.blob_id) await db.deleteFrom('file_chunks').where('blob_id', '=', at.blob_id).execute();
        await db.deleteFrom('file_nodes').where('path', '=', at.path).execute();
        return { path: shown };
      }
      const below = sql<boolean>`substr(path, 1, ${at.path.length + 1}) = ${`${at.path}/`}`;
      const child = await db.selectFrom('file_nodes').select('path').where('parent', '=', at.path).limit(1).executeTakeFirst();
      if (child && !recursive) {
        throw conflict('folder_not_empty', `${shown} is not empty; delete what is in it first, or send recursive=true.`, { path: shown });
      }
      await db
        .deleteFrom('file_chunks')
        .where('blob_id', 'in', db.selectFrom('file_nodes').select('blob_id').where(below).where('blob_id', 'is not', null))
        .execute();
      await db.deleteFrom('file_nodes').where(below).execute();
      await db.deleteFrom('file_nodes').where('path', '=', at.path).execute();
      return { path: shown };
    });
  }

  // ---------------------------------------------------------------------------------------------

  /**
   * The content of a file, chunk by chunk, checked against the stored length and digest. The last
   * chunk is held back until the check passes, so a client never receives a complete-looking file
   * whose content does not match: the response is cut short instead.
   */
  private async *chunks(key: string, blobId: string, size: number, sha256: string): AsyncGenerator<Buffer> {
    const hash = crypto.createHash('sha256');
    let read = 0;
    let held: Buffer | undefined;
    for (let seq = 0; read < size; seq++) {
      const row = await this.store.db.selectFrom('file_chunks').select('data').where('blob_id', '=', blobId).where('seq', '=', seq).executeTakeFirst();
      if (!row) throw new Error(`file store: ${key} changed or was deleted while it was read`);
      const data = Buffer.from(row.data);
      hash.update(data);
      read += data.length;
      if (held) yield held;
      held = data;
    }
    if (read !== size || hash.digest('hex') !== sha256) throw new Error(`file store: the content of ${key} does not match its length or sha256`);
    if (held) yield held;
  }

  /**
   * The entry at `segments`, if any; every folder on the way must be a folder. With `lock`, on
   * PostgreSQL the row is locked until the transaction ends, so two brokers changing one path queue up.
   */
  private async node(segments: string[], field: string, lock = false): Promise<Node | undefined> {
    if (segments.length === 0) return undefined;
    for (let i = 1; i < segments.length; i++) {
      const up = await this.store.db
        .selectFrom('file_nodes')
        .select('is_dir')
        .where('path', '=', keyOf(segments.slice(0, i)))
        .executeTakeFirst();
      if (!up) return undefined;
      if (!up.is_dir) throw pathError(field, `${formatPath(segments.slice(0, i))} is a file, not a folder.`, 'not_a_folder');
    }
    let query = this.store.db.selectFrom('file_nodes').selectAll().where('path', '=', keyOf(segments));
    if (lock && this.store.dialect === 'postgres') query = query.forUpdate();
    return query.executeTakeFirst();
  }

  /** Creates the folders of `segments` that are missing. */
  private async ensureFolder(segments: string[], field: string): Promise<void> {
    const now = new Date();
    for (let i = 1; i <= segments.length; i++) {
      const part = segments.slice(0, i);
      const at = await this.node(part, field);
      if (at?.is_dir) continue;
      if (at) throw pathError(field, `${formatPath(part)} is a file, not a folder.`, 'not_a_folder');
      await this.store.db
        .insertInto('file_nodes')
        .values({
          path: keyOf(part),
          parent: keyOf(part.slice(0, -1)),
          name: part[part.length - 1],
          is_dir: 1,
          size: 0,
          sha256: null,
          blob_id: null,
          mtime: now.toISOString(),
          created: Math.floor(now.getTime() / 1000),
        })
        .onConflict((oc) => oc.column('path').doNothing())
        .execute();
    }
  }

  private async usage(): Promise<{ files: number; dirs: number; bytes: number }> {
    const row = await this.store.db
      .selectFrom('file_nodes')
      .select((eb) => [
        eb.fn.countAll<number | string>().as('all'),
        eb.fn.sum<number | string | null>('is_dir').as('dirs'),
        eb.fn.sum<number | string | null>('size').as('bytes'),
      ])
      .executeTakeFirstOrThrow();
    const dirs = Number(row.dirs ?? 0);
    return { files: Number(row.all) - dirs, dirs, bytes: Number(row.bytes ?? 0) };
  }

  private async checkQuota(growth: number): Promise<void> {
    if (growth <= 0) return;
    const quota = this.config.fileQuotaBytes;
    const { bytes } = await this.usage();
    if (bytes + growth > quota) throw quotaExceeded(quota, bytes, growth);
  }
}

function checkReplaceable(at: Node | undefined, target: string[], replace: boolean): void {
  if (!at) return;
  const shown = formatPath(target);
  if (at.is_dir) throw conflict('file_exists', `${shown} is a folder; a file cannot replace it.`, { path: shown });
  if (!replace) throw conflict('file_exists', `${shown} exists already; send replace=true to overwrite it.`, { path: shown });
}

function entryOf(n: Node): FileEntry {
  const isDir = n.is_dir === 1;
  const extension = isDir ? '' : extensionOf(n.name);
  const entry: FileEntry = {
    name: n.name,
    path: n.path,
    type: isDir ? 'dir' : 'file',
    is_dir: isDir,
    size: isDir ? 0 : Number(n.size),
    mtime: n.mtime,
    created: Number(n.created),
    extension,
    mime: isDir ? 'inode/directory' : mimeOf(extension),
  };
  if (!isDir && n.sha256) Object.assign(entry, { sha256: n.sha256, digest: n.sha256 });
  return entry;
}
