import type { Readable } from 'node:stream';

/** One entry of the store as the API shows it (qbee-compatible fields alongside ours). */
export interface FileEntry {
  name: string;
  /** "/"-rooted virtual path of the entry itself (folders without a trailing "/"). */
  path: string;
  type: 'file' | 'dir';
  is_dir: boolean;
  /** Bytes; 0 for folders. */
  size: number;
  /** Last change, ISO 8601. */
  mtime: string;
  /** Creation time, Unix seconds (the change time where the filesystem keeps no birth time). */
  created: number;
  /** Lowercase, without the dot; "" for none and for folders. */
  extension: string;
  mime: string;
  /** Hex SHA-256 of the content (files; see DIGEST_IN_LISTING_MAX_BYTES). */
  sha256?: string;
  /** The same value as `sha256`, under the name qbee clients read. */
  digest?: string;
}

export interface FileStats {
  files: number;
  dirs: number;
  bytes: number;
  quota_bytes: number;
  /** qbee-compatible: number of files, quota and usage in MiB. */
  count_files: number;
  quota: number;
  used: number;
}

export interface ListQuery {
  path?: string;
  /** qbee clients send `{"name":"<part>"}` as JSON; a plain string is taken as the name part. */
  search?: string;
  sort_field: 'name' | 'size' | 'extension' | 'created' | 'mtime' | 'path';
  sort_direction: 'asc' | 'desc';
  offset: number;
  items_per_page: number;
}

export interface Download {
  name: string;
  size: number;
  stream: Readable;
}

/**
 * What the broker asks of a file store: the folder tree in DATA_DIR (FilesService, the default) or
 * the database (DbFilesService, FILE_STORE=db, for several brokers).
 */
export interface FileStore {
  init(): Promise<void>;
  close(): Promise<void>;
  stats(): FileStats | Promise<FileStats>;
  upload(folderInput: string, file: { path: string; originalName: string; size: number }, replace: boolean): Promise<{ file: string; path: string }>;
  download(input: string): Promise<Download>;
  metadata(input: string): Promise<FileEntry>;
  list(q: ListQuery): Promise<{ items: FileEntry[]; total: number }>;
  createDir(parentInput: string, nameInput: string): Promise<{ created: boolean; entry: FileEntry }>;
  move(input: string, change: { name?: string; newPath?: string }): Promise<FileEntry>;
  remove(input: string, recursive: boolean): Promise<{ path: string }>;
}
