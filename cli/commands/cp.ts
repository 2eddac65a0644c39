import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import zlib from 'node:zlib';
import cliProgress from 'cli-progress';
import type { ApiClient } from '../api.js';
import { humanDuration, resolveDevice } from '../devices.js';
import { CliError } from '../errors.js';
import { RemoteSession, SessionRefused, type ServerFrame } from '../remote.js';
import { pathWithin } from '../../shared/resources.js';
import { TarParser, tarEnd, tarHeader, tarPadding, type TarHeader } from '../../shared/tar.js';

const CHUNK = 64 * 1024;

interface RemotePath {
  device: string;
  path: string;
}

export interface CpOptions {
  recursive?: boolean;
}

/** `<device>:/abs/path` is on a device (a path there must be absolute); anything else is local. */
export function parseRemote(arg: string): RemotePath | undefined {
  const m = /^([^/:]+):(.*)$/.exec(arg);
  if (!m) return undefined;
  if (!m[2].startsWith('/'))
    throw new CliError(`${arg}: paths on a device are absolute: write ${m[1]}:/${m[2] || 'path/on/the/device'} (there is no current directory there).`);
  return { device: m[1], path: m[2] };
}

/** A local file system error as a sentence, not an errno code. */
export function localProblem(err: unknown, file: string, writing = false): CliError {
  const e = err as NodeJS.ErrnoException;
  const sentence: Record<string, string> = {
    ENOENT: writing ? `the directory ${path.dirname(file)} does not exist` : `${file} does not exist`,
    ENOTDIR: `a part of ${file} is not a directory`,
    EACCES: `permission denied for ${file}`,
    EPERM: `${file} may not be changed (operation not permitted)`,
    EISDIR: `${file} is a directory`,
    ENOSPC: `no space left on the local disk for ${file}`,
    EROFS: `${file} is on a read-only file system`,
    EEXIST: `${file} exists already`,
  };
  return new CliError(`${(e.code && sentence[e.code]) ?? `${file}: ${e.message}`}.`);
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
export function humanBytes(n: number): string {
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${UNITS[unit]}`;
}

/** A progress bar on a terminal's stderr: bytes, speed and time left in human units. Nothing elsewhere. */
function progressBar(label: string, total: number | undefined): { update(n: number): void; stop(): void } {
  if (!process.stderr.isTTY) return { update: () => {}, stop: () => {} };
  const known = total !== undefined && total > 0;
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: known ? `${label} [{bar}] {percentage}% | {done}/{size} | {speed} | ETA {left}` : `${label} {done} | {speed}`,
      hideCursor: true,
      clearOnComplete: false,
    },
    cliProgress.Presets.shades_classic,
  );
  const started = Date.now();
  const payload = (n: number) => {
    const rate = n / Math.max(0.001, (Date.now() - started) / 1000);
    return {
      done: humanBytes(n),
      size: humanBytes(total ?? 0),
      speed: `${humanBytes(Math.round(rate))}/s`,
      left: known && rate > 0 ? humanDuration(((total as number) - n) / rate) : '--:--',
    };
  };
  bar.start(known ? (total as number) : 1, 0, payload(0));
  return { update: (n) => bar.update(known ? n : 0, payload(n)), stop: () => bar.stop() };
}

async function sha256Of(file: string): Promise<string> {
  const hash = crypto.createHash('sha256');
  for await (const chunk of fs.createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** Waits for room to send again, or the end of the session; leaves no listener behind either way. */
function roomToSend(session: RemoteSession): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      session.off('drain', done);
      session.off('close', done);
      resolve();
    };
    session.on('drain', done);
    session.on('close', done);
  });
}

/** Waits for the final frame of a copy session; rejects with the broker's error. */
function finalResult(session: RemoteSession): Promise<{ bytes: number; sha256: string }> {
  return new Promise((resolve, reject) => {
    let result: { bytes: number; sha256: string } | undefined;
    session.on('frame', (frame: ServerFrame) => {
      if (frame.type === 'result' && frame.ok) result = { bytes: frame.bytes, sha256: frame.sha256 };
    });
    session.on('close', (code: number, reason: string, error?: { message: string }) => {
      if (result) return resolve(result);
      reject(new CliError(error?.message ?? `The copy ended without a result: ${reason || `closed (${code})`}.`));
    });
  });
}

async function localStat(local: string): Promise<fs.Stats> {
  return fsp.stat(local).catch((err) => {
    throw localProblem(err, local);
  });
}

async function upload(client: ApiClient, local: string, remote: RemotePath): Promise<void> {
  const stat = await localStat(local);
  if (stat.isDirectory()) throw new CliError(`${local} is a directory: copy it with -r.`);
  if (!stat.isFile()) throw new CliError(`${local} is not a regular file.`);
  const device = await resolveDevice(client, remote.device);
  const sha256 = await sha256Of(local);
  const query = (target: string) => ({
    device_id: device.id,
    direction: 'upload',
    path: target,
    size: stat.size,
    sha256,
    mode: `0${(stat.mode & 0o777).toString(8).padStart(3, '0')}`,
  });
  let target = remote.path.endsWith('/') ? `${remote.path}${path.basename(local)}` : remote.path;
  let session: RemoteSession;
  try {
    session = await RemoteSession.open(client, 'copy', query(target));
  } catch (err) {
    // A directory on the device named without its trailing slash: the file goes into it, as cp and scp do.
    if (!(err instanceof SessionRefused) || err.frame?.refusal !== 'not_a_file' || remote.path.endsWith('/')) throw err;
    target = `${remote.path}/${path.basename(local)}`;
    session = await RemoteSession.open(client, 'copy', query(target));
  }
  const done = finalResult(session);
  session.start();
  const bar = progressBar(`${path.basename(local)} → ${remote.device}`, stat.size);
  let sent = 0;
  try {
    const input = fs.createReadStream(local, { highWaterMark: CHUNK });
    for await (const chunk of input as AsyncIterable<Buffer>) {
      if (!session.send(chunk)) await roomToSend(session);
      sent += chunk.length;
      bar.update(sent);
    }
    session.control({ type: 'eof' });
    const result = await done;
    if (result.sha256 !== sha256) throw new CliError(`Checksum mismatch: the device has ${result.sha256}, the local file is ${sha256}.`);
  } finally {
    bar.stop();
    session.close();
  }
}

async function download(client: ApiClient, remote: RemotePath, local: string): Promise<void> {
  const device = await resolveDevice(client, remote.device);
  let target = local;
  const stat = await fsp.stat(local).catch(() => undefined);
  if (stat?.isDirectory() || local.endsWith('/')) target = path.join(local, path.posix.basename(remote.path));
  const temp = path.join(path.dirname(target), `.${path.basename(target)}.${crypto.randomBytes(4).toString('hex')}.fleet-download`);
  const session = await RemoteSession.open(client, 'copy', { device_id: device.id, direction: 'download', path: remote.path });
  const done = finalResult(session);
  const hash = crypto.createHash('sha256');
  const out = fs.createWriteStream(temp, { mode: 0o600 });
  const opened = new Promise<void>((resolve, reject) => {
    out.once('open', () => resolve());
    out.once('error', (err) => reject(localProblem(err, target, true)));
  });
  let bar = { update: (_n: number) => {}, stop: () => {} };
  let mode = 0o644;
  let received = 0;
  session.on('frame', (frame: ServerFrame) => {
    if (frame.type === 'meta') {
      mode = frame.mode & 0o777;
      bar = progressBar(`${remote.device} → ${path.basename(target)}`, frame.size);
    }
  });
  session.on('data', (data: Buffer) => {
    hash.update(data);
    received += data.length;
    bar.update(received);
    if (!out.write(data)) {
      session.pause();
      out.once('drain', () => session.resume());
    }
  });
  session.start();
  try {
    await opened;
    const result = await done;
    await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(localProblem(err, target)) : resolve())));
    const local256 = hash.digest('hex');
    if (result.sha256 !== local256 || result.bytes !== received) {
      throw new CliError(`Checksum mismatch: the device sent ${result.sha256} (${result.bytes} bytes), ${local256} (${received} bytes) arrived.`);
    }
    // The device's permissions (never set-id bits), exactly, whatever the umask.
    await fsp.chmod(temp, mode);
    await fsp.rename(temp, target).catch((err) => {
      throw localProblem(err, target, true);
    });
  } catch (err) {
    out.destroy();
    await fsp.rm(temp, { force: true });
    throw err;
  } finally {
    bar.stop();
    session.close();
  }
}

/** A local file or tree as a gzip'd tar, names relative to its parent (as the agent archives). */
async function* tarOf(root: string, onFileBytes: (n: number) => void): AsyncGenerator<Buffer> {
  const base = path.dirname(root);
  const walk = async function* (abs: string): AsyncGenerator<Buffer> {
    const st = await fsp.lstat(abs).catch((err) => {
      throw localProblem(err, abs);
    });
    const name = path.relative(base, abs).split(path.sep).join('/');
    const header: TarHeader = { name, type: 'other', mode: st.mode & 0o777, mtime: Math.floor(st.mtimeMs / 1000) };
    if (st.isDirectory()) {
      yield tarHeader({ ...header, name: `${name}/`, type: 'directory' });
      const children = await fsp.readdir(abs).catch((err) => {
        throw localProblem(err, abs);
      });
      for (const child of children.sort()) yield* walk(path.join(abs, child));
    } else if (st.isFile()) {
      yield tarHeader({ ...header, type: 'file', size: st.size });
      let sent = 0;
      const file = await fsp.open(abs, 'r').catch((err) => {
        throw localProblem(err, abs);
      });
      try {
        if (st.size > 0)
          for await (const chunk of file.createReadStream({ highWaterMark: CHUNK, autoClose: false, end: st.size - 1 }) as AsyncIterable<Buffer>) {
            const piece = chunk.subarray(0, st.size - sent);
            sent += piece.length;
            onFileBytes(piece.length);
            yield piece;
          }
      } finally {
        await file.close().catch(() => {});
      }
      if (sent < st.size) yield Buffer.alloc(st.size - sent); // a file that shrank while read
      yield tarPadding(st.size);
    } else if (st.isSymbolicLink()) {
      yield tarHeader({ ...header, type: 'symlink', linkname: await fsp.readlink(abs) });
    }
    // sockets, devices and fifos are left out
  };
  yield* walk(root);
  yield tarEnd();
}

async function treeSize(abs: string): Promise<number> {
  const st = await fsp.lstat(abs);
  if (!st.isDirectory()) return st.isFile() ? st.size : 0;
  let total = 0;
  for (const child of await fsp.readdir(abs)) total += await treeSize(path.join(abs, child));
  return total;
}

/** `cp -r` to the device: the tree as a gzip'd tar, extracted there into an existing directory or as the path. */
async function uploadTree(client: ApiClient, local: string, remote: RemotePath): Promise<void> {
  const stat = await localStat(local);
  if (!stat.isDirectory()) return upload(client, local, remote);
  const device = await resolveDevice(client, remote.device);
  const target = remote.path.length > 1 ? remote.path.replace(/\/+$/, '') : remote.path;
  const session = await RemoteSession.open(client, 'copy', { device_id: device.id, direction: 'upload', path: target, format: 'tar.gz' });
  const done = finalResult(session);
  session.start();
  const bar = progressBar(`${path.basename(local)}/ → ${remote.device}`, await treeSize(local).catch(() => undefined));
  let sent = 0;
  const gzip = zlib.createGzip();
  const pumped = (async () => {
    for await (const chunk of gzip as AsyncIterable<Buffer>) if (!session.send(chunk)) await roomToSend(session);
  })();
  try {
    for await (const piece of tarOf(path.resolve(local), (n) => bar.update((sent += n)))) {
      if (!gzip.write(piece)) await new Promise((resolve) => gzip.once('drain', resolve));
    }
    gzip.end();
    await pumped;
    session.control({ type: 'eof' });
    await done;
  } finally {
    gzip.destroy();
    bar.stop();
    session.close();
  }
}

/**
 * A tar stream extracted at `local`: into it when it is an existing directory, otherwise as it (the
 * archive's top entry renamed). Every entry must land inside the destination once symlinks are
 * resolved, and a symlink may only point inside it: an archive from a device cannot write elsewhere.
 */
export async function extractTree(tar: AsyncIterable<Buffer>, local: string, onBytes: (n: number) => void = () => {}): Promise<void> {
  const existing = await fsp.stat(local).catch(() => undefined);
  const into = existing?.isDirectory() ? path.resolve(local) : path.dirname(path.resolve(local));
  const realInto = await fsp.realpath(into).catch((err) => {
    throw localProblem(err, path.resolve(local), true);
  });
  const parser = new TarParser();
  let first = true;
  let renameTop: { from: string; to: string } | undefined;
  let current: fsp.FileHandle | undefined;
  const directoryModes: [string, number][] = [];
  const outside = (name: string) => new CliError(`The device sent an entry outside the copy (${name}); nothing more was written.`);
  /** The archive's name as a local path: inside the destination once symlinks are resolved, or refused. */
  const place = async (name: string): Promise<string> => {
    let rel = name.replace(/\/+$/, '');
    if (renameTop)
      rel = rel === renameTop.from ? renameTop.to : rel.startsWith(`${renameTop.from}/`) ? `${renameTop.to}${rel.slice(renameTop.from.length)}` : '';
    const dest = path.resolve(into, rel);
    if (!rel || path.isAbsolute(name) || !pathWithin(into, dest) || dest === into) throw outside(name);
    const parent = await fsp.realpath(path.dirname(dest)).catch(() => '');
    if (!parent || !pathWithin(realInto, parent)) throw outside(name);
    return path.join(parent, path.basename(dest));
  };
  try {
    for await (const plain of tar) {
      for (const event of parser.push(plain)) {
        if (event.t === 'entry') {
          const h = event.header;
          const mode = h.mode & 0o777;
          if (first) {
            first = false;
            // Not into an existing directory: the tree (or the file) becomes the local path itself.
            if (!existing?.isDirectory()) renameTop = { from: h.name.replace(/\/+$/, ''), to: path.basename(path.resolve(local)) };
          }
          const dest = await place(h.name);
          if (h.type === 'directory') {
            const made = await fsp.mkdir(dest, { mode: 0o700 }).then(
              () => true,
              (err: NodeJS.ErrnoException) => {
                if (err.code !== 'EEXIST') throw localProblem(err, dest);
                return false;
              },
            );
            if (made) directoryModes.push([dest, mode || 0o755]);
          } else if (h.type === 'file') {
            await fsp.rm(dest, { force: true }).catch(() => {});
            current = await fsp.open(dest, 'wx', 0o600).catch((err) => {
              throw localProblem(err, dest);
            });
            await current.chmod(mode || 0o644);
          } else if (h.type === 'symlink' && h.linkname) {
            if (!pathWithin(realInto, path.resolve(path.dirname(dest), h.linkname))) continue; // pointing out of the copy: left out
            await fsp.rm(dest, { force: true }).catch(() => {});
            await fsp.symlink(h.linkname, dest);
          }
        } else if (event.t === 'data' && current) {
          await current.write(event.data);
          onBytes(event.data.length);
        } else if (event.t === 'end-entry' && current) {
          await current.close();
          current = undefined;
        }
      }
      if (parser.ended) break;
    }
    if (!parser.ended) throw new CliError('The archive from the device ended early; the copy is incomplete.');
    for (const [dir, mode] of directoryModes.reverse()) await fsp.chmod(dir, mode);
  } finally {
    await current?.close().catch(() => {});
  }
}

/** `cp -r` from the device: its gzip'd tar extracted locally (see extractTree). */
async function downloadTree(client: ApiClient, remote: RemotePath, local: string): Promise<void> {
  const device = await resolveDevice(client, remote.device);
  const into = path.dirname(path.resolve(local));
  await fsp.stat(into).catch((err) => {
    throw localProblem(err, path.resolve(local), true);
  });
  const session = await RemoteSession.open(client, 'copy', { device_id: device.id, direction: 'download', path: remote.path, format: 'tar.gz' });
  const done = finalResult(session);
  const gunzip = zlib.createGunzip();
  session.on('data', (data: Buffer) => {
    if (!gunzip.write(data)) {
      session.pause();
      gunzip.once('drain', () => session.resume());
    }
  });
  session.on('close', () => gunzip.end());
  const bar = progressBar(`${remote.device} → ${local}`, undefined);
  let received = 0;
  // A refused entry stops the copy: the session is closed rather than left waiting on a full pipe.
  const extracted = extractTree(gunzip as AsyncIterable<Buffer>, local, (n) => bar.update((received += n))).then(
    () => undefined,
    (err: unknown) => {
      session.close();
      return err;
    },
  );
  try {
    session.start();
    const ended = await done.then(
      () => undefined,
      (err: unknown) => err,
    );
    const failure = await extracted;
    if (failure) throw failure;
    if (ended) throw ended;
  } finally {
    gunzip.destroy();
    bar.stop();
    session.close();
  }
}

/** `fleet cp [-r] <src> <dst>`: one side `<device>:/path`, the other local; files checked by SHA-256 end to end. */
export async function cpCommand(client: ApiClient, src: string, dst: string, options: CpOptions = {}): Promise<number> {
  const from = parseRemote(src);
  const to = parseRemote(dst);
  if (from && to) throw new CliError('Copy between two devices is not supported; copy through a local file.');
  if (!from && !to) throw new CliError('One of the paths must be on a device: <device>:/absolute/path.');
  if (to) await (options.recursive ? uploadTree(client, src, to) : upload(client, src, to));
  else await (options.recursive ? downloadTree(client, from as RemotePath, dst) : download(client, from as RemotePath, dst));
  return 0;
}
