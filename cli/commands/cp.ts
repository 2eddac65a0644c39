import crypto from 'node:crypto';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import cliProgress from 'cli-progress';
import type { ApiClient } from '../api.js';
import { resolveDevice } from '../devices.js';
import { CliError } from '../errors.js';
import { RemoteSession, type ServerFrame } from '../remote.js';

const CHUNK = 64 * 1024;

interface RemotePath {
  device: string;
  path: string;
}

/** `<device>:/abs/path` is on a device; anything else is local. */
export function parseRemote(arg: string): RemotePath | undefined {
  const m = /^([^/:]+):(\/.*)$/.exec(arg);
  return m ? { device: m[1], path: m[2] } : undefined;
}

function progressBar(label: string, total: number): { update(n: number): void; stop(): void } {
  if (!process.stderr.isTTY) return { update: () => {}, stop: () => {} };
  const bar = new cliProgress.SingleBar(
    { stream: process.stderr, format: `${label} [{bar}] {percentage}% | {value}/{total} bytes | {eta_formatted}`, hideCursor: true, clearOnComplete: false },
    cliProgress.Presets.shades_classic,
  );
  bar.start(total, 0);
  return { update: (n) => bar.update(n), stop: () => bar.stop() };
}

async function sha256Of(file: string): Promise<string> {
  const hash = crypto.createHash('sha256');
  for await (const chunk of fs.createReadStream(file)) hash.update(chunk as Buffer);
  return hash.digest('hex');
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

async function upload(client: ApiClient, local: string, remote: RemotePath): Promise<void> {
  const stat = await fsp.stat(local).catch(() => {
    throw new CliError(`No file ${local}.`);
  });
  if (!stat.isFile()) throw new CliError(`${local} is not a regular file.`);
  const device = await resolveDevice(client, remote.device);
  const target = remote.path.endsWith('/') ? `${remote.path}${path.basename(local)}` : remote.path;
  const sha256 = await sha256Of(local);
  const session = await RemoteSession.open(client, 'copy', { device_id: device.id, direction: 'upload', path: target, size: stat.size, sha256 });
  const done = finalResult(session);
  session.start();
  const bar = progressBar(`${path.basename(local)} → ${remote.device}`, stat.size);
  let sent = 0;
  try {
    const input = fs.createReadStream(local, { highWaterMark: CHUNK });
    for await (const chunk of input as AsyncIterable<Buffer>) {
      if (!session.send(chunk))
        await new Promise<void>((resolve) => {
          session.once('drain', resolve);
          session.once('close', resolve);
        });
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
  const out = fs.createWriteStream(temp, { mode: 0o644 });
  const opened = new Promise<void>((resolve, reject) => {
    out.once('open', () => resolve());
    out.once('error', (err) => reject(new CliError(`Cannot write ${target}: ${(err as NodeJS.ErrnoException).code ?? err.message}.`)));
  });
  let bar = { update: (_n: number) => {}, stop: () => {} };
  let received = 0;
  session.on('frame', (frame: ServerFrame) => {
    if (frame.type === 'meta') bar = progressBar(`${remote.device} → ${path.basename(target)}`, frame.size);
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
    await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
    const local256 = hash.digest('hex');
    if (result.sha256 !== local256 || result.bytes !== received) {
      throw new CliError(`Checksum mismatch: the device sent ${result.sha256} (${result.bytes} bytes), ${local256} (${received} bytes) arrived.`);
    }
    await fsp.rename(temp, target);
  } catch (err) {
    out.destroy();
    await fsp.rm(temp, { force: true });
    throw err;
  } finally {
    bar.stop();
    session.close();
  }
}

/** `fleet cp <src> <dst>`: one side `<device>:/path`, the other local; checked by SHA-256 end to end. */
export async function cpCommand(client: ApiClient, src: string, dst: string): Promise<number> {
  const from = parseRemote(src);
  const to = parseRemote(dst);
  if (from && to) throw new CliError('Copy between two devices is not supported; copy through a local file.');
  if (!from && !to) throw new CliError('One of the paths must be on a device: <device>:/absolute/path.');
  if (to) await upload(client, src, to);
  else await download(client, from as RemotePath, dst);
  return 0;
}
