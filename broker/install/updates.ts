/**
 * Agent updates: the broker publishes the bundled agent of its artifacts directory (AGENT_ARTIFACTS_DIR,
 * `npm run build:agent`): `fleet-agent.mjs` at the version of the `package.json` beside it. Every agent
 * is told that version, the bundle's sha256 and size after the welcome (`agent_update`), and again when
 * a new build appears there. An agent that wants it asks over its authenticated connection
 * (`agent_update_request`) and gets the bytes on a `file` channel under the mux's credit flow; the
 * agent checks size and sha256 against the announcement before installing anything. Nothing of this
 * is reachable without a device key: GET /install/{artifact} stays for first installs only.
 *
 * Several brokers: each announces and serves what its own artifacts directory holds. The broker that
 * finds a new build first (its poll, every POLL_MS) tells the others (`agent_release`, a NOTIFY), which
 * look at their directory at once and announce it to the agents they hold: with a shared directory,
 * every agent hears of the build within about a second, and downloads it from the broker it is
 * connected to. A broker whose directory does not hold that build says so in its log and keeps
 * announcing its own.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Logger } from 'pino';
import type { Channel } from '../../shared/mux.js';
import type { ChannelKind, ChannelParams, ControlMessage } from '../../shared/protocol.js';

export const BUNDLE = 'fleet-agent.mjs';
/** A version the agent build accepts (agent/packaging/build.ts). */
export const VERSION_PATTERN = /^[0-9][A-Za-z0-9.+~-]{0,63}$/;
const ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
/** Largest bundle the broker publishes (today's is about 1 MiB). */
const MAX_BUNDLE_BYTES = 64 * 1024 * 1024;
/** Transfers at once: per broker, and one per device. */
const MAX_TRANSFERS = 8;
/** A transfer making no progress for this long is cut. */
const STALL_MS = 60_000;
/** How often the artifacts directory is looked at for a new build. */
export const POLL_MS = 30_000;
/**
 * The agents connecting within this long of a look at the artifacts directory are told what that look
 * found: a reconnect storm (thousands a second) looks once a second, not twice per agent. A build
 * published meanwhile reaches them at the next poll, as it reaches every connected agent.
 */
export const CONNECT_LOOK_MS = 1000;

export interface AgentRelease {
  version: string;
  sha256: string;
  size: number;
  file: string;
}

export interface AgentUpdatesDeps {
  dir: string;
  logger: Logger;
  agents: {
    send(deviceId: string, msg: ControlMessage): boolean;
    open(deviceId: string, kind: ChannelKind, params: ChannelParams): Promise<{ channel: Channel }>;
    connectedDevices(): string[];
  };
  /** A new build was found here and announced to the agents here (the cluster tells the other brokers). */
  onNewRelease?: (release: AgentRelease) => void;
}

/** Another broker's new build, as it announced it. */
export interface HeardRelease {
  from: string;
  version: string;
  sha256: string;
}

export class AgentUpdates {
  private cached?: { key: string; release: AgentRelease | undefined };
  private announced?: string;
  private timer?: NodeJS.Timeout;
  private readonly sending = new Set<string>();
  private mismatch?: string;
  /** The last look at the directory (release()), shared by the agents connecting soon after it. */
  private lastLook?: { at: number; release: Promise<AgentRelease | undefined> };

  constructor(private readonly deps: AgentUpdatesDeps) {}

  /** The published agent, or undefined when none is built (or it is unreadable). Hashed once per build. */
  release(): Promise<AgentRelease | undefined> {
    const look = this.look();
    this.lastLook = { at: performance.now(), release: look };
    return look;
  }

  private async look(): Promise<AgentRelease | undefined> {
    const file = path.join(this.deps.dir, BUNDLE);
    const manifest = path.join(this.deps.dir, 'package.json');
    let key: string;
    try {
      const [b, m] = await Promise.all([fs.promises.stat(file), fs.promises.stat(manifest)]);
      if (!b.isFile() || !m.isFile() || b.size > MAX_BUNDLE_BYTES) return undefined;
      key = `${b.size}:${b.mtimeMs}:${m.size}:${m.mtimeMs}`;
    } catch {
      return undefined;
    }
    if (this.cached?.key === key) return this.cached.release;
    let release: AgentRelease | undefined;
    try {
      const version = (JSON.parse(await fs.promises.readFile(manifest, 'utf8')) as { version?: unknown }).version;
      const bytes = await fs.promises.readFile(file);
      if (typeof version === 'string' && VERSION_PATTERN.test(version))
        release = { version, sha256: crypto.createHash('sha256').update(bytes).digest('hex'), size: bytes.length, file };
    } catch (err) {
      this.deps.logger.warn({ err, dir: this.deps.dir }, 'published agent not readable');
    }
    this.cached = { key, release };
    return release;
  }

  private announcement(r: AgentRelease): ControlMessage {
    return { t: 'agent_update', version: r.version, sha256: r.sha256, size: r.size };
  }

  /** A device connected: it learns the published agent. */
  async onConnected(deviceId: string): Promise<void> {
    const recent = this.lastLook && performance.now() - this.lastLook.at < CONNECT_LOOK_MS ? this.lastLook.release : undefined;
    const r = await (recent ?? this.release());
    if (r) this.deps.agents.send(deviceId, this.announcement(r));
  }

  /** Looks for a new build every POLL_MS. */
  start(): void {
    void this.checkPublished().catch(() => {});
    this.timer = setInterval(() => void this.checkPublished().catch(() => {}), POLL_MS);
    this.timer.unref();
  }

  /**
   * A build different from the last one seen is announced to every agent connected here. `heard`:
   * another broker announced a new build (this broker looks now rather than at its next poll).
   */
  async checkPublished(heard?: HeardRelease): Promise<void> {
    const r = await this.release();
    const id = r && `${r.version}:${r.sha256}`;
    if (this.announced !== undefined && id && id !== this.announced) {
      this.deps.logger.info({ version: r.version }, 'new agent published: announcing it to the connected agents');
      for (const deviceId of this.deps.agents.connectedDevices()) this.deps.agents.send(deviceId, this.announcement(r));
      if (!heard) this.deps.onNewRelease?.(r);
    }
    this.announced = id ?? '';
    if (heard && id !== `${heard.version}:${heard.sha256}` && this.mismatch !== `${heard.version}:${heard.sha256}`) {
      this.mismatch = `${heard.version}:${heard.sha256}`;
      this.deps.logger.warn(
        { broker: heard.from, version: heard.version, published: r?.version ?? null },
        'another broker publishes an agent build this broker does not hold (AGENT_ARTIFACTS_DIR is not shared): the agents connected here are not told of it',
      );
    }
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** `agent_update_request`: the published bundle on a `file` channel, or `file_refused`. */
  async onRequest(deviceId: string, msg: unknown): Promise<void> {
    const m = msg as { id?: unknown; version?: unknown };
    if (typeof m.id !== 'string' || !ID_PATTERN.test(m.id)) return;
    const id = m.id;
    const refuse = (error: string) => void this.deps.agents.send(deviceId, { t: 'file_refused', id, error });
    if (typeof m.version !== 'string' || !VERSION_PATTERN.test(m.version)) return refuse('invalid version');
    const r = await this.release();
    if (!r) return refuse('no agent is published on this broker');
    if (r.version !== m.version) return refuse(`version ${m.version} is not published here (this broker publishes ${r.version})`);
    if (this.sending.has(deviceId) || this.sending.size >= MAX_TRANSFERS) return refuse('busy: too many agent downloads; ask again later');
    this.sending.add(deviceId);
    try {
      const stream = fs.createReadStream(r.file, { start: 0, end: r.size - 1 });
      let channel: Channel;
      try {
        ({ channel } = await this.deps.agents.open(deviceId, 'file', { id, path: `/agent/fleet-agent-${r.version}.mjs`, size: r.size, sha256: r.sha256 }));
      } catch (err) {
        stream.destroy();
        this.deps.logger.debug({ err, deviceId }, 'agent update channel not opened');
        return;
      }
      let timer: NodeJS.Timeout | undefined;
      const progress = () => {
        clearTimeout(timer);
        timer = setTimeout(() => channel.destroy(new Error('agent download stalled')), STALL_MS);
        timer.unref();
      };
      stream.on('data', progress);
      progress();
      try {
        await pipeline(stream, channel);
      } catch (err) {
        this.deps.logger.debug({ err, deviceId }, 'agent update not sent in full');
        if (!channel.destroyed) channel.destroy();
      } finally {
        clearTimeout(timer);
      }
    } finally {
      this.sending.delete(deviceId);
    }
  }
}
