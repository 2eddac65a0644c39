/**
 * Files to agents: a file of the store that a device's configuration names is sent on request
 * (`file_request`) on a `file` channel, under the channel's credit flow, with bounded transfers per
 * device and in all (requests past the slots wait in a bounded queue) and a stall timeout.
 */
import { pipeline } from 'node:stream/promises';
import type { Logger } from 'pino';
import type { Channel } from '../../shared/mux.js';
import type { AgentMessage } from '../../shared/wire.js';
import { DomainError } from '../errors.js';
import { normalizeSource } from './bundles.js';
import type { ConfigAgentLink, ConfigFiles } from './deps.js';
import type { Rendering } from './rendering.js';

/** Files sent to agents at once: per device, and in all. */
const MAX_FILES_PER_DEVICE = 4;
const MAX_FILES = 64;
/**
 * File requests waiting for one of the MAX_FILES transfer slots (first come, first served): a commit
 * reaching a thousand agents at once has them fetch their files in turn instead of being refused.
 */
const MAX_FILES_QUEUED = 4096;
/** A file transfer making no progress this long is cut. */
const FILE_STALL_MS = 60_000;
const ID_PATTERN = /^[A-Za-z0-9_.:-]{1,64}$/;

export class FileSending {
  private readonly sending = new Map<string, number>();
  private sendingTotal = 0;
  /** Requests waiting for a transfer slot; each is handed a slot as one frees. */
  private readonly fileQueue: (() => void)[] = [];

  constructor(
    private readonly rendering: Rendering,
    private readonly files: ConfigFiles,
    private readonly agents: ConfigAgentLink,
    private readonly logger: Logger,
  ) {}

  /**
   * `file_request`: a file of the store that the device's configuration names is sent on a `file`
   * channel (bytes under the channel's credit flow, then eof); anything else is `file_refused`.
   */
  async onFileRequest(deviceId: string, m: Extract<AgentMessage, { t: 'file_request' }>): Promise<void> {
    if (!ID_PATTERN.test(m.id)) return;
    const id = m.id;
    const refuse = (error: string) => void this.agents.send(deviceId, { t: 'file_refused', id, error });
    if (m.path === '' || m.path.length > 1024) return refuse('invalid path');
    // Counted from here: a peer asking faster than files go out is refused, whatever it asks for.
    // A device's requests count whether sent or waiting; past the slots, requests wait in a bounded queue.
    const active = this.sending.get(deviceId) ?? 0;
    const full = this.sendingTotal >= MAX_FILES;
    if (active >= MAX_FILES_PER_DEVICE || (full && this.fileQueue.length >= MAX_FILES_QUEUED))
      return refuse('busy: too many files in transfer; ask again later');
    this.sending.set(deviceId, active + 1);
    if (full) await new Promise<void>((granted) => this.fileQueue.push(granted));
    else this.sendingTotal += 1;
    try {
      await this.sendFile(deviceId, id, normalizeSource(m.path), refuse);
    } finally {
      const left = (this.sending.get(deviceId) ?? 1) - 1;
      if (left <= 0) this.sending.delete(deviceId);
      else this.sending.set(deviceId, left);
      // the slot goes to the first waiting request, or back to the pool
      const next = this.fileQueue.shift();
      if (next) next();
      else this.sendingTotal -= 1;
    }
  }

  private async sendFile(deviceId: string, id: string, path: string, refuse: (error: string) => void): Promise<void> {
    const out = await this.rendering.deviceRendered(deviceId, false);
    if (!out || !out.files.has(path)) return refuse('not in the configuration of this device');
    let meta: Awaited<ReturnType<ConfigFiles['metadata']>>;
    let download: Awaited<ReturnType<ConfigFiles['download']>>;
    try {
      meta = await this.files.metadata(`/${path}`);
      download = await this.files.download(`/${path}`);
    } catch (err) {
      return refuse(err instanceof DomainError && err.kind === 'not_found' ? 'no such file in the file store' : 'the file cannot be read');
    }
    let channel: Channel;
    try {
      ({ channel } = await this.agents.open(deviceId, 'file', { id, path: `/${path}`, size: download.size, sha256: meta.sha256 ?? meta.digest ?? '' }));
    } catch (err) {
      download.stream.destroy();
      this.logger.debug({ err, deviceId, path }, 'file channel not opened');
      return;
    }
    // A peer that stops granting credit holds a transfer slot: one making no progress for a while is cut.
    let timer: NodeJS.Timeout | undefined;
    const progress = () => {
      clearTimeout(timer);
      timer = setTimeout(() => channel.destroy(new Error('file transfer stalled')), FILE_STALL_MS);
      timer.unref();
    };
    download.stream.on('data', progress);
    progress();
    try {
      await pipeline(download.stream, channel);
    } catch (err) {
      this.logger.debug({ err, deviceId, path }, 'file not sent in full');
      if (!channel.destroyed) channel.destroy();
    } finally {
      clearTimeout(timer);
    }
  }
}
