/**
 * The SFTP side of the sftp bridge: status codes, the part of ssh2's SFTP stream used, and what
 * the answers are made of (attributes of listed entries and opened files, `ls -l` lines, statuses
 * from the session machinery's refusals).
 */
import type { DirectoryEntry } from '../../shared/protocol.js';
import { normalizeDevicePath } from '../../shared/resources.js';
import type { ErrorFrame } from '../remote/relay.js';
import type { Prepared } from '../remote/sessions.js';

/** SFTP status codes (draft-ietf-secsh-filexfer-02, as OpenSSH speaks it). */
export const SFTP_STATUS = { ok: 0, eof: 1, noSuchFile: 2, permissionDenied: 3, failure: 4, opUnsupported: 8 } as const;
export const S_IFREG = 0o100000;
export const S_IFDIR = 0o040000;
export const S_IFLNK = 0o120000;
export const S_IFMT = 0o170000;

export interface Attrs {
  mode: number;
  size: number;
  uid: number;
  gid: number;
  atime: number;
  mtime: number;
}
/** The part of ssh2's server SFTP stream used here. */
export interface SftpStream {
  on(event: string, listener: (...args: never[]) => void): unknown;
  handle(reqid: number, handle: Buffer): void;
  status(reqid: number, code: number, message?: string): void;
  data(reqid: number, data: Buffer): void;
  name(reqid: number, names: { filename: string; longname: string; attrs: Partial<Attrs> }[]): void;
  attrs(reqid: number, attrs: Partial<Attrs>): void;
  end(): void;
  destroy(): void;
}

/** What sftp's answers are made of, from a refusal of the session machinery. */
export function statusOf(prepared: Extract<Prepared, { ok: false }>): { code: number; message: string; notAFile: boolean } {
  const frame = prepared.frame as ErrorFrame & { refusal?: string };
  const message = frame.message;
  const refusal = frame.refusal;
  if (refusal === 'not_a_file') return { code: SFTP_STATUS.failure, message, notAFile: true };
  if (frame.code === 403) return { code: SFTP_STATUS.permissionDenied, message, notAFile: false };
  if (refusal === 'not_found') return { code: SFTP_STATUS.noSuchFile, message, notAFile: false };
  if (refusal === 'unsupported') return { code: SFTP_STATUS.opUnsupported, message, notAFile: false };
  if (/ENOENT|no such file/i.test(message)) return { code: SFTP_STATUS.noSuchFile, message, notAFile: false };
  return { code: SFTP_STATUS.failure, message, notAFile: false };
}

/** A path as the device names it: relative names are from `/` (a copy has no working directory). */
export function absolute(rawPath: string): string | null {
  return normalizeDevicePath(rawPath.startsWith('/') ? rawPath : `/${rawPath}`);
}

/** An entry's attributes: its type, size and time as listed (the listing carries no permissions or owner). */
export function entryAttrs(entry: DirectoryEntry): Attrs {
  const parsed = Date.parse(entry.mtime);
  const mtime = Number.isNaN(parsed) ? 0 : Math.floor(parsed / 1000);
  const mode = { file: S_IFREG | 0o644, dir: S_IFDIR | 0o755, symlink: S_IFLNK | 0o777, other: 0o644 }[entry.type];
  return { mode, size: entry.type === 'file' ? entry.size : 0, uid: 0, gid: 0, atime: mtime, mtime };
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** An `ls -l` line for the entry, as sftp's `ls -l` shows it. */
export function longName(entry: DirectoryEntry, attrs: Attrs): string {
  const kind = { file: '-', dir: 'd', symlink: 'l', other: '?' }[entry.type];
  let perms = '';
  for (let bit = 8; bit >= 0; bit--) perms += attrs.mode & (1 << bit) ? 'rwx'[(8 - bit) % 3] : '-';
  const when = new Date(attrs.mtime * 1000);
  const date = `${MONTHS[when.getUTCMonth()]} ${String(when.getUTCDate()).padStart(2)} ${String(when.getUTCFullYear()).padStart(5)}`;
  return `${kind}${perms}    1 root     root     ${String(attrs.size).padStart(8)} ${date} ${entry.name}`;
}

export function fileAttrs(info: Record<string, unknown> | undefined): Attrs {
  const now = Math.floor(Date.now() / 1000);
  const size = typeof info?.size === 'number' ? info.size : 0;
  const mode = typeof info?.mode === 'number' ? info.mode & 0o7777 : 0o644;
  return { mode: S_IFREG | mode, size, uid: 0, gid: 0, atime: now, mtime: now };
}

export function directoryAttrs(): Attrs {
  const now = Math.floor(Date.now() / 1000);
  return { mode: S_IFDIR | 0o755, size: 0, uid: 0, gid: 0, atime: now, mtime: now };
}
