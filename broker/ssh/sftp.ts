import type { Channel } from '../../shared/mux.js';
import { MAX_LIST_ENTRIES, type ChannelControl, type CopyParams, type DirectoryEntry } from '../../shared/protocol.js';
import { normalizeDevicePath, type RemoteRequest } from '../../shared/resources.js';
import type { ErrorFrame } from '../remote/relay.js';
import { directoryListing } from '../remote/service.js';
import type { Caller, LiveRelay, Prepared, RemoteSessions } from '../remote/sessions.js';

/** SFTP status codes (draft-ietf-secsh-filexfer-02, as OpenSSH speaks it). */
export const SFTP_STATUS = { ok: 0, eof: 1, noSuchFile: 2, permissionDenied: 3, failure: 4, opUnsupported: 8 } as const;
const OPEN_WRITE = 0x2;
const OPEN_APPEND = 0x4;
const S_IFREG = 0o100000;
const S_IFDIR = 0o040000;
const S_IFLNK = 0o120000;
const S_IFMT = 0o170000;
/** Open files and directories of one sftp session at once. */
export const SFTP_MAX_HANDLES = 4;
/** Bytes read ahead from the device for one open file, at most; the device waits beyond. */
const READ_AHEAD = 1024 * 1024;
/** Largest answer to one READ (OpenSSH asks for 32 KiB). */
const MAX_READ = 64 * 1024;
/** Answers ssh2 may hold for a client that asks and never reads them; past this the session is cut. */
const MAX_UNSENT_ANSWERS = 256;
/** Names in one answer to READDIR (a listing of up to 1000 is handed out in pieces). */
const NAMES_PER_READDIR = 100;
/**
 * How long the entries of a listing answer a stat of one of them (a recursive get stats what it just
 * listed): that listing was decided and audited; past this a stat asks the device again.
 */
const LISTED_FRESH_MS = 10_000;
/** Entries remembered from listings, at most; past this the memory starts afresh. */
const MAX_LISTED = 5000;

interface Attrs {
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

/**
 * One open file: a copy session (download for reading, upload for writing) of the broker's
 * machinery, adopted so it is listed, re-checked and endable like any other. Reads and writes
 * must be sequential (as scp and sftp's get and put make them); the copy channel has no seek.
 */
class SftpFile implements LiveRelay {
  readonly done: Promise<{ bytesIn: number; bytesOut: number; reason: string; failed?: boolean }>;
  private resolveDone!: (end: { bytesIn: number; bytesOut: number; reason: string; failed?: boolean }) => void;
  bytesIn = 0;
  bytesOut = 0;
  position = 0;
  private held: Buffer[] = [];
  private heldBytes = 0;
  private ended = false;
  failure?: string;
  private result?: { ok: boolean; error?: string };
  private readonly waiting: { reqid: number; length: number }[] = [];
  private onResult?: () => void;
  private reason?: string;

  constructor(
    readonly writing: boolean,
    readonly channel: Channel,
    readonly attrs: Attrs,
    private readonly sftp: SftpStream,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    channel.on('control', (msg: ChannelControl) => {
      if (msg.type !== 'result') return;
      this.result = { ok: msg.ok, ...(msg.error ? { error: msg.error } : {}) };
      this.reason ??= msg.ok ? `copied ${msg.bytes} bytes` : `copy failed: ${msg.error ?? 'unknown error'}`;
      this.onResult?.();
    });
    channel.on('close', () => {
      if (channel.errored) this.failure ??= channel.errored.message;
      this.ended = true;
      this.serve();
      this.onResult?.();
      this.resolveDone({ bytesIn: this.bytesIn, bytesOut: this.bytesOut, reason: this.reason ?? 'closed', failed: !!this.failure });
    });
    // An upload's channel carries nothing back but its result; read it so its end is seen.
    if (writing) channel.resume();
    if (!writing) {
      channel.on('data', (chunk: Buffer) => {
        this.held.push(chunk);
        this.heldBytes += chunk.length;
        if (this.heldBytes >= READ_AHEAD) channel.pause();
        this.serve();
      });
      channel.on('end', () => {
        this.ended = true;
        this.serve();
      });
      // Our end of a download is the agent's signal to start sending.
      channel.end();
    }
  }

  read(reqid: number, offset: number, length: number): void {
    // Past the end (a client reads ahead of the size it was told): end of file.
    if (offset >= this.attrs.size && this.waiting.length === 0 && this.heldBytes === 0) return this.sftp.status(reqid, SFTP_STATUS.eof);
    if (offset !== this.position + this.queued()) return this.sftp.status(reqid, SFTP_STATUS.failure, 'only sequential reads are supported');
    this.waiting.push({ reqid, length: Math.max(0, Math.min(length, MAX_READ)) });
    this.serve();
  }

  private queued(): number {
    return this.waiting.reduce((n, w) => n + w.length, 0);
  }

  private serve(): void {
    while (this.waiting.length > 0) {
      const next = this.waiting[0];
      if (this.failure || (this.result && !this.result.ok)) {
        this.waiting.shift();
        this.sftp.status(next.reqid, SFTP_STATUS.failure, this.failure ?? this.result?.error ?? 'copy failed');
        continue;
      }
      if (this.heldBytes < next.length && !this.ended) return;
      this.waiting.shift();
      if (this.heldBytes === 0) {
        this.sftp.status(next.reqid, SFTP_STATUS.eof);
        continue;
      }
      const all = Buffer.concat(this.held);
      const out = all.subarray(0, next.length);
      const rest = all.subarray(next.length);
      this.held = rest.length ? [rest] : [];
      this.heldBytes = rest.length;
      this.position += out.length;
      this.bytesOut += out.length;
      this.sftp.data(next.reqid, out);
      // Short only at the end of the file: what was asked beyond it is the end of file.
      if (out.length < next.length) for (const w of this.waiting.splice(0)) this.sftp.status(w.reqid, SFTP_STATUS.eof);
    }
    if (this.heldBytes < READ_AHEAD && this.channel.isPaused() && !this.channel.destroyed) this.channel.resume();
  }

  write(reqid: number, offset: number, data: Buffer): void {
    if (offset !== this.position) return this.sftp.status(reqid, SFTP_STATUS.failure, 'only sequential writes are supported');
    if (this.failure || this.channel.destroyed) return this.sftp.status(reqid, SFTP_STATUS.failure, this.failure ?? 'the copy has ended');
    this.position += data.length;
    this.bytesIn += data.length;
    this.attrs.size = this.position;
    // The answer waits for the device's channel to take it: the client's pipeline is the bound.
    if (this.channel.write(data)) this.sftp.status(reqid, SFTP_STATUS.ok);
    else this.channel.once('drain', () => this.sftp.status(reqid, SFTP_STATUS.ok));
  }

  /** Closing a written file waits for the device to check and rename it. */
  async close(): Promise<{ ok: boolean; error?: string }> {
    if (!this.writing) {
      if (!this.channel.destroyed) this.channel.destroy();
      return { ok: true };
    }
    if (!this.channel.destroyed && !this.channel.writableEnded) this.channel.end();
    if (!this.result && !this.ended) await new Promise<void>((resolve) => (this.onResult = resolve));
    if (!this.channel.destroyed) this.channel.destroy();
    return this.result ?? { ok: false, error: this.failure ?? 'the copy ended without a result' };
  }

  abort(frame: ErrorFrame, _code: number, reason: string): void {
    this.reason ??= reason;
    this.failure ??= frame.message;
    if (!this.channel.destroyed) this.channel.destroy();
  }
}

/** One name of a READDIR answer. */
interface SftpName {
  filename: string;
  longname: string;
  attrs: Attrs;
}

/** An open directory: its listing, read whole from the device at OPENDIR and handed out in pieces. */
interface SftpDir {
  path: string;
  names: SftpName[];
  next: number;
  truncated: boolean;
}

/** What sftp's answers are made of, from a refusal of the session machinery. */
function statusOf(prepared: Extract<Prepared, { ok: false }>): { code: number; message: string; notAFile: boolean } {
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

/**
 * The sftp subsystem (sftp, and scp in OpenSSH ≥ 9) on a device's connection, mapped onto copy
 * sessions: a file opened for reading is a download, one opened for writing an upload, each decided
 * with copy(direction;path), audited, re-checked and listed like any copy. A directory opened is a
 * copy channel's `list`, decided and audited as a download of it: the device lists it within the
 * grant's roots, symlinks shown as such and never followed, so `ls`, `get -r` and `scp -r` from the
 * device work. A directory made is a copy channel's `mkdir`, decided and audited as an upload of it,
 * so `mkdir`, `put -r` and `scp -r` to the device work too.
 */
export class SftpBridge {
  private readonly files = new Map<string, SftpFile>();
  private readonly dirs = new Map<string, SftpDir>();
  /** Entries of recent listings by full path, answering a stat of one of them (see LISTED_FRESH_MS). */
  private readonly listed = new Map<string, { attrs: Attrs; at: number }>();
  private nextHandle = 0;

  constructor(
    private readonly sftp: SftpStream,
    private readonly caller: Caller,
    private readonly deviceId: string,
    private readonly sessions: Pick<RemoteSessions, 'authorizeAndOpen' | 'adopt' | 'finish'>,
  ) {}

  start(): void {
    const { sftp } = this;
    const guard =
      <A extends unknown[]>(fn: (reqid: number, ...args: A) => Promise<void> | void) =>
      (reqid: number, ...args: A) => {
        const unsent = (sftp as unknown as { _buffer?: unknown[] })._buffer?.length ?? 0;
        if (unsent > MAX_UNSENT_ANSWERS) return sftp.destroy();
        void Promise.resolve(fn(reqid, ...args)).catch(() => sftp.status(reqid, SFTP_STATUS.failure, 'the broker failed to answer; the error is logged'));
      };
    sftp.on(
      'REALPATH',
      guard((reqid, path: string) => this.realpath(reqid, path)),
    );
    sftp.on(
      'STAT',
      guard((reqid, path: string) => this.stat(reqid, path, true)),
    );
    sftp.on(
      'LSTAT',
      guard((reqid, path: string) => this.stat(reqid, path, false)),
    );
    sftp.on(
      'OPENDIR',
      guard((reqid, path: string) => this.opendir(reqid, path)),
    );
    sftp.on(
      'READDIR',
      guard((reqid, handle: Buffer) => this.readdir(reqid, handle)),
    );
    sftp.on(
      'MKDIR',
      guard((reqid, path: string, attrs: Partial<Attrs>) => this.mkdir(reqid, path, attrs)),
    );
    sftp.on(
      'FSTAT',
      guard((reqid, handle: Buffer) => this.withFile(reqid, handle, (f) => sftp.attrs(reqid, f.attrs))),
    );
    sftp.on(
      'OPEN',
      guard((reqid, path: string, flags: number, attrs: Partial<Attrs>) => this.open(reqid, path, flags, attrs)),
    );
    sftp.on(
      'READ',
      guard((reqid, handle: Buffer, offset: number, length: number) => this.withFile(reqid, handle, (f) => f.read(reqid, offset, length))),
    );
    sftp.on(
      'WRITE',
      guard((reqid, handle: Buffer, offset: number, data: Buffer) => this.withFile(reqid, handle, (f) => f.write(reqid, offset, data))),
    );
    sftp.on(
      'CLOSE',
      guard((reqid, handle: Buffer) => this.close(reqid, handle)),
    );
    // Permissions and times come with the open (the agent sets the mode of a new file); nothing more to set.
    sftp.on(
      'SETSTAT',
      guard((reqid) => sftp.status(reqid, SFTP_STATUS.ok)),
    );
    sftp.on(
      'FSETSTAT',
      guard((reqid) => sftp.status(reqid, SFTP_STATUS.ok)),
    );
    for (const op of ['REMOVE', 'RMDIR', 'RENAME', 'READLINK', 'SYMLINK', 'EXTENDED']) {
      sftp.on(
        op,
        guard((reqid) =>
          sftp.status(reqid, SFTP_STATUS.opUnsupported, `${op.toLowerCase()} is not supported through the fleet gateway: files are copied one by one`),
        ),
      );
    }
    // The client is done (its end of the channel): close ours, which ends the session.
    sftp.on('end', () => {
      // Exit status 0 first, as sshd's sftp-server gives (ssh2's SFTP stream has no method for it).
      const raw = sftp as unknown as { _protocol?: { exitStatus(id: number, status: number): void }; outgoing?: { id: number; state: string } };
      if (raw.outgoing?.state === 'open') raw._protocol?.exitStatus(raw.outgoing.id, 0);
      sftp.end();
    });
    sftp.on('close', () => {
      for (const file of this.files.values()) void file.close();
      this.files.clear();
      this.dirs.clear();
      this.listed.clear();
    });
  }

  private withFile(reqid: number, handle: Buffer, act: (file: SftpFile) => void): void {
    const file = this.files.get(handle.toString('hex'));
    if (!file) return this.sftp.status(reqid, SFTP_STATUS.failure, 'no such open file');
    act(file);
  }

  private realpath(reqid: number, path: string): void {
    // Relative names are from `/` (the agent has no working directory for a copy).
    const absolute = normalizeDevicePath(path.startsWith('/') ? path : `/${path === '.' ? '' : path}`) ?? '/';
    this.sftp.name(reqid, [{ filename: absolute, longname: absolute, attrs: {} }]);
  }

  private async request(direction: 'upload' | 'download', rawPath: string, mode?: number): Promise<Prepared> {
    const path = absolute(rawPath);
    const request: RemoteRequest = { action: 'copy', direction, path: path ?? rawPath };
    const options: Record<string, unknown> = {
      direction,
      path: rawPath.slice(0, 4096),
      sftp: true,
      ...(mode !== undefined ? { mode: `0${mode.toString(8)}` } : {}),
    };
    const params = { direction, path: path ?? rawPath, ...(mode !== undefined ? { mode } : {}) };
    return this.sessions.authorizeAndOpen(this.caller, 'copy', this.deviceId, request, params, options);
  }

  /**
   * A stat of an entry of a recent listing answers from it (a symlink too, unless the stat follows
   * it); any other opens the file as a download and closes it at once (audited like any copy
   * attempt): the device refusing it as not a file answers a directory.
   */
  private async stat(reqid: number, path: string, follow: boolean): Promise<void> {
    if (path === '/' || path.endsWith('/') || path === '.') return this.sftp.attrs(reqid, directoryAttrs());
    const seen = this.listed.get(absolute(path) ?? '');
    if (seen && Date.now() - seen.at < LISTED_FRESH_MS && !(follow && (seen.attrs.mode & S_IFMT) === S_IFLNK)) return this.sftp.attrs(reqid, seen.attrs);
    const prepared = await this.request('download', path);
    if (!prepared.ok) {
      const status = statusOf(prepared);
      if (status.notAFile) return this.sftp.attrs(reqid, directoryAttrs());
      return this.sftp.status(reqid, status.code, status.message);
    }
    prepared.channel.destroy();
    await this.sessions.finish(prepared.auditId, prepared.startedAt, { bytesIn: 0, bytesOut: 0, reason: 'sftp stat' });
    this.sftp.attrs(reqid, fileAttrs(prepared.relayOptions.info));
  }

  private newHandle(): Buffer {
    const handle = Buffer.alloc(4);
    handle.writeUInt32BE(this.nextHandle++ >>> 0);
    return handle;
  }

  /**
   * Opens a directory: the device lists it (a copy channel's `list`, decided and audited as a
   * download of that directory, checked again on the device against the grant's roots) and the
   * whole listing waits here for READDIR. Its entries answer stats for a while (LISTED_FRESH_MS).
   */
  private async opendir(reqid: number, rawPath: string): Promise<void> {
    if (this.files.size + this.dirs.size >= SFTP_MAX_HANDLES)
      return this.sftp.status(reqid, SFTP_STATUS.failure, `at most ${SFTP_MAX_HANDLES} open files and directories at once`);
    const path = absolute(rawPath);
    const request: RemoteRequest = { action: 'copy', direction: 'download', path: path ?? rawPath };
    const options = { direction: 'download', path: rawPath.slice(0, 4096), op: 'list', sftp: true };
    const params: CopyParams = { direction: 'list', path: path ?? rawPath };
    const prepared = await this.sessions.authorizeAndOpen(this.caller, 'copy', this.deviceId, request, params, options);
    if (!prepared.ok) {
      const status = statusOf(prepared);
      return this.sftp.status(reqid, status.code, status.message);
    }
    prepared.channel.destroy();
    const parsed = directoryListing.safeParse(prepared.relayOptions.info);
    if (!parsed.success) {
      await this.sessions.finish(prepared.auditId, prepared.startedAt, {
        bytesIn: 0,
        bytesOut: 0,
        reason: 'the device answered a malformed listing',
        result: 'error',
      });
      return this.sftp.status(reqid, SFTP_STATUS.failure, 'The device answered a malformed directory listing; update its agent.');
    }
    const { entries, truncated } = parsed.data;
    await this.sessions.finish(prepared.auditId, prepared.startedAt, {
      bytesIn: 0,
      bytesOut: Buffer.byteLength(JSON.stringify(parsed.data)),
      reason: `listed ${entries.length} entries${truncated ? `, cut at ${entries.length}` : ''} (sftp)`,
    });
    // Names are the client's path joined with the entry (a symlinked directory stays under the name asked for).
    const dir = path ?? '/';
    const now = Date.now();
    if (this.listed.size + entries.length > MAX_LISTED) this.listed.clear();
    const names = entries
      .filter((e) => e.name !== '.' && e.name !== '..' && !e.name.includes('/'))
      .map((e) => {
        const attrs = entryAttrs(e);
        this.listed.set(dir === '/' ? `/${e.name}` : `${dir}/${e.name}`, { attrs, at: now });
        return { filename: e.name, longname: longName(e, attrs), attrs };
      });
    const handle = this.newHandle();
    this.dirs.set(handle.toString('hex'), { path: dir, names, next: 0, truncated });
    this.sftp.handle(reqid, handle);
  }

  /**
   * The next names of an open directory, then its end. A listing the device cut (more than it
   * lists) ends in a failure rather than an end: a recursive copy must not pass for complete.
   */
  private readdir(reqid: number, handle: Buffer): void {
    const dir = this.dirs.get(handle.toString('hex'));
    if (!dir) return this.sftp.status(reqid, SFTP_STATUS.failure, 'no such open directory');
    if (dir.next < dir.names.length) {
      const names = dir.names.slice(dir.next, dir.next + NAMES_PER_READDIR);
      dir.next += names.length;
      return this.sftp.name(reqid, names);
    }
    if (dir.truncated)
      return this.sftp.status(
        reqid,
        SFTP_STATUS.failure,
        `${dir.path} holds more entries than one listing carries (${MAX_LIST_ENTRIES}); list or copy its parts instead`,
      );
    this.sftp.status(reqid, SFTP_STATUS.eof);
  }

  /**
   * Makes a directory: a copy channel's `mkdir`, decided and audited as an upload of that path and
   * checked again on the device (parent resolved, within the grant's roots, a planted symlink never
   * followed). An agent that cannot make directories answers unsupported.
   */
  private async mkdir(reqid: number, rawPath: string, attrs: Partial<Attrs>): Promise<void> {
    const path = absolute(rawPath);
    const mode = typeof attrs?.mode === 'number' ? attrs.mode & 0o777 : undefined;
    const request: RemoteRequest = { action: 'copy', direction: 'upload', path: path ?? rawPath };
    const options = {
      direction: 'upload',
      path: rawPath.slice(0, 4096),
      op: 'mkdir',
      sftp: true,
      ...(mode !== undefined ? { mode: `0${mode.toString(8)}` } : {}),
    };
    const params: CopyParams = { direction: 'mkdir', path: path ?? rawPath, ...(mode !== undefined ? { mode } : {}) };
    const prepared = await this.sessions.authorizeAndOpen(this.caller, 'copy', this.deviceId, request, params, options);
    if (!prepared.ok) {
      const status = statusOf(prepared);
      return this.sftp.status(reqid, status.code, status.message);
    }
    prepared.channel.destroy();
    await this.sessions.finish(prepared.auditId, prepared.startedAt, { bytesIn: 0, bytesOut: 0, reason: 'directory made (sftp)' });
    this.sftp.status(reqid, SFTP_STATUS.ok);
  }

  private async open(reqid: number, path: string, flags: number, attrs: Partial<Attrs>): Promise<void> {
    if (this.files.size + this.dirs.size >= SFTP_MAX_HANDLES)
      return this.sftp.status(reqid, SFTP_STATUS.failure, `at most ${SFTP_MAX_HANDLES} open files at once`);
    const writing = (flags & OPEN_WRITE) !== 0;
    if (writing && (flags & OPEN_APPEND) !== 0)
      return this.sftp.status(reqid, SFTP_STATUS.opUnsupported, 'appending is not supported: files are written whole');
    const mode = writing && typeof attrs?.mode === 'number' ? attrs.mode & 0o777 : undefined;
    const prepared = await this.request(writing ? 'upload' : 'download', path, mode);
    if (!prepared.ok) {
      const status = statusOf(prepared);
      return this.sftp.status(reqid, status.code, status.message);
    }
    const info = writing ? { size: 0, mode: mode ?? 0o644 } : prepared.relayOptions.info;
    const file = new SftpFile(writing, prepared.channel, fileAttrs(info), this.sftp);
    this.sessions.adopt(prepared, file);
    const handle = this.newHandle();
    this.files.set(handle.toString('hex'), file);
    this.sftp.handle(reqid, handle);
  }

  private async close(reqid: number, handle: Buffer): Promise<void> {
    const key = handle.toString('hex');
    if (this.dirs.delete(key)) return this.sftp.status(reqid, SFTP_STATUS.ok);
    const file = this.files.get(key);
    if (!file) return this.sftp.status(reqid, SFTP_STATUS.failure, 'no such open file');
    this.files.delete(key);
    const result = await file.close();
    this.sftp.status(reqid, result.ok ? SFTP_STATUS.ok : SFTP_STATUS.failure, result.ok ? undefined : result.error);
  }
}

/** A path as the device names it: relative names are from `/` (a copy has no working directory). */
function absolute(rawPath: string): string | null {
  return normalizeDevicePath(rawPath.startsWith('/') ? rawPath : `/${rawPath}`);
}

/** An entry's attributes: its type, size and time as listed (the listing carries no permissions or owner). */
function entryAttrs(entry: DirectoryEntry): Attrs {
  const parsed = Date.parse(entry.mtime);
  const mtime = Number.isNaN(parsed) ? 0 : Math.floor(parsed / 1000);
  const mode = { file: S_IFREG | 0o644, dir: S_IFDIR | 0o755, symlink: S_IFLNK | 0o777, other: 0o644 }[entry.type];
  return { mode, size: entry.type === 'file' ? entry.size : 0, uid: 0, gid: 0, atime: mtime, mtime };
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** An `ls -l` line for the entry, as sftp's `ls -l` shows it. */
function longName(entry: DirectoryEntry, attrs: Attrs): string {
  const kind = { file: '-', dir: 'd', symlink: 'l', other: '?' }[entry.type];
  let perms = '';
  for (let bit = 8; bit >= 0; bit--) perms += attrs.mode & (1 << bit) ? 'rwx'[(8 - bit) % 3] : '-';
  const when = new Date(attrs.mtime * 1000);
  const date = `${MONTHS[when.getUTCMonth()]} ${String(when.getUTCDate()).padStart(2)} ${String(when.getUTCFullYear()).padStart(5)}`;
  return `${kind}${perms}    1 root     root     ${String(attrs.size).padStart(8)} ${date} ${entry.name}`;
}

function fileAttrs(info: Record<string, unknown> | undefined): Attrs {
  const now = Math.floor(Date.now() / 1000);
  const size = typeof info?.size === 'number' ? info.size : 0;
  const mode = typeof info?.mode === 'number' ? info.mode & 0o7777 : 0o644;
  return { mode: S_IFREG | mode, size, uid: 0, gid: 0, atime: now, mtime: now };
}

function directoryAttrs(): Attrs {
  const now = Math.floor(Date.now() / 1000);
  return { mode: S_IFDIR | 0o755, size: 0, uid: 0, gid: 0, atime: now, mtime: now };
}
