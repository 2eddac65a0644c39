/**
 * Configuration to agents: what each device should run is recorded (its commit and the digest of
 * what it is sent) and pushed to its agent — on commit and on changes to the tree (propagate), when
 * it connects, and when another broker asks — and what an agent reports it applied (`config_applied`)
 * is recorded, its reports handed on.
 */
import type { Logger } from 'pino';
import type { AgentDefaults, CommittedConfig } from '../../shared/protocol.js';
import type { AgentMessage } from '../../shared/wire.js';
import { immediateWrites, type WriteQueue } from '../db/batch.js';
import type { Db } from '../db/database.js';
import { readTreeShape } from '../devices/directory.js';
import { credentialValues, scrubReports } from './bundles.js';
import type { ConfigAgentLink, ReportSink } from './deps.js';
import type { Rendering } from './rendering.js';
import type { ConfigStore } from './store.js';

/** Largest configuration message sent to an agent (its connection takes 16 MiB messages). */
const MAX_PUSH_BYTES = 8 * 1024 * 1024;
/** How often changes to the tree and attributes are looked for (see watch). */
export const WATCH_INTERVAL_MS = 15_000;

export class AgentLink {
  private propagation: Promise<void> = Promise.resolve();
  private propagationQueued = false;
  /** Devices another broker asked to be sent their configuration (pushCurrent), not yet served. */
  private readonly wanted = new Set<string>();
  private wantedQueued = false;
  private watchTimer?: NodeJS.Timeout;
  /**
   * The digest last sent to each agent connected here (dropped when a send finds it gone). Several
   * brokers: what another broker recorded since, while this one missed its NOTIFY, is sent by catchUp.
   */
  private readonly sent = new Map<string, string>();
  private catchingUp = false;

  constructor(
    private readonly db: Db,
    private readonly q: ConfigStore,
    private readonly rendering: Rendering,
    private readonly agents: ConfigAgentLink,
    private readonly reports: ReportSink,
    private readonly logger: Logger,
    /** Where a connecting agent's configuration state is written: with the other connects of the same turn. */
    private readonly connectWrites: WriteQueue = immediateWrites,
  ) {}

  async close(): Promise<void> {
    if (this.watchTimer) clearInterval(this.watchTimer);
    await this.propagation.catch(() => {});
  }

  /**
   * Moves in the tree, tag changes and device attributes (which templates use) change what a device
   * should run without a commit: every `intervalMs`, when something was changed through the API since
   * the last look (the change epoch moved), devices are rendered again and those whose configuration
   * changed get it (propagate compares digests, so nothing else is sent). Several brokers: every
   * `intervalMs` too, agents here whose configuration another broker recorded get it (catchUp).
   */
  watch(epoch: { value: number }, intervalMs = WATCH_INTERVAL_MS): void {
    let seen = epoch.value;
    this.watchTimer = setInterval(() => {
      if (this.agents.pushElsewhere) void this.catchUp().catch((err) => this.logger.error({ err }, 'configuration re-check failed'));
      if (epoch.value === seen) return;
      seen = epoch.value;
      this.schedulePropagation();
    }, intervalMs);
    this.watchTimer.unref();
  }

  /**
   * Several brokers: the agents here whose recorded configuration is not the one last sent to them
   * get it now. Another broker records a change and asks by NOTIFY (`config`) for it to be sent; a
   * broker that missed that NOTIFY (its listening connection was down) finds it here. Answers how
   * many were behind.
   */
  async catchUp(): Promise<number> {
    if (this.catchingUp || this.sent.size === 0) return 0;
    this.catchingUp = true;
    try {
      const recorded = await this.q.digestsOf([...this.sent.keys()]);
      const behind = [...this.sent].flatMap(([id, digest]) => {
        const now = recorded.get(id);
        return now != null && now !== digest ? [id] : [];
      });
      if (behind.length > 0) {
        this.logger.info({ devices: behind.length }, 'configuration recorded by another broker and not yet sent here: sending it');
        this.pushCurrent(behind);
      }
      return behind.length;
    } finally {
      this.catchingUp = false;
    }
  }

  schedulePropagation(): void {
    if (this.propagationQueued) return;
    this.propagationQueued = true;
    this.propagation = this.propagation
      .then(async () => {
        this.propagationQueued = false;
        await this.propagate();
      })
      .catch((err) => this.logger.error({ err }, 'configuration not propagated'));
  }

  /**
   * Several brokers: another broker recorded a new configuration for these devices, whose agents are
   * connected here; they get it now. Requests arriving together are served by one rendering (one
   * read of the tree, as propagate), in turn with the other propagations.
   */
  pushCurrent(deviceIds: string[]): void {
    for (const id of deviceIds) this.wanted.add(id);
    if (this.wantedQueued) return;
    this.wantedQueued = true;
    this.propagation = this.propagation
      .then(async () => {
        this.wantedQueued = false;
        const ids = new Set(this.wanted);
        this.wanted.clear();
        await this.propagate(ids);
      })
      .catch((err) => this.logger.error({ err }, 'configuration not sent to the agents'));
  }

  /** Waits for pushes scheduled so far (tests, shutdown). */
  async settled(): Promise<void> {
    await this.propagation;
  }

  /**
   * Renders every device from one read of the tree and the entities' bundles, records each
   * device's commit and digest, and pushes to connected agents whose configuration changed. With
   * `only`, renders just those devices and pushes to those connected here whatever their recorded
   * digest (another broker recorded it: see pushCurrent).
   */
  async propagate(only?: ReadonlySet<string>): Promise<number> {
    const readAt = new Date().toISOString();
    const shape = await readTreeShape(this.db);
    const entityRows = await this.q.allEntities();
    const states = await this.q.digests();
    let pushed = 0;
    const elsewhere: string[] = [];
    for await (const { deviceId, out } of this.rendering.fleet(shape, entityRows, only)) {
      if (states.get(deviceId) === out.digest && !only) continue;
      this.logDropped(deviceId, out.dropped);
      await this.q.recordState(deviceId, out.config.commit_id, out.digest);
      if (!this.agents.isConnected(deviceId)) continue;
      // Recorded above: the agent must get it now, from this broker or from the one holding it.
      if (this.push(deviceId, out)) pushed += 1;
      else if (out.size <= MAX_PUSH_BYTES && this.agents.pushElsewhere) elsewhere.push(deviceId);
    }
    if (only) return pushed;
    if (elsewhere.length > 0) {
      this.agents.pushElsewhere?.(elsewhere);
      pushed += elsewhere.length;
    }
    // Removed nodes keep no configuration (a node made later with the same id starts empty); what was
    // committed after the tree was read above is left for the next run.
    const orphans = new Set(
      entityRows.filter((e) => e.entity_type === 'node' && !shape.index.has(e.entity_id) && e.commit_created < readAt).map((e) => e.entity_id),
    );
    await this.q.deleteNodeEntities([...orphans], readAt);
    // Devices no longer in the tree keep no state.
    const isDevice = (id: string) => {
      const i = shape.index.get(id);
      return i !== undefined && shape.rows[i].type === 'device';
    };
    await this.q.deleteStates([...states.keys()].filter((id) => !isDevice(id)));
    return pushed;
  }

  /** An agent connected: it gets its configuration now. */
  async onConnected(deviceId: string): Promise<void> {
    const out = await this.rendering.deviceRendered(deviceId);
    if (!out) return;
    this.logDropped(deviceId, out.dropped);
    await this.connectWrites.run(() => this.q.recordState(deviceId, out.config.commit_id, out.digest));
    this.push(deviceId, out);
  }

  private logDropped(deviceId: string, dropped: string[]): void {
    if (dropped.length === 0) return;
    this.logger.warn(
      { deviceId, keys: dropped.slice(0, 20) },
      'device attributes holding a control or bidi character are not sent to the agent as parameters: correct them (PATCH /deviceattribute)',
    );
  }

  /** Sends a device its configuration; one larger than the agent takes in a message is not sent (logged). */
  private push(
    deviceId: string,
    out: { config: CommittedConfig; attributes: Record<string, string>; defaults: AgentDefaults; size: number; digest: string },
  ): boolean {
    if (out.size > MAX_PUSH_BYTES) {
      this.logger.error({ deviceId, bytes: out.size }, 'configuration too large to send to the agent: not sent');
      this.sent.delete(deviceId);
      return false;
    }
    const sent = this.agents.send(deviceId, { t: 'config', config: out.config, attributes: out.attributes, defaults: out.defaults });
    if (sent) this.sent.set(deviceId, out.digest);
    else this.sent.delete(deviceId);
    return sent;
  }

  /**
   * `config_applied`: the commit the agent applied (shown in the tree as device_commit_sha, and
   * config_propagated when it is the device's current commit) and the run's reports, checked and
   * bounded, to the report sink. An agent that applied an older commit gets the current one.
   */
  async onApplied(deviceId: string, m: Extract<AgentMessage, { t: 'config_applied' }>): Promise<void> {
    await this.q.recordApplied(deviceId, m.commit_id, new Date().toISOString());
    const { valid, refused } = m.reports;
    if (valid.length > 0 || Object.keys(refused).length > 0) {
      const rendered = valid.length > 0 ? await this.rendering.deviceRendered(deviceId) : undefined;
      const scrubbed = scrubReports(valid, rendered ? credentialValues(rendered.config.bundle_data) : []);
      await this.reports.recordChecked(deviceId, { valid: scrubbed, refused });
    }
    const current = await this.q.currentCommit(deviceId);
    if (current != null && current !== m.commit_id) await this.onConnected(deviceId);
  }

  /** Per device of the tree: the commit it should run and the one its agent last applied. */
  async deviceStates(): Promise<Map<string, { device_commit_sha: string; config_propagated: boolean }>> {
    const rows = await this.q.deviceStates();
    return new Map(
      rows.map((r) => [
        r.device_id,
        { device_commit_sha: r.device_commit_sha ?? '', config_propagated: r.device_commit_sha !== null && r.device_commit_sha === (r.commit_sha ?? '') },
      ]),
    );
  }
}
