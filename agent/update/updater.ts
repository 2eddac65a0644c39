/**
 * The agent's side of agent updates. The broker announces the agent it publishes (`agent_update`:
 * version, sha256, size); when the update policy allows it (settings bundle: auto_update, its window,
 * downgrades) and the version is newer (or a permitted downgrade, never one that failed here before),
 * the agent asks for it over its own authenticated connection (`agent_update_request`), receives it on
 * a `file` channel checked against the announced size and sha256, installs it beside the running one
 * (agent/update/store.ts) and asks to be restarted. The launcher (agent/update/launcher.ts) then runs
 * it; once the broker welcomes it, `welcomed()` confirms the switch and reports a past failure.
 */
import { createHash } from 'node:crypto';
import { rmSync } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { type Channel } from '../../shared/mux.js';
import type { AgentReport, ControlMessage } from '../../shared/protocol.js';
import type { BrokerMessage } from '../../shared/wire.js';
import { DEFAULT_UPDATE_POLICY, type UpdatePolicy } from '../config/bundle.js';
import { FileFetcher } from '../config/files.js';
import { compareVersions, UpdateStore } from './store.js';

/** Largest agent bundle the agent accepts. */
export const MAX_AGENT_BYTES = 64 * 1024 * 1024;
const VERSION = /^[0-9][A-Za-z0-9.+~-]{0,63}$/;
const SHA256 = /^[0-9a-f]{64}$/;
/** How often a waiting offer is looked at again (the window opening, the policy changing). */
const CHECK_MS = 60_000;
const FETCH_TIMEOUT_MS = 10 * 60_000;

export interface Offer {
  version: string;
  sha256: string;
  size: number;
}

export interface UpdaterOptions {
  stateDir: string;
  /** the running agent's version */
  version: string;
  /** the installed package: where node_modules is, and its version; absent when run from source (no updates) */
  install?: { packageDir: string; packageVersion: string; launched: boolean };
  log: (level: 'info' | 'warn' | 'error', msg: string, detail?: Record<string, unknown>) => void;
  /** the new version is installed: restart into it */
  restart: (version: string) => void;
  /** for tests: the time of day */
  now?: () => Date;
}

export type Decision = { act: true } | { act: false; why: string };

/** Whether the policy lets `offer` replace `running` now. */
export function decide(offer: Offer, running: string, policy: UpdatePolicy, refused: readonly string[], now: Date): Decision {
  if (offer.version === running) return { act: false, why: 'already running this version' };
  if (refused.includes(offer.version)) return { act: false, why: 'this version failed here before' };
  if (!policy.enabled) return { act: false, why: 'auto_update is off' };
  if (compareVersions(offer.version, running) < 0 && !policy.downgrade) return { act: false, why: 'a downgrade (auto_update_downgrade is off)' };
  if (policy.window) {
    const minute = now.getHours() * 60 + now.getMinutes();
    const { from, to } = policy.window;
    const inside = from < to ? minute >= from && minute < to : minute >= from || minute < to;
    if (!inside) return { act: false, why: 'outside auto_update_window' };
  }
  return { act: true };
}

export class Updater {
  private readonly store: UpdateStore;
  private readonly fetcher: FileFetcher;
  private send?: (msg: ControlMessage) => void;
  private offer?: Offer;
  private policy: UpdatePolicy;
  private busy = false;
  private timer?: NodeJS.Timeout;
  private lastWhy?: string;

  constructor(private readonly o: UpdaterOptions) {
    this.store = new UpdateStore(o.stateDir);
    this.policy = this.store.read().policy ?? DEFAULT_UPDATE_POLICY;
    // Downloads a stopped agent left behind.
    rmSync(path.join(this.store.dir, 'download'), { recursive: true, force: true });
    this.fetcher = new FileFetcher(path.join(this.store.dir, 'download'), FETCH_TIMEOUT_MS, (id, p) => ({
      t: 'agent_update_request',
      id,
      version: /^\/agent\/fleet-agent-(.+)\.mjs$/.exec(p)?.[1] ?? '',
    }));
  }

  /** The settings bundle's policy (kept on disk: a restarted agent knows it before its first configuration run). */
  setPolicy(policy: UpdatePolicy): void {
    if (JSON.stringify(policy) === JSON.stringify(this.policy)) return;
    this.policy = policy;
    this.store.update((s) => {
      s.policy = policy;
    });
    this.consider();
  }

  attach(send: (msg: ControlMessage) => void): void {
    this.send = send;
    this.fetcher.attach(send);
    this.timer = setInterval(() => this.consider(), CHECK_MS);
    this.timer.unref();
  }

  detach(): void {
    this.send = undefined;
    clearInterval(this.timer);
    this.fetcher.detach();
  }

  /** The broker welcomed this agent: an update to it is confirmed; a failed one is reported once (bundle agent_internal). */
  welcomed(): void {
    const reports = this.confirm();
    if (reports.length > 0) this.send?.({ t: 'reports', reports });
  }

  private confirm(): AgentReport[] {
    if (!this.o.install) return [];
    this.store.confirm(this.o.version);
    const s = this.store.read();
    if (!s.failed || s.failed.reported) return [];
    const f = s.failed;
    this.store.update((next) => {
      if (next.failed) next.failed.reported = true;
    });
    return [
      {
        bundle: 'agent_internal',
        bundle_commit_id: '',
        commit_id: '',
        labels: 'agent_internal',
        sev: 'ERR',
        text: `Agent update to ${f.version} failed and was rolled back to ${f.rolled_back_to === 'package' ? 'the installed package' : f.rolled_back_to} (running ${this.o.version}): ${f.reason}`,
        ts: Math.floor(Date.parse(f.at) / 1000),
      },
    ];
  }

  /** `agent_update` from the broker (true: handled). */
  handleControl(msg: BrokerMessage): boolean {
    if (msg.t === 'file_refused' && this.fetcher.owns({ id: msg.id })) {
      this.fetcher.refused(msg.id, msg.error);
      return true;
    }
    if (msg.t !== 'agent_update') return false;
    const m = msg;
    if (!VERSION.test(m.version) || !SHA256.test(m.sha256)) {
      this.o.log('warn', 'agent update announcement ignored: malformed');
      return true;
    }
    if (!Number.isSafeInteger(m.size) || m.size <= 0 || m.size > MAX_AGENT_BYTES) {
      this.o.log('warn', 'agent update announcement ignored: size out of bounds', { size: m.size });
      return true;
    }
    this.offer = { version: m.version, sha256: m.sha256, size: m.size };
    this.lastWhy = undefined;
    this.consider();
    return true;
  }

  owns(channel: Channel): boolean {
    return this.fetcher.owns(channel.params);
  }

  handleChannel(channel: Channel): Promise<void> {
    return this.fetcher.accept(channel);
  }

  private consider(): void {
    const offer = this.offer;
    if (!offer || this.busy || !this.send) return;
    if (!this.o.install) {
      if (this.lastWhy !== 'source') this.o.log('info', 'agent update published, not installed: this agent runs from source', { version: offer.version });
      this.lastWhy = 'source';
      return;
    }
    const state = this.store.read();
    // Installed already, waiting for the restart that runs it.
    if (state.current === offer.version && state.pending) return;
    const decision = decide(offer, this.o.version, this.policy, state.refused ?? [], (this.o.now ?? (() => new Date()))());
    if (!decision.act) {
      if (decision.why !== this.lastWhy && offer.version !== this.o.version)
        this.o.log('info', `agent update not installed: ${decision.why}`, { version: offer.version, running: this.o.version });
      this.lastWhy = decision.why;
      return;
    }
    this.busy = true;
    void this.apply(offer, this.o.install).finally(() => {
      this.busy = false;
    });
  }

  private async apply(offer: Offer, install: NonNullable<UpdaterOptions['install']>): Promise<void> {
    this.o.log('info', 'downloading the agent update', { version: offer.version, size: offer.size });
    let file: string | undefined;
    try {
      file = await this.fetcher.fetch(`/agent/fleet-agent-${offer.version}.mjs`);
      const stat = await fs.stat(file);
      const digest = createHash('sha256')
        .update(await fs.readFile(file))
        .digest('hex');
      // The channel was checked against what it announced; this checks it against the announcement.
      if (stat.size !== offer.size || digest !== offer.sha256)
        throw new Error(`the agent received (${stat.size} bytes, sha256 ${digest}) is not the one announced (${offer.size} bytes, sha256 ${offer.sha256})`);
      this.store.install(offer.version, file, install.packageDir, install.packageVersion, install.launched ? this.o.version : undefined);
    } catch (err) {
      this.o.log('warn', 'agent update not installed', { version: offer.version, err: (err as Error).message });
      // Asked again on the next announcement (a reconnect), not in a loop.
      this.offer = undefined;
      return;
    } finally {
      if (file) await fs.rm(file, { force: true }).catch(() => {});
    }
    this.o.log('info', 'agent update installed: restarting into it', { version: offer.version, previous: this.o.version });
    this.o.restart(offer.version);
  }
}
