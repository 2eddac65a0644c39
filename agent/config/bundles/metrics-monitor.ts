/**
 * qbee's `metrics_monitor`: thresholds on the device's metrics (`cpu:user`, `memory:memutil`,
 * `filesystem:use` with the mount point as `id`, …). A monitor reaching its threshold reports a warning
 * once; it reports once more (info) when the value falls back under it. Which monitors are triggered, and
 * the previous CPU sample (CPU use is the change between two samples), live in the bundle's state.
 */
import { readFile, statfs } from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import type { Bundle, BundleContext } from '../bundle.js';
import { parseBundleData, readBundleState, writeBundleState } from './software-support.js';

/** The metric values qbee's agent collects that a monitor can watch (percentages). */
export const MONITORED_VALUES = ['cpu:user', 'cpu:system', 'cpu:iowait', 'memory:memutil', 'memory:swaputil', 'filesystem:use'] as const;

const monitor = z
  .object({
    value: z.enum(MONITORED_VALUES, { error: `must be one of ${MONITORED_VALUES.join(', ')}` }),
    threshold: z.number().min(0).max(1e12),
    id: z.string().max(1024).optional().default(''),
  })
  .refine((m) => !m.value.startsWith('filesystem:') || m.id.startsWith('/'), { message: 'filesystem monitors need the mount point as id', path: ['id'] });

const schema = z.looseObject({ metrics: z.array(monitor).max(200).optional().default([]) });

export type MetricsMonitorData = z.infer<typeof schema>;

interface CpuSample {
  user: number;
  nice: number;
  system: number;
  idle: number;
  iowait: number;
  irq: number;
}

interface MonitorState {
  cpu?: CpuSample;
  /** monitor key → the threshold it triggered at */
  triggered: Record<string, number>;
}

const STATE = 'metrics_monitor';

async function readCpu(procRoot: string): Promise<CpuSample> {
  const line = (await readFile(path.join(procRoot, 'stat'), 'utf8')).split('\n')[0] ?? '';
  const fields = line.trim().split(/\s+/);
  if (fields[0] !== 'cpu' || fields.length < 7) throw new Error(`unexpected ${path.join(procRoot, 'stat')}`);
  const [user, nice, system, idle, iowait, irq] = fields.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  return { user, nice, system, idle, iowait, irq };
}

function cpuPercentages(now: CpuSample, before: CpuSample): Record<string, number> | null {
  const total = (s: CpuSample): number => s.user + s.nice + s.system + s.idle + s.iowait + s.irq;
  const elapsed = total(now) - total(before);
  if (!(elapsed > 0)) return null;
  const pct = (a: number, b: number): number => Math.round((10000 * (a - b)) / elapsed) / 100;
  return {
    'cpu:user': pct(now.user, before.user),
    'cpu:system': pct(now.system, before.system),
    'cpu:iowait': pct(now.iowait, before.iowait),
  };
}

async function readMemory(procRoot: string): Promise<Record<string, number>> {
  const fields = new Map<string, number>();
  for (const line of (await readFile(path.join(procRoot, 'meminfo'), 'utf8')).split('\n')) {
    const m = /^(\w+):\s+(\d+)/.exec(line);
    if (m) fields.set(m[1]!, Number(m[2]));
  }
  const memTotal = fields.get('MemTotal') ?? 0;
  const memAvailable = fields.get('MemAvailable') ?? fields.get('MemFree') ?? 0;
  const swapTotal = fields.get('SwapTotal') ?? 0;
  const swapFree = fields.get('SwapFree') ?? 0;
  if (memTotal <= 0) throw new Error(`no MemTotal in ${path.join(procRoot, 'meminfo')}`);
  return {
    'memory:memutil': Math.floor(((memTotal - memAvailable) * 100) / memTotal),
    'memory:swaputil': swapTotal > 0 ? Math.floor(((swapTotal - swapFree) * 100) / swapTotal) : 0,
  };
}

/** `filesystem:use:<mount>` for each watched mount point that is mounted. */
async function readFilesystems(procRoot: string, mounts: string[]): Promise<Record<string, number>> {
  if (mounts.length === 0) return {};
  const mounted = new Set(
    (await readFile(path.join(procRoot, 'mounts'), 'utf8'))
      .split('\n')
      .map((line) => line.split(' ')[1])
      .filter((p): p is string => Boolean(p))
      // /proc/mounts escapes spaces and such as octal
      .map((p) => p.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)))),
  );
  const values: Record<string, number> = {};
  for (const mount of mounts) {
    if (!mounted.has(mount)) continue;
    const st = await statfs(mount);
    const size = st.blocks * st.bsize;
    if (size > 0) values[`filesystem:use:${mount}`] = 100 - Math.floor((100 * st.bavail * st.bsize) / size);
  }
  return values;
}

export interface MetricsMonitorOptions {
  /** where the kernel's process information is read (`/proc`) */
  procRoot?: string;
  /** pause between two CPU samples when there is no earlier one */
  cpuSampleMs?: number;
}

export function createMetricsMonitorBundle(options: MetricsMonitorOptions = {}): Bundle<MetricsMonitorData> {
  const procRoot = options.procRoot ?? '/proc';
  const cpuSampleMs = options.cpuSampleMs ?? 250;

  async function sample(ctx: BundleContext, data: MetricsMonitorData, state: MonitorState): Promise<Record<string, number>> {
    const wanted = new Set(data.metrics.map((m) => m.value.split(':')[0]));
    let values: Record<string, number> = {};
    if (wanted.has('cpu')) {
      let before = state.cpu;
      let now = await readCpu(procRoot);
      if (!before) {
        before = now;
        await new Promise((resolve) => setTimeout(resolve, cpuSampleMs));
        now = await readCpu(procRoot);
      }
      state.cpu = now;
      values = { ...values, ...cpuPercentages(now, before) };
    }
    if (wanted.has('memory')) values = { ...values, ...(await readMemory(procRoot)) };
    if (wanted.has('filesystem')) {
      const mounts = data.metrics.filter((m) => m.value.startsWith('filesystem:')).map((m) => m.id);
      values = { ...values, ...(await readFilesystems(procRoot, mounts)) };
    }
    return values;
  }

  return {
    name: 'metrics_monitor',
    parse: (data) => parseBundleData('metrics_monitor', schema, data),
    async apply(data, ctx) {
      const state = await readBundleState<MonitorState>(ctx, STATE, { triggered: {} });
      const monitors = new Map<string, number>();
      for (const m of data.metrics) monitors.set(m.id ? `${m.value}:${m.id}` : m.value, m.threshold);
      // forget triggers of monitors removed or given another threshold
      for (const [key, threshold] of Object.entries(state.triggered)) {
        if (monitors.get(key) !== threshold) delete state.triggered[key];
      }
      if (monitors.size === 0) {
        await writeBundleState(ctx, STATE, { triggered: {} });
        return;
      }
      let values: Record<string, number>;
      try {
        values = await sample(ctx, data, state);
      } catch (err) {
        ctx.report('ERR', 'Metrics monitor cannot read the device metrics.', (err as Error).message);
        return;
      }
      for (const [key, threshold] of monitors) {
        const value = values[key];
        if (value === undefined) continue;
        const triggered = key in state.triggered;
        if (value >= threshold && !triggered) {
          state.triggered[key] = threshold;
          ctx.report('WARN', `Metrics monitor ${key} triggered, value ${value.toFixed(2)} >= ${threshold.toFixed(2)}`);
        } else if (value < threshold && triggered) {
          delete state.triggered[key];
          ctx.report('INFO', `Metrics monitor ${key} recovered, value ${value.toFixed(2)} < ${threshold.toFixed(2)}`);
        }
      }
      await writeBundleState(ctx, STATE, state);
    },
  };
}

export const metricsMonitorBundle = createMetricsMonitorBundle();
