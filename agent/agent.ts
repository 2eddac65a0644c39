/**
 * The agent's work loop: make or load the device key, enrol with the bootstrap key when needed,
 * hold one connection to the broker, and come back after any failure with exponential backoff and
 * full jitter. A reload restarts the loop (re-reading the configuration) or, with
 * `exitOnReload`, ends the process for its service manager to restart it.
 */
import os from 'node:os';
import type { KeyObject } from 'node:crypto';
import type { Logger } from 'pino';
import { brokerKeyFingerprint, parseBrokerPublicKey } from '../shared/broker-signature.js';
import { AgentClose } from '../shared/protocol.js';
import { Reconnect, sleep } from './backoff.js';
import { BrokerEndpoint, EnrolError } from './broker-client.js';
import type { AgentConfig } from './options.js';
import { ConfigEngine } from './config/engine.js';
import { loadAgentBundle } from './config/registry.js';
import { runConnection } from './connection.js';
import { StateDir, type EnrolmentState } from './identity.js';
import { collectInventory } from './inventory.js';
import { releaseMemory } from './memory.js';
import { MetricsCollector } from './metrics/collector.js';
import { Updater, type UpdaterOptions } from './update/updater.js';
import { isoTime } from './iso-time.js';

/** Exit codes: 0 stopped or reloading under a service manager; 78 (EX_CONFIG) nothing to retry with. */
export const EXIT_OK = 0;
export const EXIT_CONFIG = 78;

type Outcome = { kind: 'reload' } | { kind: 'stopped' } | { kind: 'fatal'; code: number; message: string };

export class Agent {
  private readonly controller = new AbortController();
  private readonly startedAt = Date.now();

  constructor(
    /** Read at start and on every reload. */
    private readonly readConfig: () => AgentConfig,
    private readonly log: Logger,
    readonly version: string,
    /** the installed package this agent runs from (agent updates); absent when run from source */
    private readonly install?: UpdaterOptions['install'],
  ) {}

  stop(): void {
    this.controller.abort();
  }

  private get stopped(): boolean {
    return this.controller.signal.aborted;
  }

  /** Runs until stopped, a reload with exitOnReload, or a condition retrying cannot fix; resolves with the exit code. */
  async run(): Promise<number> {
    while (!this.stopped) {
      const config = this.readConfig();
      // Metrics are sampled from start, connected or not; the connection sends what is queued.
      const metrics = new MetricsCollector({
        intervalMs: config.metricsIntervalMs,
        flushMs: config.metricsFlushMs,
        maxQueue: config.metricsQueueMax,
        log: this.log,
      });
      await metrics.start();
      let outcome: Outcome;
      try {
        outcome = await this.work(config, metrics);
      } finally {
        metrics.stop();
      }
      if (outcome.kind === 'stopped') break;
      if (outcome.kind === 'fatal') {
        this.log.error(outcome.message);
        return outcome.code;
      }
      if (config.exitOnReload) {
        this.log.info('reload: exiting for the service manager to restart the agent');
        return EXIT_OK;
      }
      this.log.info('reload: restarting the work loop');
    }
    return EXIT_OK;
  }

  private fatal(message: string, code = EXIT_CONFIG): Outcome {
    return { kind: 'fatal', code, message };
  }

  private async work(config: AgentConfig, metrics: MetricsCollector): Promise<Outcome> {
    const stateDir = new StateDir(config.stateDir);
    const log = this.log.child({ module: 'configuration' });
    const updateLog = this.log.child({ module: 'update' });
    const updater = new Updater({
      stateDir: stateDir.dir,
      version: this.version,
      install: this.install,
      log: (level, msg, detail) => updateLog[level](detail ?? {}, msg),
      restart: (version) => {
        if (!config.exitOnReload) {
          updateLog.warn(
            { version },
            'agent update installed: it runs from the next start of the agent (no --exit-on-reload: no service manager to restart it)',
          );
          return;
        }
        updateLog.info({ version }, 'exiting for the service manager to start the updated agent');
        this.stop();
      },
    });
    const engine = new ConfigEngine({
      stateDir: stateDir.dir,
      root: config.configRoot,
      bundles: loadAgentBundle,
      log: (level, msg, detail) => log[level](detail ?? {}, msg),
      agent: { setMetricsEnabled: (enabled) => metrics.setEnabled(enabled), setUpdatePolicy: (policy) => updater.setPolicy(policy) },
    });
    try {
      return await this.connect(config, stateDir, engine, metrics, updater);
    } finally {
      engine.stop();
    }
  }

  private async connect(config: AgentConfig, stateDir: StateDir, engine: ConfigEngine, metrics: MetricsCollector, updater: Updater): Promise<Outcome> {
    const endpoint = new BrokerEndpoint(config.broker, config.caFile);
    if (config.insecureHttp) {
      this.log.warn(
        { broker: endpoint.base.origin },
        'INSECURE: plain http to the broker allowed by --insecure-http / FLEET_INSECURE_HTTP: traffic (the bootstrap key included) is not encrypted',
      );
    }
    let identity = stateDir.identity();
    let state = stateDir.readState(identity.deviceId);
    if (state.revoked) {
      if (!config.bootstrapKey) {
        return this.fatal(
          `The broker ${state.revoked.reason} this device (key ${identity.fingerprint}); start the agent with a bootstrap key to enrol again as a new device.`,
        );
      }
      this.log.warn(
        { oldDeviceId: identity.deviceId, reason: state.revoked.reason },
        'the previous device key was revoked: making a new key pair to enrol again',
      );
      stateDir.retireKey();
      await ConfigEngine.discard(stateDir.dir);
      identity = stateDir.identity();
      state = stateDir.readState(identity.deviceId);
    }
    const log = this.log.child({ deviceId: identity.deviceId });
    log.info({ fingerprint: identity.fingerprint, broker: endpoint.base.origin, stateDir: stateDir.dir }, 'device identity');
    let brokerKey: KeyObject | undefined;
    try {
      brokerKey = stateDir.brokerKey();
    } catch (err) {
      return this.fatal((err as Error).message);
    }
    const pin = (key: KeyObject) => {
      stateDir.pinBrokerKey(key);
      brokerKey = key;
      log.info({ broker_key: brokerKeyFingerprint(key) }, 'broker key pinned');
    };
    // The configuration kept from before applies on the interval even while the broker is away.
    await engine.start();

    const backoff = new Reconnect(config.retryMinMs, config.retryMaxMs);
    const save = (next: EnrolmentState) => {
      state = next;
      stateDir.writeState(next);
    };
    let pendingLogged = false;
    const revoked = (reason: string): Outcome => {
      save({ ...state, revoked: { reason, at: isoTime() } });
      return this.fatal(
        `The broker refuses this device key (${reason}): it was removed or rejected by an operator. Not retrying with it; start the agent with a bootstrap key to enrol again as a new device.`,
      );
    };

    while (!this.stopped) {
      // Enrol when this key is not known to be enrolled (first start, or the broker forgot it).
      if (!state.enrolled) {
        if (!config.bootstrapKey)
          return this.fatal('This device is not enrolled yet: start the agent with --bootstrap-key <key> (from POST /api/v2/bootstrapkey).');
        try {
          const answer = await endpoint.enrol(
            { bootstrap_key: config.bootstrapKey, public_key: identity.publicKeyPem, hostname: os.hostname() },
            `fleet-agent/${this.version}`,
            this.controller.signal,
          );
          if (answer.device_id !== identity.deviceId)
            return this.fatal(`The broker named this device ${answer.device_id}, not ${identity.deviceId}: refusing to continue.`, 1);
          if (answer.broker_key !== undefined) {
            let offered: KeyObject;
            try {
              offered = parseBrokerPublicKey(answer.broker_key);
            } catch (err) {
              return this.fatal(`The broker's signing key ${(err as Error).message}: refusing to continue.`, 1);
            }
            if (brokerKey && !brokerKey.equals(offered)) {
              // Another server at this address, or a broker whose database (and key) was replaced.
              const wait = backoff.afterFailure();
              log.error(
                { pinned: brokerKeyFingerprint(brokerKey), offered: brokerKeyFingerprint(offered), retryInMs: wait },
                `the broker presents another signing key than the one pinned at enrolment: not trusting it (remove ${stateDir.brokerKeyFile} only if the broker was really replaced)`,
              );
              await sleep(wait, this.controller.signal);
              continue;
            }
            if (!brokerKey) pin(offered);
          }
          save({ device_id: identity.deviceId, broker: endpoint.base.origin, enrolled: answer.state });
          if (answer.state === 'pending') {
            log.info(
              { fingerprint: identity.fingerprint },
              'enrolled: waiting for an operator to approve this device (compare the fingerprint in Pending hosts)',
            );
            pendingLogged = true;
          } else log.info('enrolled and approved');
        } catch (err) {
          if (this.stopped) break;
          if (!(err instanceof EnrolError)) throw err;
          if (err.error === 'device_revoked') return revoked(String(err.details.reason ?? 'revoked'));
          if (!err.retryable) return this.fatal(`Enrolment refused (${err.status} ${err.error}): ${err.message}`);
          const wait = backoff.afterFailure();
          log.warn({ status: err.status, error: err.message, retryInMs: wait }, 'enrolment failed: retrying');
          await sleep(wait, this.controller.signal);
          continue;
        }
      }

      const end = await runConnection({
        endpoint,
        identity,
        version: this.version,
        log,
        sessions: { stateDir: stateDir.dir, log: (msg, detail) => log.info(detail ?? {}, msg) },
        inventory: () => collectInventory(this.version, this.startedAt),
        // The collectors load with the first inventory taken (after the welcome).
        inventoryItems: async () =>
          (await import('./inventory-items.js')).collectInventoryItems((type, err) => log.warn({ type, err: err.message }, 'inventory type not collected')),
        inventoryIntervalMs: config.inventoryIntervalMs,
        afterInventory: releaseMemory,
        config: engine,
        metrics,
        updater,
        signal: this.controller.signal,
        brokerKey,
        onBrokerKey: (key) => {
          try {
            pin(key);
          } catch (err) {
            log.warn({ err: (err as Error).message }, 'broker key not kept on disk: it is learnt again at the next connection');
          }
        },
        onWelcome: () => {
          log.info('connected to the broker');
          pendingLogged = false;
          backoff.connected();
          if (state.enrolled !== 'approved') save({ ...state, enrolled: 'approved' });
        },
      });
      if (end.kind === 'stopped') return { kind: 'stopped' };
      if (end.kind === 'reload') return { kind: 'reload' };

      switch (end.code) {
        case AgentClose.removed:
          return revoked(end.reason || 'removed');
        case AgentClose.pending:
          if (!pendingLogged) log.info({ fingerprint: identity.fingerprint }, 'waiting for approval');
          pendingLogged = true;
          break;
        case AgentClose.unauthorized:
          log.warn({ reason: end.reason }, 'the broker does not accept this device key');
          // The broker lost track of this device (say, a database restored from before it enrolled):
          // enrol again when we can, but hand the bootstrap key only to the broker we pinned.
          if (config.bootstrapKey && brokerKey && !end.unknownProven) {
            log.error('the broker did not prove the pinned key when refusing this device: not enrolling again with it (nor sending it the bootstrap key)');
          } else if (config.bootstrapKey) save({ device_id: identity.deviceId });
          break;
        case AgentClose.replaced:
          log.warn('another connection with this device key took over (is a second agent running with the same state?)');
          break;
        default:
          if (end.untrusted) log.error({ error: end.error }, 'broker refused: it did not prove the pinned key; nothing it sends is applied');
          else if (end.welcomed) log.warn({ code: end.code, reason: end.reason, error: end.error }, 'connection to the broker lost');
          else {
            log.warn({ code: end.code, reason: end.reason, error: end.error }, 'cannot connect to the broker');
            await engine.connectionFailed();
          }
      }
      // Nothing listening (a restarting broker) is tried again within seconds; a broker that refused
      // the handshake for load said when to come back: that guides the wait.
      const wait = end.down ? backoff.afterDown() : backoff.afterFailure(end.retryAfterMs);
      log.debug({ retryInMs: wait }, 'reconnecting after a pause');
      await sleep(wait, this.controller.signal);
    }
    return { kind: 'stopped' };
  }
}
