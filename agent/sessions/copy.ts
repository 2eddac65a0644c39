import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { CopyParams } from '../../shared/protocol.js';
import type { SessionContext } from './context.js';
import { resolveCopyTarget } from './paths.js';

const SHA256_HEX = /^[0-9a-f]{64}$/;
/**
 * A download reads its file in pieces of this size: a read of 1 MiB costs about half the CPU per MB
 * of 64 KiB reads (fewer calls through the thread pool, fewer chunks through the stream); the
 * channel's window still bounds what waits to be sent.
 */
export const DOWNLOAD_READ = 1024 * 1024;
/**
 * An upload reads on from its channel while a file write runs, up to this many bytes, then pauses
 * it (the channel's credit then holds the broker back). Read, the bytes' credit goes back to the
 * broker at once: reading only between writes returned none while each write ran, and the broker
 * waited for credit about a quarter of an scp upload. At most this, one write's worth (the queue
 * taken at once, written in one writev) and the channel's window are held, whatever is sent.
 */
export const UPLOAD_QUEUE = 1024 * 1024;
/**
 * An upload flushes its file to disk (fdatasync, beside the writes that go on) each time this many
 * bytes were written since the last flush began: its final fsync, which the client's close waits
 * for, then has at most about this much left to write, not the whole file.
 */
export const UPLOAD_FLUSH_EVERY = 8 * 1024 * 1024;

function reason(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  if (e.code === 'ENOSPC') return 'The device is out of disk space.';
  if (e.code === 'EACCES' || e.code === 'EPERM') return 'The agent may not write there (permission denied on the device).';
  return e.message;
}

/** Makes a rename durable: the directory entry is flushed too (best effort; not every filesystem allows it). */
async function syncDirectory(dir: string): Promise<void> {
  let handle: fs.FileHandle | undefined;
  try {
    handle = await fs.open(dir, 'r');
    await handle.sync();
  } catch {
    // fsync on a directory is refused on some filesystems; the rename itself is still atomic
  } finally {
    await handle?.close().catch(() => {});
  }
}

/**
 * Upload to the device: the bytes go to a temporary file beside the target, are checked against
 * the size and SHA-256 the client announced, flushed to disk, and only then renamed over the
 * target, so a reader never sees a half-written file and a failed copy leaves nothing behind.
 */
export async function openUpload(channel: Channel, params: CopyParams, ctx: SessionContext): Promise<Record<string, unknown>> {
  if (params.size !== undefined && (!Number.isSafeInteger(params.size) || params.size < 0))
    throw new AgentRefusal('invalid_request', 'The announced size is not a valid byte count.');
  const expectedSha = params.sha256?.toLowerCase();
  if (expectedSha !== undefined && !SHA256_HEX.test(expectedSha)) throw new AgentRefusal('invalid_request', 'The announced sha256 is not 64 hex digits.');
  if (params.mode !== undefined && (!Number.isInteger(params.mode) || params.mode < 0 || params.mode > 0o777))
    throw new AgentRefusal('invalid_request', 'The announced mode is not permissions from 0 to 0777 (set-id and sticky bits are not copied).');
  const { target, dir, name } = await resolveCopyTarget(params.path, 'upload', params.allowed);
  // A new file gets the client's permissions (never set-id bits), 0644 without; exactly, whatever the umask.
  let mode = params.mode ?? 0o644;
  try {
    const existing = await fs.lstat(target);
    if (existing.isDirectory()) throw new AgentRefusal('not_a_file', `${params.path} is a directory on the device; name the file to write.`);
    if (existing.isFile()) mode = existing.mode & 0o7777; // replacing a file keeps its permissions
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const temp = path.posix.join(dir, `.${name}.${crypto.randomBytes(6).toString('hex')}.fleet-upload`);
  let file: fs.FileHandle;
  try {
    file = await fs.open(temp, 'wx', 0o600);
    await file.chmod(mode);
  } catch (err) {
    throw new AgentRefusal('io_error', `Cannot write in ${dir} on the device: ${reason(err)}`);
  }
  ctx.log('upload started', { ch: channel.id, target });
  // Hashed when a checksum is to be checked, or answered (unless the opener never reads it: CopyParams.checksum).
  const hashing = expectedSha !== undefined || params.checksum !== false;
  void receive(channel, file, temp, target, dir, params.size, expectedSha, hashing, ctx);
  return { path: target };
}

async function receive(
  channel: Channel,
  file: fs.FileHandle,
  temp: string,
  target: string,
  dir: string,
  size: number | undefined,
  expectedSha: string | undefined,
  hashing: boolean,
  ctx: SessionContext,
): Promise<void> {
  const hash = hashing ? crypto.createHash('sha256') : undefined;
  let bytes = 0;
  let written = 0;
  let open = true;
  // What arrived and is not written yet, in arrival order; the writer takes all of it at each write.
  const queue: Buffer[] = [];
  let queued = 0;
  let tooLong = false;
  let ended = false;
  let wake: (() => void) | undefined;
  // The flush running beside the writes, if any; its failure fails the upload (a later fsync need
  // not report a write-back error again).
  let flushing: Promise<void> | undefined;
  let flushFailure: unknown;
  let flushedAt = 0;
  const onData = (chunk: Buffer) => {
    if (tooLong) return;
    bytes += chunk.length;
    if (size !== undefined && bytes > size) {
      tooLong = true;
      channel.pause();
    } else {
      hash?.update(chunk);
      queue.push(chunk);
      queued += chunk.length;
      if (queued >= UPLOAD_QUEUE) channel.pause();
    }
    wake?.();
  };
  const onEnd = () => {
    ended = true;
    wake?.();
  };
  channel.on('data', onData);
  channel.once('end', onEnd);
  channel.once('close', onEnd);
  try {
    while (!channel.destroyed && !tooLong) {
      if (queue.length === 0) {
        if (ended) break;
        await new Promise<void>((resolve) => (wake = resolve));
        wake = undefined;
        continue;
      }
      // Taking the queue lets the channel flow again: what arrives during this write is read (its
      // credit returned to the broker, which sends on) and waits here for the next one.
      const pieces = queue.splice(0);
      queued = 0;
      channel.resume();
      const { bytesWritten } = await file.writev(pieces);
      written += bytesWritten;
      if (flushFailure !== undefined) throw flushFailure;
      if (!flushing && written - flushedAt >= UPLOAD_FLUSH_EVERY) {
        flushedAt = written;
        flushing = file.datasync().then(
          () => (flushing = undefined),
          (err: unknown) => {
            flushFailure = err;
            flushing = undefined;
          },
        );
      }
    }
    await flushing;
    if (flushFailure !== undefined) throw flushFailure;
    if (tooLong) throw new Error(`More bytes arrived than the announced size of ${size}.`);
    // The broker half-closes after the last byte; a session torn down instead (the user went
    // away, access withdrawn) also ends the stream, but closes our side too. Never commit that.
    if (channel.writableEnded || channel.destroyed) throw new Error('The upload was interrupted.');
    // A write may take fewer bytes than it was given (a disk filling up): never commit such a file.
    if (written !== bytes) throw new Error(`The device wrote ${written} of the ${bytes} bytes received.`);
    const sha256 = hash?.digest('hex') ?? '';
    if (size !== undefined && bytes !== size) throw new Error(`Received ${bytes} bytes, ${size} were announced.`);
    if (expectedSha !== undefined && sha256 !== expectedSha)
      throw new Error(`Checksum mismatch: received data has sha256 ${sha256}, ${expectedSha} was announced.`);
    await file.sync();
    await file.close();
    open = false;
    await fs.rename(temp, target);
    await syncDirectory(dir);
    ctx.log('upload done', { ch: channel.id, target, bytes });
    channel.control({ type: 'result', ok: true, bytes, sha256 });
    channel.end();
  } catch (err) {
    // Nothing more is read for a failed upload: its credit stops what the broker sends.
    channel.pause();
    await flushing;
    if (open) await file.close().catch(() => {});
    await fs.rm(temp, { force: true }).catch(() => {});
    ctx.log('upload failed', { ch: channel.id, target, error: (err as Error).message });
    if (!channel.destroyed) {
      channel.control({ type: 'result', ok: false, bytes, sha256: '', error: reason(err) });
      channel.end();
    }
  } finally {
    channel.off('data', onData);
    channel.off('end', onEnd);
    channel.off('close', onEnd);
  }
}

/**
 * Download from the device. The file is opened before the session is accepted (so a missing or
 * unreadable file refuses it), its size and mode travel in the open answer, and the bytes start
 * once the broker has half-closed its side, its signal that it listens for the final result.
 */
export async function openDownload(channel: Channel, params: CopyParams, ctx: SessionContext): Promise<Record<string, unknown>> {
  const { target } = await resolveCopyTarget(params.path, 'download', params.allowed);
  let file: fs.FileHandle;
  let stat: Awaited<ReturnType<fs.FileHandle['stat']>>;
  try {
    file = await fs.open(target, 'r');
    stat = await file.stat();
  } catch (err) {
    throw new AgentRefusal('io_error', `Cannot read ${params.path} on the device: ${reason(err)}`);
  }
  if (!stat.isFile()) {
    await file.close();
    throw new AgentRefusal('not_a_file', `${params.path} is not a regular file on the device.`);
  }
  ctx.log('download started', { ch: channel.id, target, size: stat.size });
  const start = () => void send(channel, file, target, params.checksum !== false, ctx);
  channel.once('end', start);
  channel.resume(); // nothing is expected from the broker but its end
  channel.once('close', () => {
    channel.off('end', start);
    void file.close().catch(() => {});
  });
  return { size: stat.size, mode: stat.mode & 0o7777 };
}

/** Sends the file's bytes, then the result: their count, and their SHA-256 when `hashing` (else ''). */
async function send(channel: Channel, file: fs.FileHandle, target: string, hashing: boolean, ctx: SessionContext): Promise<void> {
  const hash = hashing ? crypto.createHash('sha256') : undefined;
  let bytes = 0;
  try {
    const stream = file.createReadStream({ highWaterMark: DOWNLOAD_READ, autoClose: false });
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      if (channel.destroyed) return;
      hash?.update(chunk);
      bytes += chunk.length;
      if (!channel.write(chunk))
        await new Promise<void>((resolve) => {
          const done = () => {
            channel.off('drain', done);
            channel.off('close', done);
            resolve();
          };
          channel.on('drain', done);
          channel.on('close', done);
        });
    }
    if (channel.destroyed) return;
    ctx.log('download done', { ch: channel.id, target, bytes });
    channel.control({ type: 'result', ok: true, bytes, sha256: hash?.digest('hex') ?? '' });
    channel.end();
  } catch (err) {
    if (!channel.destroyed) {
      channel.control({ type: 'result', ok: false, bytes, sha256: '', error: reason(err) });
      channel.end();
    }
  }
}
