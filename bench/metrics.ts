/**
 * Metrics: the cost of storing agents' batches and of reading them back, at 100 and 1,000 devices
 * (BENCH_METRICS_DEVICES="100,1000") on SQLite. Each device gets a day of hourly samples (for the
 * analysis) and one 5-minute batch at a 10 s interval (30 times × cpu, memory, load, 2 filesystems,
 * 2 interfaces, temperature). Printed: ingest time per batch and what it means for 1,000 agents at
 * a 10 s interval (share of one core, database growth per day), and the query cost — POST /analysis
 * (top 10 by CPU over 24 h) and GET /metrics/latest — as ratios between the fleet sizes.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { MetricSample } from '../shared/metrics.js';
import { startTestBroker, type TestBroker } from '../test/support/broker.js';
import { insertDevices } from './api.js';

const SIZES = (process.env.BENCH_METRICS_DEVICES ?? '100,1000').split(',').map(Number);
const BATCH_POINTS = 30; // 5 minutes at 10 s
const BATCHES_PER_DAY = 288;

function deviceId(n: number): string {
  return crypto.createHash('sha256').update(`bench-device-${n}`).digest('hex');
}

function pointAt(ts: number, seed: number): MetricSample[] {
  const r = (k: number) => Math.abs(Math.sin(seed * 12.9898 + ts * 78.233 + k)) * 100;
  return [
    { label: 'cpu', ts, values: { user: Math.round(r(1)) / 2, system: Math.round(r(2)) / 4, iowait: Math.round(r(3)) / 10 } },
    { label: 'memory', ts, values: { memfree: 1_000_000 + Math.round(r(4) * 1000), memutil: Math.round(r(5)), swaputil: 0 } },
    { label: 'loadavg_weighted', ts, values: { '1min': r(6) / 50, '5min': r(7) / 50, '15min': r(8) / 50 } },
    { label: 'filesystem', ts, id: '/', values: { avail: 5_000_000, use: Math.round(r(9)) } },
    { label: 'filesystem', ts, id: '/data', values: { avail: 50_000_000, use: Math.round(r(10)) } },
    { label: 'network', ts, id: 'eth0', values: { rx_bytes: Math.round(r(11) * 1000), tx_bytes: Math.round(r(12) * 100) } },
    { label: 'network', ts, id: 'wlan0', values: { rx_bytes: 0, tx_bytes: 0 } },
    { label: 'temperature', ts, id: 'cpu_temp', values: { temperature: 40 + r(13) / 5 } },
  ];
}

function fileSize(t: TestBroker): number {
  let total = 0;
  for (const name of fs.readdirSync(t.dataDir)) if (name.startsWith('fleet.sqlite')) total += fs.statSync(path.join(t.dataDir, name)).size;
  return total;
}

async function median(runs: number, work: () => Promise<unknown>): Promise<number> {
  await work(); // warm-up
  const times: number[] = [];
  for (let i = 0; i < runs; i++) {
    const started = process.hrtime.bigint();
    await work();
    times.push(Number(process.hrtime.bigint() - started) / 1e6);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(times.length / 2)]!;
}

interface Measured {
  devices: number;
  batchMs: number;
  bytesPerBatch: number;
  analysisMs: number;
  latestMs: number;
}

async function measure(devices: number, log: (line: string) => void): Promise<Measured> {
  const t = await startTestBroker({ database: 'sqlite' });
  try {
    await insertDevices(t, devices, ['root'], 0);
    const metrics = t.broker.services.metrics;
    const now = Math.floor(Date.now() / 1000);
    log(`metrics: ${devices} devices: a day of hourly samples each …`);
    for (let n = 0; n < devices; n++) {
      const day: MetricSample[] = [];
      for (let h = 24; h >= 1; h--) day.push(...pointAt(now - h * 3600, n));
      await metrics.ingest(deviceId(n), day);
    }
    log(`metrics: ${devices} devices: one 5-minute batch (10 s interval) each, timed …`);
    const sizeBefore = fileSize(t);
    const started = process.hrtime.bigint();
    for (let n = 0; n < devices; n++) {
      const batch: MetricSample[] = [];
      for (let i = BATCH_POINTS; i >= 1; i--) batch.push(...pointAt(now - i * 10, n));
      await metrics.ingest(deviceId(n), batch);
    }
    const batchMs = Number(process.hrtime.bigint() - started) / 1e6 / devices;
    const bytesPerBatch = Math.max(0, fileSize(t) - sizeBefore) / devices;
    const analysisMs = await median(7, async () => {
      const r = await t.api('POST', '/api/v2/analysis', { token: t.adminToken, body: { metric: 'cpu.user', limit: 10 } });
      if (r.status !== 200 || r.body.total !== devices) throw new Error(`analysis answered ${r.status}: ${JSON.stringify(r.body).slice(0, 200)}`);
    });
    const latestMs = await median(15, async () => {
      const r = await t.api('GET', `/api/v2/device/${deviceId(devices - 1)}/metrics/latest`, { token: t.adminToken });
      if (r.status !== 200 || r.body.cpu.reported === 0) throw new Error(`latest answered ${r.status}`);
    });
    log(
      `metrics: ${devices} devices: ingest ${batchMs.toFixed(2)} ms per 5-minute batch (${BATCH_POINTS * 8} samples), ` +
        `+${(bytesPerBatch / 1024).toFixed(1)} KiB per batch; POST /analysis top 10 by CPU over 24 h ${analysisMs.toFixed(1)} ms; GET /metrics/latest ${latestMs.toFixed(1)} ms`,
    );
    return { devices, batchMs, bytesPerBatch, analysisMs, latestMs };
  } finally {
    await t.close();
  }
}

export async function benchMetrics(log: (line: string) => void): Promise<void> {
  const results: Measured[] = [];
  for (const size of SIZES) results.push(await measure(size, log));
  const large = results[results.length - 1]!;
  // 1,000 agents at a 10 s interval send 288 five-minute batches a day each.
  const cpuShare = (large.batchMs * BATCHES_PER_DAY * 1000) / 86_400_000;
  const growth = (large.bytesPerBatch * BATCHES_PER_DAY * 1000) / 1024 ** 3;
  log(
    `RESULT metrics.ingest_1000_agents_10s cpu_share_of_one_core=${(cpuShare * 100).toFixed(1)}% raw_growth_per_day=${growth.toFixed(2)} GiB (before retention)`,
  );
  log(`RESULT metrics.analysis_top10_24h_${large.devices}_devices ms=${large.analysisMs.toFixed(1)} (target < 200 on SQLite)`);
  if (results.length >= 2) {
    const small = results[0]!;
    const scale = large.devices / small.devices;
    log(
      `RESULT metrics.analysis_per_device ratio=${(large.analysisMs / large.devices / (small.analysisMs / small.devices)).toFixed(2)} ` +
        `(${small.devices} → ${large.devices} devices; 1.00 is linear, ${(1 / scale).toFixed(2)} flat)`,
    );
    log(`RESULT metrics.latest ratio=${(large.latestMs / small.latestMs).toFixed(2)} (${small.devices} → ${large.devices} devices; 1.00 is flat)`);
    log(`RESULT metrics.ingest_per_batch ratio=${(large.batchMs / small.batchMs).toFixed(2)} (${small.devices} → ${large.devices} devices; 1.00 is flat)`);
  }
}
