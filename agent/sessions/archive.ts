/**
 * Copies as a gzip'd tar (qbee's file transfer): a download archives a file or a directory tree,
 * an upload extracts one. Paths are re-checked on the device as for plain copies (paths.ts); every
 * extracted entry must land inside the destination once symlinks are resolved, and a symlink in an
 * archive may only point inside it. Both directions stream with backpressure: memory holds a
 * chunk and a tar header, whatever the size of the tree.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import zlib from 'node:zlib';
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { CopyParams } from '../../shared/protocol.js';
import { pathWithin } from '../../shared/resources.js';
import { TarParser, tarEnd, tarHeader, tarPadding, type TarHeader } from '../../shared/tar.js';
import type { SessionContext } from './context.js';
import { resolveCopyTarget } from './paths.js';

function waitDrain(stream: NodeJS.WritableStream & { destroyed?: boolean }): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      stream.removeListener('drain', done);
      stream.removeListener('close', done);
      resolve();
    };
    stream.on('drain', done);
    stream.on('close', done);
  });
}

/** Download: archives the path; the bytes start once the broker half-closed (it then listens). */
export async function openArchiveDownload(channel: Channel, params: CopyParams, ctx: SessionContext): Promise<Record<string, unknown>> {
  const { target } = await resolveCopyTarget(params.path, 'download', params.allowed);
  let stat;
  try {
    stat = await fs.lstat(target);
  } catch (err) {
    throw new AgentRefusal('io_error', `Cannot read ${params.path} on the device: ${(err as Error).message}`);
  }
  if (!stat.isFile() && !stat.isDirectory()) throw new AgentRefusal('not_a_file', `${params.path} is neither a file nor a directory on the device.`);
  ctx.log('archive download started', { ch: channel.id, target });
  const start = () => void sendArchive(channel, target, ctx);
  channel.once('end', start);
  channel.resume();
  channel.once('close', () => channel.off('end', start));
  return { archive: 'tar.gz' };
}

async function sendArchive(channel: Channel, root: string, ctx: SessionContext): Promise<void> {
  const gzip = zlib.createGzip();
  gzip.pipe(channel, { end: false });
  const put = async (chunk: Buffer) => {
    if (!gzip.write(chunk)) await waitDrain(gzip);
  };
  let bytes = 0;
  const base = path.posix.dirname(root);
  const walk = async (abs: string): Promise<void> => {
    if (channel.destroyed) return;
    const st = await fs.lstat(abs);
    const name = path.posix.relative(base, abs);
    const header: TarHeader = { name, type: 'other', mode: st.mode & 0o7777, mtime: Math.floor(st.mtimeMs / 1000) };
    if (st.isDirectory()) {
      await put(tarHeader({ ...header, name: `${name}/`, type: 'directory' }));
      for (const child of (await fs.readdir(abs)).sort()) await walk(path.posix.join(abs, child));
    } else if (st.isFile()) {
      await put(tarHeader({ ...header, type: 'file', size: st.size }));
      let sent = 0;
      const file = await fs.open(abs, 'r');
      try {
        for await (const chunk of file.createReadStream({ highWaterMark: 64 * 1024, autoClose: false, end: st.size - 1 }) as AsyncIterable<Buffer>) {
          if (channel.destroyed) return;
          const piece = chunk.subarray(0, st.size - sent);
          sent += piece.length;
          await put(piece);
        }
      } finally {
        await file.close().catch(() => {});
      }
      // A file that shrank while being read is padded to the size its header announced.
      if (sent < st.size) await put(Buffer.alloc(st.size - sent));
      await put(tarPadding(st.size));
      bytes += st.size;
    } else if (st.isSymbolicLink()) {
      const link = await fs.readlink(abs);
      const resolved = path.posix.resolve(path.posix.dirname(abs), link);
      // A link leading out of the archived tree is left out, as qbee does.
      if (pathWithin(root, resolved)) await put(tarHeader({ ...header, type: 'symlink', linkname: link }));
    }
    // sockets, devices and fifos are left out
  };
  try {
    await walk(root);
    if (channel.destroyed) return void gzip.destroy();
    gzip.end(tarEnd());
    await new Promise<void>((resolve, reject) => {
      gzip.once('end', resolve);
      gzip.once('error', reject);
    });
    ctx.log('archive download done', { ch: channel.id, root, bytes });
    channel.control({ type: 'result', ok: true, bytes, sha256: '' });
    channel.end();
  } catch (err) {
    gzip.destroy();
    if (!channel.destroyed) {
      channel.control({ type: 'result', ok: false, bytes, sha256: '', error: (err as Error).message });
      channel.end();
    }
  }
}

/**
 * Upload: extracts into the path. An existing directory receives the archive's entries; otherwise
 * an archive of one directory becomes the path (its top directory renamed), and one of a single
 * file is written as the path. The end of the tar is the end of the upload: qbee clients wait for
 * the answer before they close the stream.
 */
export async function openArchiveUpload(channel: Channel, params: CopyParams, ctx: SessionContext): Promise<Record<string, unknown>> {
  const { target, dir } = await resolveCopyTarget(params.path, 'upload', params.allowed);
  let isDirectory = false;
  try {
    const st = await fs.stat(target);
    isDirectory = st.isDirectory();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
      throw new AgentRefusal('io_error', `Cannot use ${params.path} on the device: ${(err as Error).message}`);
  }
  ctx.log('archive upload started', { ch: channel.id, target });
  void extract(channel, target, dir, isDirectory, ctx);
  return { path: target };
}

class ExtractError extends Error {}

async function extract(channel: Channel, target: string, parentDir: string, targetIsDirectory: boolean, ctx: SessionContext): Promise<void> {
  const gunzip = zlib.createGunzip();
  const parser = new TarParser();
  let bytes = 0;
  let first = true;
  /** where entries go, and the prefix their names lose (a directory archive extracted as the target) */
  let into = targetIsDirectory ? target : parentDir;
  let strip = '';
  let singleFile: string | undefined;
  let current: fs.FileHandle | undefined;
  let finished = false;
  /** directories made by the extraction, given their permissions at the end (exactly, whatever the umask) */
  const directoryModes: [string, number][] = [];
  const realInto = async () => fs.realpath(into);

  const place = async (name: string): Promise<string> => {
    let rel = name;
    if (strip) {
      if (!rel.startsWith(strip)) throw new ExtractError(`Entry ${name} is outside the archived directory.`);
      rel = rel.slice(strip.length);
    }
    const dest = path.posix.resolve(into, rel);
    if (!pathWithin(into, dest)) throw new ExtractError(`Entry ${name} would land outside the destination.`);
    // The parent, once symlinks are resolved, must still be inside: a planted link cannot redirect a write.
    const parent = await fs.realpath(path.posix.dirname(dest)).catch(() => {
      throw new ExtractError(`The directory of ${name} does not exist on the device.`);
    });
    if (!pathWithin(await realInto(), parent)) throw new ExtractError(`Entry ${name} resolves outside the destination.`);
    return path.posix.join(parent, path.posix.basename(dest));
  };

  const onEntry = async (header: TarHeader) => {
    const safeMode = header.mode & 0o777;
    if (first) {
      first = false;
      if (!targetIsDirectory) {
        if (header.type === 'directory') {
          await fs.mkdir(target, { mode: 0o700 });
          directoryModes.push([target, safeMode || 0o755]);
          into = target;
          strip = header.name.endsWith('/') ? header.name : `${header.name}/`;
          return;
        }
        if (header.type !== 'file') throw new ExtractError('Transfer of this file type is not supported.');
        singleFile = target;
        current = await fs.open(target, 'w', 0o600);
        await current.chmod(safeMode || 0o644);
        return;
      }
    }
    if (singleFile) throw new ExtractError('An archive written as one file holds more than one entry.');
    if (header.type === 'directory') {
      const rel = strip ? header.name.slice(strip.length) : header.name;
      if (rel === '' || rel === '/') return;
      const dest = await place(header.name.replace(/\/$/, ''));
      const made = await fs.mkdir(dest, { recursive: false, mode: 0o700 }).then(
        () => true,
        (err: NodeJS.ErrnoException) => {
          if (err.code !== 'EEXIST') throw err;
          return false;
        },
      );
      // A directory made here gets the archive's permissions once its entries are in (an existing one keeps its own).
      if (made) directoryModes.push([dest, safeMode || 0o755]);
    } else if (header.type === 'file') {
      const dest = await place(header.name);
      await fs.rm(dest, { force: true }).catch(() => {});
      current = await fs.open(dest, 'wx', 0o600);
      await current.chmod(safeMode || 0o644);
    } else if (header.type === 'symlink' && header.linkname) {
      const dest = await place(header.name);
      const resolved = path.posix.resolve(path.posix.dirname(dest), header.linkname);
      if (!pathWithin(await realInto(), resolved)) throw new ExtractError(`Symlink ${header.name} points outside the destination.`);
      await fs.rm(dest, { force: true }).catch(() => {});
      await fs.symlink(header.linkname, dest);
    }
    // other entry types are skipped
  };

  let feed: Promise<void> | undefined;
  try {
    gunzip.on('error', () => {});
    // Reads on after the end marker until the broker ends the channel, so the client's last bytes never block it.
    feed = (async () => {
      for await (const chunk of channel.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
        if (finished) continue; // the gzip trailer after the tar's end, and anything else, is read and dropped
        if (!gunzip.write(chunk)) await waitDrain(gunzip);
      }
      if (!finished) gunzip.end();
    })();
    for await (const plain of gunzip as AsyncIterable<Buffer>) {
      for (const event of parser.push(plain)) {
        if (event.t === 'entry') await onEntry(event.header);
        else if (event.t === 'data' && current) {
          await current.write(event.data);
          bytes += event.data.length;
        } else if (event.t === 'end-entry' && current) {
          await current.close();
          current = undefined;
        }
      }
      if (parser.ended) {
        finished = true;
        break;
      }
    }
    if (!parser.ended) throw new ExtractError('The archive ended before its end marker: the upload was interrupted.');
    finished = true;
    for (const [dir, mode] of directoryModes.reverse()) await fs.chmod(dir, mode);
    ctx.log('archive upload done', { ch: channel.id, target, bytes });
    channel.control({ type: 'result', ok: true, bytes, sha256: '' });
    channel.end();
  } catch (err) {
    finished = true;
    await current?.close().catch(() => {});
    ctx.log('archive upload failed', { ch: channel.id, target, error: (err as Error).message });
    if (!channel.destroyed) {
      channel.control({ type: 'result', ok: false, bytes, sha256: '', error: (err as Error).message });
      channel.end();
    }
  } finally {
    gunzip.destroy();
    void feed?.catch(() => {});
  }
}
