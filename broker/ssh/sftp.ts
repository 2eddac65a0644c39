import { MAX_LIST_ENTRIES, type CopyParams } from '../../shared/protocol.js';
import { normalizeDevicePath, type RemoteRequest } from '../../shared/resources.js';
import { directoryListing } from '../remote/service.js';
import type { Caller, Prepared, RemoteSessions } from '../remote/sessions.js';
import {
  absolute,
  directoryAttrs,
  entryAttrs,
  fileAttrs,
  longName,
  S_IFLNK,
  S_IFMT,
  SFTP_STATUS,
  statusOf,
  type Attrs,
  type SftpStream,
} from './sftp-answers.js';
import { SftpFile } from './sftp-file.js';
import { SftpFlow } from './sftp-flow.js';

export { SFTP_STATUS, type SftpStream } from './sftp-answers.js';

const OPEN_WRITE = 0x2;
const OPEN_APPEND = 0x4;
/** Open files and directories of one sftp session at once. */
export const SFTP_MAX_HANDLES = 4;
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

/** How a rename's target is decided at the broker (its source is the copy session's own request), and a refusal audited. */
export interface TargetCheck {
  decide(request: RemoteRequest): Promise<{ allowed: boolean; reason: string }>;
  refuse(options: Record<string, unknown>, reason: string): Promise<void>;
}

/**
 * The sftp subsystem (sftp, and scp in OpenSSH ≥ 9) on a device's connection, mapped onto copy
 * sessions: a file opened for reading is a download, one opened for writing an upload, each decided
 * with copy(direction;path), audited, re-checked and listed like any copy. A directory opened is a
 * copy channel's `list`, decided and audited as a download of it: the device lists it within the
 * grant's roots, symlinks shown as such and never followed, so `ls`, `get -r` and `scp -r` from the
 * device work. A directory made is a copy channel's `mkdir`, decided and audited as an upload of it,
 * so `mkdir`, `put -r` and `scp -r` to the device work too; `rm`, `rmdir` and `rename` likewise
 * (see change).
 */
export class SftpBridge {
  private readonly files = new Map<string, SftpFile>();
  private readonly dirs = new Map<string, SftpDir>();
  /** Entries of recent listings by full path, answering a stat of one of them (see LISTED_FRESH_MS). */
  private readonly listed = new Map<string, { attrs: Attrs; at: number }>();
  private nextHandle = 0;
  private readonly flow: SftpFlow;

  constructor(
    private readonly sftp: SftpStream,
    private readonly caller: Caller,
    private readonly deviceId: string,
    private readonly sessions: Pick<RemoteSessions, 'authorizeAndOpen' | 'adopt' | 'finish'>,
    private readonly target?: TargetCheck,
  ) {
    this.flow = new SftpFlow(sftp);
  }

  start(): void {
    const { sftp, flow } = this;
    flow.start();
    flow.onWindow(() => {
      for (const file of this.files.values()) file.resume();
    });
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
    sftp.on(
      'REMOVE',
      guard((reqid, path: string) => this.change(reqid, 'remove', path)),
    );
    sftp.on(
      'RMDIR',
      guard((reqid, path: string) => this.change(reqid, 'rmdir', path)),
    );
    sftp.on(
      'RENAME',
      guard((reqid, from: string, to: string) => this.change(reqid, 'rename', from, to)),
    );
    // limits@openssh.com (announced in our VERSION): the read and write sizes OpenSSH then uses.
    sftp.on(
      'EXTENDED',
      guard((reqid, name: string) => {
        if (name === 'limits@openssh.com' && flow.answerLimits(reqid)) return;
        sftp.status(reqid, SFTP_STATUS.opUnsupported, `${String(name).slice(0, 64)} is not supported through the fleet gateway`);
      }),
    );
    for (const op of ['READLINK', 'SYMLINK']) {
      sftp.on(
        op,
        guard((reqid) => sftp.status(reqid, SFTP_STATUS.opUnsupported, `${op.toLowerCase()} is not supported through the fleet gateway`)),
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
    // sftp never reads a copy's checksum: the device spends no CPU on one (CopyParams.checksum).
    const params: CopyParams = { direction, path: path ?? rawPath, checksum: false, ...(mode !== undefined ? { mode } : {}) };
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

  /**
   * Removes a file, an empty directory, or renames: a copy channel's `remove`, `rmdir` or `rename`,
   * decided and audited as an upload of the path (a rename as an upload of its source, naming its
   * target, which is decided as an upload first: refused, that is audited), and checked again on the device: each path's parent resolved and within the roots of
   * the grants that allow it (a rename's target within those of its source), the final component
   * never followed.
   */
  private async change(reqid: number, op: 'remove' | 'rmdir' | 'rename', rawPath: string, rawTo?: string): Promise<void> {
    const path = absolute(rawPath);
    const to = rawTo === undefined ? undefined : absolute(rawTo);
    const request: RemoteRequest = { action: 'copy', direction: 'upload', path: path ?? rawPath };
    const options = {
      direction: 'upload',
      path: rawPath.slice(0, 4096),
      op,
      sftp: true,
      ...(rawTo !== undefined ? { to: rawTo.slice(0, 4096) } : {}),
    };
    const params: CopyParams = { direction: op, path: path ?? rawPath, ...(rawTo !== undefined ? { to: to ?? rawTo } : {}) };
    if (op === 'rename' && this.target) {
      // Both paths decided here: the target as an upload of it too, refused and audited before the device is asked.
      const decision = await this.target.decide({ action: 'copy', direction: 'upload', path: to ?? rawTo ?? '' });
      if (!decision.allowed) {
        const reason = `Not allowed: the rename's target: ${decision.reason}.`;
        await this.target.refuse(options, reason);
        return this.sftp.status(reqid, SFTP_STATUS.permissionDenied, reason);
      }
    }
    const prepared = await this.sessions.authorizeAndOpen(this.caller, 'copy', this.deviceId, request, params, options);
    if (!prepared.ok) {
      const status = statusOf(prepared);
      return this.sftp.status(reqid, status.code, status.message);
    }
    prepared.channel.destroy();
    for (const named of [path, to]) if (named) this.listed.delete(named);
    const done = { remove: 'removed', rmdir: 'directory removed', rename: `renamed to ${to ?? rawTo}` }[op];
    await this.sessions.finish(prepared.auditId, prepared.startedAt, { bytesIn: 0, bytesOut: 0, reason: `${done} (sftp)` });
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
    const file = new SftpFile(writing, prepared.channel, fileAttrs(info), this.sftp, this.flow);
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
