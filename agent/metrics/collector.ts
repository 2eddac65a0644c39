/**
 * The agent's metrics: sampled every `intervalMs` (all labels at one time), queued, and sent to the
 * broker as `metrics` messages every `flushMs` while connected (and at once on connecting). The
 * queue is bounded: while the broker is out of reach the oldest samples are dropped first, so a long
 * outage costs a fixed amount of memory. Collection runs whether or not the agent is connected.
 */
import type { Logger } from 'pino';
import { MAX_METRICS_BATCH, type MetricSample } from '../../shared/metrics.js';
import type { ControlMessage } from '../../shared/protocol.js';
import {
  blockMounts,
  cpuPercent,
  networkDelta,
  readCpuTemperature,
  readCpuTimes,
  readFilesystem,
  readLoad,
  readMemory,
  readNetworkTotals,
  type CpuTimes,
} from './samplers.js';

export interface MetricsCollectorOptions {
  intervalMs: number;
  flushMs: number;
  /** Most samples (one label at one time) kept while not sent. */
  maxQueue: number;
  log: Pick<Logger, 'debug' | 'info' | 'warn'>;
  procRoot?: string;
  sysRoot?: string;
  /** Unix seconds now. */
  now?: () => number;
}

export class MetricsCollector {
  private readonly procRoot: string;
  private readonly sysRoot: string;
  private readonly now: () => number;
  private queue: MetricSample[] = [];
  private cpuBefore?: CpuTimes;
  private netBefore?: Map<string, { rx: number; tx: number }>;
  private sampleTimer?: NodeJS.Timeout;
  private flushTimer?: NodeJS.Timeout;
  private send?: (msg: ControlMessage) => void;
  private enabled = true;
  /** Samples dropped because the queue was full (for the log). */
  dropped = 0;

  constructor(private readonly o: MetricsCollectorOptions) {
    this.procRoot = o.procRoot ?? '/proc';
    this.sysRoot = o.sysRoot ?? '/sys';
    this.now = o.now ?? (() => Math.floor(Date.now() / 1000));
  }

  /** Takes the first readings (CPU and network are differences) and samples from then on. */
  async start(): Promise<void> {
    await this.baseline();
    this.sampleTimer = setInterval(() => void this.sampleNow(), this.o.intervalMs);
    this.sampleTimer.unref();
    this.flushTimer = setInterval(() => this.flush(), this.o.flushMs);
    this.flushTimer.unref();
  }

  stop(): void {
    clearInterval(this.sampleTimer);
    clearInterval(this.flushTimer);
    this.send = undefined;
  }

  /** Off: no sampling, and the queue is emptied (qbee's `settings.metrics`). */
  setEnabled(enabled: boolean): void {
    if (enabled === this.enabled) return;
    this.enabled = enabled;
    this.o.log.info(`metrics sampling ${enabled ? 'on' : 'off'} (settings.metrics)`);
    if (!enabled) this.queue = [];
    // CPU and network are differences: start them afresh rather than span the time switched off.
    else void this.baseline();
  }

  /** A connection hands its sender while it is up; the queue goes out at once. Returns the detach. */
  attach(send: (msg: ControlMessage) => void): () => void {
    this.send = send;
    this.flush();
    return () => {
      if (this.send === send) this.send = undefined;
    };
  }

  get queued(): number {
    return this.queue.length;
  }

  private async baseline(): Promise<void> {
    this.cpuBefore = await readCpuTimes(this.procRoot).catch(() => undefined);
    this.netBefore = await readNetworkTotals(this.procRoot).catch(() => undefined);
  }

  /** One sample of every label the device has; a label that cannot be read is left out. */
  async collect(): Promise<MetricSample[]> {
    const ts = this.now();
    const out: MetricSample[] = [];
    const attempt = async (what: string, read: () => Promise<void>) => {
      try {
        await read();
      } catch (err) {
        this.o.log.debug({ err: (err as Error).message }, `metrics: ${what} not read`);
      }
    };
    await attempt('cpu', async () => {
      const now = await readCpuTimes(this.procRoot);
      const pct = this.cpuBefore && cpuPercent(now, this.cpuBefore);
      this.cpuBefore = now;
      if (pct) out.push({ label: 'cpu', ts, values: pct });
    });
    await attempt('memory', async () => {
      out.push({ label: 'memory', ts, values: await readMemory(this.procRoot) });
    });
    await attempt('load', async () => {
      out.push({ label: 'loadavg_weighted', ts, values: await readLoad(this.procRoot) });
    });
    await attempt('filesystems', async () => {
      for (const mount of await blockMounts(this.procRoot)) {
        try {
          out.push({ label: 'filesystem', ts, id: mount, values: await readFilesystem(mount) });
        } catch {
          // unreadable mount (permissions, gone): skipped
        }
      }
    });
    await attempt('network', async () => {
      const now = await readNetworkTotals(this.procRoot);
      const before = this.netBefore;
      this.netBefore = now;
      if (before)
        for (const d of networkDelta(now, before)) out.push({ label: 'network', ts, id: d.id, values: { rx_bytes: d.rx_bytes, tx_bytes: d.tx_bytes } });
    });
    await attempt('temperature', async () => {
      const celsius = await readCpuTemperature(this.sysRoot);
      if (celsius !== undefined) out.push({ label: 'temperature', ts, id: 'cpu_temp', values: { temperature: celsius } });
    });
    return out;
  }

  /** Samples now and queues the result, dropping the oldest beyond the bound. */
  async sampleNow(): Promise<void> {
    if (!this.enabled) return;
    this.enqueue(await this.collect());
  }

  enqueue(samples: MetricSample[]): void {
    this.queue.push(...samples);
    const over = this.queue.length - this.o.maxQueue;
    if (over > 0) {
      this.queue.splice(0, over);
      this.dropped += over;
      this.o.log.warn({ dropped: over, queued: this.queue.length }, 'metrics queue full: oldest samples dropped');
    }
  }

  /** Sends the queue in messages of at most MAX_METRICS_BATCH samples, while a connection is attached. */
  flush(): void {
    while (this.send && this.queue.length > 0) {
      const batch = this.queue.slice(0, MAX_METRICS_BATCH);
      try {
        this.send({ t: 'metrics', samples: batch });
      } catch (err) {
        this.o.log.debug({ err: (err as Error).message }, 'metrics not sent: kept for the next connection');
        return;
      }
      this.queue.splice(0, batch.length);
    }
  }
}
