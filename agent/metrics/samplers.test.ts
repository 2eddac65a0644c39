import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
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

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'samplers-'));
afterAll(() => fs.rmSync(tmp, { recursive: true, force: true }));

function times(t: Partial<CpuTimes>): CpuTimes {
  return { user: 0, nice: 0, system: 0, idle: 0, iowait: 0, irq: 0, softirq: 0, steal: 0, ...t };
}

describe('samplers on this machine (read-only /proc)', () => {
  it('CPU times grow, and the percentages between two readings stay within 0..100', async () => {
    const before = await readCpuTimes('/proc');
    // Burn a little CPU so that time passes in the counters.
    const until = Date.now() + 30;
    while (Date.now() < until) Math.sqrt(Math.random());
    const now = await readCpuTimes('/proc');
    expect(now.user + now.system + now.idle).toBeGreaterThanOrEqual(before.user + before.system + before.idle);
    const pct = cpuPercent(now, before);
    for (const v of Object.values(pct ?? {})) {
      expect(v).toBeGreaterThanOrEqual(0);
      expect(v).toBeLessThanOrEqual(100);
    }
  });

  it('memory: KiB available below MemTotal, utilisation in percent', async () => {
    const m = await readMemory('/proc');
    const total = Number(/MemTotal:\s+(\d+)/.exec(fs.readFileSync('/proc/meminfo', 'utf8'))![1]);
    expect(m.memfree).toBeGreaterThan(0);
    expect(m.memfree).toBeLessThanOrEqual(total);
    expect(m.memutil).toBeGreaterThanOrEqual(0);
    expect(m.memutil).toBeLessThanOrEqual(100);
    expect(m.memutil).toBe(Math.floor(((total - m.memfree) * 100) / total));
  });

  it('load: the three averages of /proc/loadavg', async () => {
    const l = await readLoad('/proc');
    const [a] = fs.readFileSync('/proc/loadavg', 'utf8').split(' ').map(Number);
    expect(l['1min']).toBe(a);
    expect(l['5min']).toBeGreaterThanOrEqual(0);
  });

  it('filesystems: read-write block mounts only (the root here), with KiB available and percent used', async () => {
    const mounts = await blockMounts('/proc');
    expect(mounts).toContain('/');
    expect(mounts).not.toContain('/proc');
    expect(mounts).not.toContain('/dev/shm');
    const fsRoot = await readFilesystem('/');
    const st = fs.statfsSync('/');
    // Other tests write to this disk meanwhile: the same figure within 512 MiB (a wrong unit or formula is off by far more).
    expect(Math.abs(fsRoot.avail - Math.floor((st.bavail * st.bsize) / 1024))).toBeLessThan(512 * 1024);
    expect(fsRoot.use).toBeGreaterThanOrEqual(0);
    expect(fsRoot.use).toBeLessThanOrEqual(100);
  });

  it('network: totals per interface, loopback included', async () => {
    const totals = await readNetworkTotals('/proc');
    expect(totals.has('lo')).toBe(true);
    expect(totals.get('lo')!.rx).toBeGreaterThanOrEqual(0);
  });
});

describe('sampler arithmetic', () => {
  it('CPU percent is the share of elapsed ticks; no elapsed time gives nothing', () => {
    const before = times({ user: 100, system: 50, idle: 800, iowait: 50 });
    const now = times({ user: 150, system: 75, idle: 950, iowait: 75 });
    expect(cpuPercent(now, before)).toEqual({ user: 20, system: 10, iowait: 10 });
    expect(cpuPercent(before, before)).toBeUndefined();
  });

  it('network deltas: bytes since the previous totals, a counter reset counts 0, new interfaces wait a round', () => {
    const before = new Map([
      ['eth0', { rx: 1000, tx: 500 }],
      ['wlan0', { rx: 9000, tx: 9000 }],
    ]);
    const now = new Map([
      ['eth0', { rx: 1600, tx: 700 }],
      ['wlan0', { rx: 10, tx: 20 }],
      ['usb0', { rx: 5, tx: 5 }],
    ]);
    expect(networkDelta(now, before)).toEqual([
      { id: 'eth0', rx_bytes: 600, tx_bytes: 200 },
      { id: 'wlan0', rx_bytes: 0, tx_bytes: 0 },
    ]);
  });

  it('temperature: the CPU zone of /sys/class/thermal in °C; none without such a zone', async () => {
    const sys = path.join(tmp, 'sys');
    const zone = (n: number, type: string, milli: string) => {
      const dir = path.join(sys, 'class', 'thermal', `thermal_zone${n}`);
      fs.mkdirSync(dir, { recursive: true });
      fs.writeFileSync(path.join(dir, 'type'), `${type}\n`);
      fs.writeFileSync(path.join(dir, 'temp'), `${milli}\n`);
    };
    zone(0, 'acpitz', '30000');
    zone(1, 'x86_pkg_temp', '47500');
    zone(2, 'iwlwifi_1', '41000');
    expect(await readCpuTemperature(sys)).toBe(47.5);
    expect(await readCpuTemperature(path.join(tmp, 'nothing'))).toBeUndefined();
    // This machine's own zones, if any, read as a plausible temperature.
    const own = await readCpuTemperature('/sys');
    if (own !== undefined) {
      expect(own).toBeGreaterThan(-50);
      expect(own).toBeLessThan(150);
    }
  });
});
