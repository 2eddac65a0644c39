/**
 * The agent's configuration engine. It keeps the last configuration the broker sent (written
 * atomically to the state directory, so a restarted or offline agent still has it) and applies
 * it: when it arrives, after every reconnection, and every `settings.agentinterval` minutes to
 * repair drift. One run at a time; a configuration arriving during a run is applied right after.
 *
 * A run executes the bundles in qbee's order, each with a BundleContext; each bundle's outcome
 * becomes reports (a bundle that changed nothing reports nothing), with the values of secret
 * parameters redacted, and the run ends with `config_applied`. Results of runs made while
 * disconnected wait (bounded) and go out on the next connection. The checks of what the broker
 * sends are in received.ts, one bundle's application and the run's reports in apply-bundle.ts, the
 * configuration kept on disk in kept.ts.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Channel } from '../../shared/mux.js';
import type { AgentReport, ControlMessage, ReportSeverity } from '../../shared/protocol.js';
import type { BrokerMessage } from '../../shared/wire.js';
import { DEFAULT_UPDATE_POLICY, type AgentSwitches, type Bundle } from './bundle.js';
import { applyBundle, reportSink } from './apply-bundle.js';
import { runCommand } from './command.js';
import { FileFetcher } from './files.js';
import { CONTROL_CHARACTERS } from '../../shared/text.js';
import { discardKeptConfig, keepConfig, loadKeptConfig } from './kept.js';
import { bundleMeta, checkConfig, DEFAULT_INTERVAL_MINUTES, MAX_INTERVAL_MINUTES, secretsOf, type StoredConfig } from './received.js';

/**
 * qbee's bundle order (its agent's list of bundles): settings and parameters first (they shape
 * the run), then the system bundles, software, security, image updates.
 */
export const BUNDLE_ORDER = [
  'settings',
  'parameters',
  'file_distribution',
  'users',
  'sshkeys',
  'package_management',
  'connectivity_watchdog',
  'proc_watch',
  'ntp',
  'software_management',
  'firewall',
  'password',
  'docker_containers',
  'podman_containers',
  'rauc',
  'metrics_monitor',
  'docker_compose',
] as const;

/** Results of runs kept while disconnected. */
const MAX_OUTBOX = 20;
/**
 * Longest one bundle may take in a run (a bundle fetching many large files over a slow link is
 * the long one); past it, its signal is aborted, it is reported and the run goes on without it.
 */
export const DEFAULT_BUNDLE_TIMEOUT_MS = 60 * 60_000;
const CONTROL_CHARACTERS_ALL = new RegExp(CONTROL_CHARACTERS.source, 'g');

export interface ConfigEngineOptions {
  /** the agent's state directory: the configuration, bundle state and downloads live under it */
  stateDir: string;
  /** filesystem root bundles write under: `/` on a device */
  root?: string;
  /**
   * the bundles it applies: a list, or what loads the bundle of a name when a configuration first
   * names it (agent/config/registry.ts); undefined is a bundle this agent does not apply
   */
  bundles: readonly Bundle[] | BundleLoader;
  log?: (level: 'info' | 'warn' | 'debug', msg: string, detail?: Record<string, unknown>) => void;
  /** environment of the commands bundles run (PATH decides which tools exist) */
  env?: NodeJS.ProcessEnv;
  /** length of an interval minute (tests shorten it) */
  minuteMs?: number;
  fetchTimeoutMs?: number;
  /** how the device reboots (a bundle's request after a run, the connectivity watchdog); default runs `reboot` */
  reboot?: () => Promise<void>;
  /** the agent's switches the settings bundle turns */
  agent?: AgentSwitches;
  /** longest one bundle may take in a run; past it the bundle is stopped and the run goes on */
  bundleTimeoutMs?: number;
}

/** Loads the bundle of a name (once: later calls hand back the same bundle); undefined when there is none. */
export type BundleLoader = (name: string) => Promise<Bundle | undefined>;

export class ConfigEngine {
  readonly files: FileFetcher;
  private current?: StoredConfig;
  private send?: (msg: ControlMessage) => void;
  private readonly outbox: ControlMessage[] = [];
  private running?: Promise<void>;
  private again = false;
  private timer?: NodeJS.Timeout;
  private intervalMinutes = DEFAULT_INTERVAL_MINUTES;
  private readonly controller = new AbortController();
  private failedConnections = 0;
  private readonly root: string;
  private readonly log: NonNullable<ConfigEngineOptions['log']>;
  private readonly bundleOf: BundleLoader;
  /** Resolves when the next run finishes (tests, and whoever wants to wait for one). */
  private waiters: (() => void)[] = [];
  /** Bundles stopped for taking too long whose apply has not returned yet: not started again meanwhile. */
  private readonly stuck = new Set<string>();

  constructor(private readonly o: ConfigEngineOptions) {
    this.root = o.root ?? '/';
    this.log = o.log ?? (() => {});
    if (typeof o.bundles === 'function') this.bundleOf = o.bundles;
    else {
      const byName = new Map(o.bundles.map((b) => [b.name, b]));
      this.bundleOf = (name) => Promise.resolve(byName.get(name));
    }
    this.files = new FileFetcher(path.join(o.stateDir, 'config', 'downloads'), o.fetchTimeoutMs);
  }

  /** Loads the configuration kept from before (if any) and starts the interval. */
  async start(): Promise<void> {
    try {
      this.current = await loadKeptConfig(this.o.stateDir);
      if (this.current) this.log('info', 'configuration loaded from the state directory', { commit_id: this.current.config.commit_id });
    } catch (err) {
      this.log('warn', 'the stored configuration is unreadable: waiting for the broker', { err: (err as Error).message });
    }
    this.updateInterval();
  }

  /** Forgets the configuration kept in `stateDir` (a new device identity must not apply the old one's). */
  static discard(stateDir: string): Promise<void> {
    return discardKeptConfig(stateDir);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.controller.abort();
    this.files.detach();
  }

  get commitId(): string | undefined {
    return this.current?.config.commit_id;
  }

  /** The run interval in force, minutes (settings.agentinterval). */
  get interval(): number {
    return this.intervalMinutes;
  }

  /** A connection to the broker is up: send what waited, then apply (qbee applies after reconnecting). */
  attach(send: (msg: ControlMessage) => void): void {
    this.send = send;
    this.files.attach(send);
    this.failedConnections = 0;
    for (const msg of this.outbox.splice(0)) send(msg);
    if (this.current) this.trigger();
  }

  detach(): void {
    this.send = undefined;
    this.files.detach();
  }

  /** Device-level messages for configuration; returns false for the others. */
  handleControl(msg: BrokerMessage): boolean {
    if (msg.t === 'config') {
      void this.receive(msg.config, msg.attributes, msg.defaults).catch((err: Error) => this.log('warn', 'configuration not accepted', { err: err.message }));
      return true;
    }
    if (msg.t === 'file_refused') {
      this.files.refused(msg.id, msg.error);
      return true;
    }
    return false;
  }

  /** The `file` channels the broker opens. */
  handleChannel(channel: Channel): Promise<void> {
    return this.files.accept(channel);
  }

  /** A configuration from the broker: kept, then applied. Configurations are taken in the order they came. */
  receive(config: unknown, attributes: unknown, defaults?: unknown): Promise<void> {
    const next = this.receiving.then(() => this.take(config, attributes, defaults));
    this.receiving = next.catch(() => {});
    return next;
  }

  private receiving: Promise<void> = Promise.resolve();

  private async take(config: unknown, attributes: unknown, defaults: unknown): Promise<void> {
    let stored: StoredConfig;
    try {
      stored = checkConfig(config, attributes, defaults);
    } catch (err) {
      this.emit({ t: 'reports', reports: [this.internalReport('ERR', `Configuration refused: ${(err as Error).message}`)] });
      throw err;
    }
    if (stored.dropped) {
      const keys = stored.dropped.slice(0, 20).map((k) => JSON.stringify(k.replace(CONTROL_CHARACTERS_ALL, '?')));
      this.emit({
        t: 'reports',
        reports: [
          this.internalReport(
            'ERR',
            `Device attribute${stored.dropped.length > 1 ? 's' : ''} ${keys.join(', ')}${stored.dropped.length > 20 ? ', …' : ''} not used as parameters: a value holds a control character (a newline, NUL, …).`,
          ),
        ],
      });
    }
    try {
      await keepConfig(this.o.stateDir, stored);
    } catch (err) {
      // still applied now; only a restart before the next configuration would lose it
      this.emit({ t: 'reports', reports: [this.internalReport('WARN', `The configuration could not be kept on disk: ${(err as Error).message}`)] });
    }
    this.current = stored;
    this.updateInterval();
    this.log('info', 'configuration received', { commit_id: stored.config.commit_id });
    this.trigger();
  }

  private updateInterval(): void {
    const settings = this.current?.config.bundles.includes('settings') ? this.current.config.bundle_data.settings : undefined;
    const meta = bundleMeta(settings);
    const value = settings && meta.enabled ? (settings as { agentinterval?: unknown }).agentinterval : undefined;
    // The settings bundle's interval, else the account's default the broker sent, else the agent's own.
    const minutes =
      typeof value === 'number' && Number.isInteger(value) && value >= 1 && value <= MAX_INTERVAL_MINUTES
        ? value
        : (this.current?.defaults.agent_interval ?? DEFAULT_INTERVAL_MINUTES);
    if (minutes !== this.intervalMinutes || !this.timer) {
      this.intervalMinutes = minutes;
      this.schedule();
    }
  }

  private schedule(): void {
    clearTimeout(this.timer);
    if (this.controller.signal.aborted) return;
    this.timer = setTimeout(
      () => {
        this.timer = undefined;
        this.trigger();
        this.schedule();
      },
      this.intervalMinutes * (this.o.minuteMs ?? 60_000),
    );
    this.timer.unref();
  }

  /** Starts a run, or asks for one more after the run in progress. */
  trigger(): void {
    if (this.controller.signal.aborted) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = (async () => {
      do {
        this.again = false;
        try {
          await this.runOnce();
        } catch (err) {
          this.log('warn', 'configuration run failed', { err: (err as Error).message });
        }
      } while (this.again && !this.controller.signal.aborted);
    })().finally(() => {
      this.running = undefined;
      for (const resolve of this.waiters.splice(0)) resolve();
    });
  }

  /** Resolves once no run is in progress or waiting (triggering one first when asked). */
  async settled(trigger = false): Promise<void> {
    if (trigger) this.trigger();
    if (!this.running) return;
    await new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  /** The connection failed (counted by the connectivity watchdog). */
  async connectionFailed(): Promise<void> {
    const threshold = this.watchdogThreshold();
    if (!threshold) return;
    this.failedConnections++;
    if (this.failedConnections < threshold) return;
    this.failedConnections = 0;
    this.emit({
      t: 'reports',
      reports: [
        {
          ...this.internalReport('WARN', `Rebooting: ${threshold} connection attempts to the broker failed in a row.`),
          bundle: 'connectivity_watchdog',
          labels: 'connectivity_watchdog',
        },
      ],
    });
    await this.reboot(`connectivity watchdog: ${threshold} failed connection attempts`);
  }

  private watchdogThreshold(): number {
    const c = this.current?.config;
    if (!c?.bundles.includes('connectivity_watchdog')) return 0;
    const raw = c.bundle_data.connectivity_watchdog;
    if (!bundleMeta(raw).enabled) return 0;
    const value = (raw as { threshold?: unknown } | undefined)?.threshold;
    const n = typeof value === 'string' && /^\d{1,4}$/.test(value) ? Number(value) : typeof value === 'number' ? value : 0;
    return Number.isInteger(n) && n > 0 ? n : 0;
  }

  private internalReport(sev: ReportSeverity, text: string): AgentReport {
    return {
      bundle: 'agent_internal',
      bundle_commit_id: '',
      commit_id: this.current?.config.commit_id ?? '',
      labels: 'agent_internal',
      sev,
      text,
      ts: Math.floor(Date.now() / 1000),
    };
  }

  private emit(msg: ControlMessage): void {
    if (this.send) {
      this.send(msg);
      return;
    }
    this.outbox.push(msg);
    if (this.outbox.length > MAX_OUTBOX) this.outbox.shift();
  }

  /** The parameters templates and `$(key)` see: device attributes, then the parameters bundle (secrets included). */
  private async parametersOf(stored: StoredConfig): Promise<Record<string, string>> {
    const params: Record<string, string> = { ...stored.attributes };
    const raw = stored.config.bundle_data.parameters;
    if (!stored.config.bundles.includes('parameters') || !bundleMeta(raw).enabled) return params;
    try {
      const bundle = await this.bundleOf('parameters');
      if (!bundle) return params;
      const parsed = bundle.parse(raw) as { parameters: { key: string; value: string }[]; secrets: { key: string; value: string }[] };
      for (const p of [...parsed.parameters, ...parsed.secrets]) params[p.key] = p.value;
    } catch {
      // reported when the parameters bundle runs (an unloadable or invalid one)
    }
    return params;
  }

  private async runOnce(): Promise<void> {
    const stored = this.current;
    if (!stored) return;
    const { config } = stored;
    const secrets = secretsOf(config);
    const parameters = await this.parametersOf(stored);
    const reports: AgentReport[] = [];
    const signal = this.controller.signal;
    const env = this.o.env ?? process.env;
    const bundleState = path.join(this.o.stateDir, 'config', 'bundles');
    await fs.mkdir(bundleState, { recursive: true, mode: 0o700 });

    const sink = reportSink(reports, config.commit_id, secrets);

    const order = (name: string) => {
      const i = (BUNDLE_ORDER as readonly string[]).indexOf(name);
      return i < 0 ? BUNDLE_ORDER.length : i;
    };
    const names = [...config.bundles].sort((a, b) => order(a) - order(b));
    const rebootFor: string[] = [];
    for (const name of names) {
      if (signal.aborted) break;
      const raw = config.bundle_data[name];
      const meta = bundleMeta(raw);
      let bundle: Bundle | undefined;
      try {
        bundle = await this.bundleOf(name);
      } catch (err) {
        sink(name, meta.commitId, 'ERR', `${name} could not be loaded: ${(err as Error).message}. Nothing applied.`);
        continue;
      }
      if (!bundle) {
        sink(name, meta.commitId, 'WARN', `This agent does not support the ${name} bundle: nothing applied.`);
        continue;
      }
      if (raw === undefined || raw === null) {
        sink(name, meta.commitId, 'ERR', `The configuration names the ${name} bundle but carries no data for it: nothing applied.`);
        continue;
      }
      if (!meta.enabled) continue;
      let data: unknown;
      try {
        data = bundle.parse(raw);
      } catch (err) {
        sink(name, meta.commitId, 'ERR', `Invalid ${name} configuration: ${(err as Error).message}. Nothing applied.`);
        continue;
      }
      if (this.stuck.has(name)) {
        sink(name, meta.commitId, 'ERR', `${name} has not stopped since an earlier run ran out of time: not applied in this run.`);
        continue;
      }
      await applyBundle(name, bundle, data, meta.commitId, {
        commitId: config.commit_id,
        parameters,
        root: this.root,
        stateDir: bundleState,
        env,
        files: this.files,
        ...(this.o.agent ? { agent: this.o.agent } : {}),
        signal,
        timeoutMs: this.o.bundleTimeoutMs ?? DEFAULT_BUNDLE_TIMEOUT_MS,
        sink,
        rebootFor,
        stuck: this.stuck,
      });
    }
    this.log('info', 'configuration applied', { commit_id: config.commit_id, reports: reports.length });
    // qbee's settings.reports off: the run is still acknowledged, without its reports
    const settings = config.bundles.includes('settings') ? config.bundle_data.settings : undefined;
    // No enabled settings bundle (any more): the agent's defaults, metrics on.
    if (!settings || !bundleMeta(settings).enabled) {
      this.o.agent?.setMetricsEnabled(true);
      this.o.agent?.setUpdatePolicy?.(DEFAULT_UPDATE_POLICY);
    }
    const quiet = bundleMeta(settings).enabled && (settings as { reports?: unknown } | undefined)?.reports === false;
    this.emit({ t: 'config_applied', commit_id: config.commit_id, reports: quiet ? [] : reports });
    if (rebootFor.length > 0 && !signal.aborted) await this.reboot(rebootFor.join('; '));
  }

  private async reboot(why: string): Promise<void> {
    this.log('warn', 'rebooting the device after the configuration run', { why });
    if (this.o.reboot) await this.o.reboot();
    else await runCommand(['reboot'], this.o.env ?? process.env, this.controller.signal, { timeoutMs: 60_000 });
  }
}
