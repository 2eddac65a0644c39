/**
 * Files of the broker's file store for configuration bundles: the agent sends `file_request`, the
 * broker opens a `file` channel carrying the bytes (then eof) or answers `file_refused`. The bytes
 * land in a private temporary file, or straight in a file the bundle opened (`fetchInto`), and are
 * checked as they arrive against the size and SHA-256 the broker announced: more bytes than
 * announced stop the transfer, and nothing is used unless the digest matched.
 */
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { ControlMessage, FileParams } from '../../shared/protocol.js';

/** Largest file a bundle may fetch. */
export const MAX_FILE_BYTES = 1024 * 1024 * 1024;
/** How long a fetch may take from request to last byte. */
export const FETCH_TIMEOUT_MS = 10 * 60_000;
const SHA256_HEX = /^[0-9a-f]{64}$/;

/** A file received: where it is (unless it was written into the caller's file), its size and sha256. */
export interface Fetched {
  file?: string;
  size: number;
  sha256: string;
}

interface Pending {
  path: string;
  resolve: (fetched: Fetched) => void;
  reject: (err: Error) => void;
  timer: NodeJS.Timeout;
  channel?: Channel;
  /** the caller's open file the bytes go to (instead of a temporary file of ours) */
  into?: fs.FileHandle;
}

export class FileFetcher {
  private send?: (msg: ControlMessage) => void;
  private readonly pending = new Map<string, Pending>();

  constructor(
    /** private directory for the downloads (created on demand, mode 0700) */
    private readonly dir: string,
    private readonly timeoutMs = FETCH_TIMEOUT_MS,
    /** the message asking the broker for a file (agent updates ask with their own) */
    private readonly request: (id: string, path: string) => ControlMessage = (id, path) => ({ t: 'file_request', id, path }),
  ) {}

  /** Whether a `file` channel with these params answers one of our requests. */
  owns(params: unknown): boolean {
    const id = (params as { id?: unknown } | undefined)?.id;
    return typeof id === 'string' && this.pending.has(id);
  }

  /** The connection is up: requests go out through `send`. */
  attach(send: (msg: ControlMessage) => void): void {
    this.send = send;
  }

  /** The connection is gone: every fetch in progress fails. */
  detach(): void {
    this.send = undefined;
    for (const [id, p] of this.pending) this.fail(id, p, new Error('the connection to the broker was lost'));
  }

  get inFlight(): number {
    return this.pending.size;
  }

  /** Fetches `filePath` of the file store to a temporary file; the caller deletes it. */
  async fetch(filePath: string, signal?: AbortSignal): Promise<string> {
    const fetched = await this.start(filePath, signal);
    return fetched.file as string;
  }

  /**
   * Fetches `filePath` of the file store straight into the caller's open file (written from its
   * current position), checked against the size and sha256 the broker announced as it arrives.
   */
  fetchInto(filePath: string, into: fs.FileHandle, signal?: AbortSignal): Promise<{ size: number; sha256: string }> {
    return this.start(filePath, signal, into);
  }

  private async start(filePath: string, signal: AbortSignal | undefined, into?: fs.FileHandle): Promise<Fetched> {
    const send = this.send;
    if (!send) throw new Error(`cannot fetch ${filePath}: not connected to the broker`);
    if (signal?.aborted) throw new Error('the configuration run was stopped');
    if (!into) await fs.mkdir(this.dir, { recursive: true, mode: 0o700 });
    const id = crypto.randomBytes(12).toString('hex');
    return new Promise<Fetched>((resolve, reject) => {
      // the run's signal outlives the fetch: its listener goes when the fetch ends, however it ends
      const onAbort = () => {
        const p = this.pending.get(id);
        if (p) this.fail(id, p, new Error('the configuration run was stopped'));
      };
      const timer = setTimeout(() => {
        const p = this.pending.get(id);
        if (p) this.fail(id, p, new Error(`the broker did not send ${filePath} in time`));
      }, this.timeoutMs);
      const entry: Pending = {
        path: filePath,
        resolve: (fetched) => {
          signal?.removeEventListener('abort', onAbort);
          resolve(fetched);
        },
        reject: (err) => {
          signal?.removeEventListener('abort', onAbort);
          reject(err);
        },
        timer,
        ...(into ? { into } : {}),
      };
      this.pending.set(id, entry);
      signal?.addEventListener('abort', onAbort, { once: true });
      send(this.request(id, filePath));
    });
  }

  /** The broker's `file_refused`. */
  refused(id: unknown, error: unknown): void {
    if (typeof id !== 'string') return;
    const p = this.pending.get(id);
    if (!p || p.channel) return;
    const why = typeof error === 'string' ? error.slice(0, 500) : 'refused';
    this.fail(id, p, new Error(`the broker refused ${p.path}: ${why}`));
  }

  private fail(id: string, p: Pending, err: Error): void {
    clearTimeout(p.timer);
    this.pending.delete(id);
    p.channel?.destroy();
    p.reject(err);
  }

  /** Serves a `file` channel the broker opened; refuses one that answers no request of ours. */
  async accept(channel: Channel): Promise<void> {
    const params = channel.params as Partial<FileParams>;
    const id = typeof params.id === 'string' ? params.id : '';
    const p = this.pending.get(id);
    if (!p || p.channel) throw new AgentRefusal('invalid_request', 'No file was requested with this id.');
    if (params.path !== p.path) throw new AgentRefusal('invalid_request', 'The file sent is not the file requested.');
    const size = params.size;
    if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0 || size > MAX_FILE_BYTES)
      throw new AgentRefusal('invalid_request', `The announced size is not a byte count up to ${MAX_FILE_BYTES}.`);
    const expected = typeof params.sha256 === 'string' ? params.sha256.toLowerCase() : '';
    if (!SHA256_HEX.test(expected)) throw new AgentRefusal('invalid_request', 'The announced sha256 is not 64 hex digits.');
    const temp = p.into ? '' : path.join(this.dir, `${id}.part`);
    let handle: fs.FileHandle;
    try {
      handle = p.into ?? (await fs.open(temp, 'wx', 0o600));
    } catch (err) {
      this.fail(id, p, new Error(`cannot store ${p.path} on the device: ${(err as Error).message}`));
      throw new AgentRefusal('io_error', 'Cannot store the file on the device.');
    }
    p.channel = channel;
    void this.receive(id, p, channel, handle, temp, size, expected);
  }

  private async receive(id: string, p: Pending, channel: Channel, handle: fs.FileHandle, temp: string, size: number, expected: string): Promise<void> {
    const hash = crypto.createHash('sha256');
    let bytes = 0;
    try {
      for await (const chunk of channel.iterator({ destroyOnReturn: false }) as AsyncIterable<Buffer>) {
        bytes += chunk.length;
        if (bytes > size) throw new Error(`more bytes arrived than the announced ${size}`);
        hash.update(chunk);
        await handle.write(chunk);
      }
      if (channel.destroyed && !channel.readableEnded) throw new Error('the transfer was interrupted');
      if (bytes !== size) throw new Error(`received ${bytes} bytes, ${size} were announced`);
      const digest = hash.digest('hex');
      if (digest !== expected) throw new Error(`checksum mismatch: received sha256 ${digest}, ${expected} was announced`);
      if (!p.into) await handle.close();
      if (!this.pending.has(id)) throw new Error('the fetch was abandoned');
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.resolve({ ...(temp ? { file: temp } : {}), size: bytes, sha256: digest });
      if (!channel.destroyed) channel.end();
    } catch (err) {
      if (!p.into) {
        await handle.close().catch(() => {});
        await fs.rm(temp, { force: true }).catch(() => {});
      }
      if (this.pending.get(id) === p) this.fail(id, p, new Error(`cannot fetch ${p.path}: ${(err as Error).message}`));
      else channel.destroy();
    }
  }
}
