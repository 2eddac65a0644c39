/**
 * Readers of the device's metrics from the kernel's files (`/proc`, `/sys`), each returning qbee's
 * values for one label: CPU (percent of time between two readings of /proc/stat), memory, load,
 * filesystems (per read-write mount of a block-device filesystem, statfs), network (bytes per
 * interface since the previous reading) and the CPU temperature (/sys/class/thermal) where present.
 * The roots are parameters so tests may point them elsewhere; nothing here writes.
 */
import { readdir, readFile, statfs } from 'node:fs/promises';
import path from 'node:path';

/** Cumulative CPU time counters of /proc/stat's first line (clock ticks). */
export interface CpuTimes {
  user: number;
  nice: number;
  system: number;
  idle: number;
  iowait: number;
  irq: number;
  softirq: number;
  steal: number;
}

const round2 = (v: number): number => Math.round(v * 100) / 100;

export async function readCpuTimes(procRoot: string): Promise<CpuTimes> {
  const file = path.join(procRoot, 'stat');
  const line = (await readFile(file, 'utf8')).split('\n', 1)[0] ?? '';
  const fields = line.trim().split(/\s+/);
  if (fields[0] !== 'cpu' || fields.length < 8) throw new Error(`unexpected first line in ${file}`);
  const n = fields.slice(1, 9).map((f) => Number(f) || 0);
  return { user: n[0]!, nice: n[1]!, system: n[2]!, idle: n[3]!, iowait: n[4]!, irq: n[5]!, softirq: n[6] ?? 0, steal: n[7] ?? 0 };
}

/** qbee's cpu values: percent of the time between two readings spent in user, system and I/O wait; undefined when no time passed. */
export function cpuPercent(now: CpuTimes, before: CpuTimes): { user: number; system: number; iowait: number } | undefined {
  const total = (t: CpuTimes) => t.user + t.nice + t.system + t.idle + t.iowait + t.irq + t.softirq + t.steal;
  const elapsed = total(now) - total(before);
  if (!(elapsed > 0)) return undefined;
  const pct = (a: number, b: number) => Math.min(100, Math.max(0, round2((100 * (a - b)) / elapsed)));
  return { user: pct(now.user, before.user), system: pct(now.system, before.system), iowait: pct(now.iowait, before.iowait) };
}

/** qbee's memory values: memfree (KiB available), memutil and swaputil (whole percent used). */
export async function readMemory(procRoot: string): Promise<{ memfree: number; memutil: number; swaputil: number }> {
  const file = path.join(procRoot, 'meminfo');
  const kb = new Map<string, number>();
  for (const line of (await readFile(file, 'utf8')).split('\n')) {
    const m = /^(\w+):\s+(\d+)/.exec(line);
    if (m) kb.set(m[1]!, Number(m[2]));
  }
  const total = kb.get('MemTotal') ?? 0;
  if (total <= 0) throw new Error(`no MemTotal in ${file}`);
  const available = kb.get('MemAvailable') ?? kb.get('MemFree') ?? 0;
  const swapTotal = kb.get('SwapTotal') ?? 0;
  const swapFree = kb.get('SwapFree') ?? 0;
  return {
    memfree: available,
    memutil: Math.floor(((total - available) * 100) / total),
    swaputil: swapTotal > 0 ? Math.floor(((swapTotal - swapFree) * 100) / swapTotal) : 0,
  };
}

/** qbee's loadavg_weighted values. */
export async function readLoad(procRoot: string): Promise<{ '1min': number; '5min': number; '15min': number }> {
  const file = path.join(procRoot, 'loadavg');
  const [a, b, c] = (await readFile(file, 'utf8')).trim().split(/\s+/).map(Number);
  if (![a, b, c].every((v) => typeof v === 'number' && Number.isFinite(v))) throw new Error(`unexpected ${file}`);
  return { '1min': a!, '5min': b!, '15min': c! };
}

/** /proc/mounts escapes spaces and the like as octal. */
function unescapeMount(p: string): string {
  return p.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Mount points of read-write block-device filesystems (not tmpfs, proc, overlay…), each once, at most `max`. */
export async function blockMounts(procRoot: string, max = 64): Promise<string[]> {
  const blockTypes = new Set(
    (await readFile(path.join(procRoot, 'filesystems'), 'utf8'))
      .split('\n')
      .filter((line) => line.trim() && !line.startsWith('nodev'))
      .map((line) => line.trim()),
  );
  const seen = new Set<string>();
  for (const line of (await readFile(path.join(procRoot, 'mounts'), 'utf8')).split('\n')) {
    const [, mount, type, options] = line.split(' ');
    if (!mount || !type || !options || !blockTypes.has(type)) continue;
    if (!options.split(',').includes('rw')) continue;
    seen.add(unescapeMount(mount));
    if (seen.size >= max) break;
  }
  return [...seen];
}

/** qbee's filesystem values of one mount: avail (KiB available to users), use (whole percent used). */
export async function readFilesystem(mount: string): Promise<{ avail: number; use: number }> {
  const st = await statfs(mount);
  const sizeKb = (st.blocks * st.bsize) / 1024;
  const availKb = Math.floor((st.bavail * st.bsize) / 1024);
  return { avail: availKb, use: sizeKb > 0 ? 100 - Math.floor((100 * availKb) / sizeKb) : 0 };
}

/** Cumulative bytes received and sent per interface (/proc/net/dev), at most `max` interfaces. */
export async function readNetworkTotals(procRoot: string, max = 64): Promise<Map<string, { rx: number; tx: number }>> {
  const out = new Map<string, { rx: number; tx: number }>();
  for (const line of (await readFile(path.join(procRoot, 'net', 'dev'), 'utf8')).split('\n')) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    const name = line.slice(0, colon).trim();
    const fields = line
      .slice(colon + 1)
      .trim()
      .split(/\s+/)
      .map(Number);
    if (!name || fields.length < 9) continue;
    out.set(name, { rx: fields[0] || 0, tx: fields[8] || 0 });
    if (out.size >= max) break;
  }
  return out;
}

/** Bytes per interface since the previous totals; a counter that went back (reset, wrap) counts 0. */
export function networkDelta(
  now: Map<string, { rx: number; tx: number }>,
  before: Map<string, { rx: number; tx: number }>,
): Array<{ id: string; rx_bytes: number; tx_bytes: number }> {
  const out: Array<{ id: string; rx_bytes: number; tx_bytes: number }> = [];
  for (const [id, v] of now) {
    const b = before.get(id);
    if (!b) continue;
    out.push({ id, rx_bytes: Math.max(0, v.rx - b.rx), tx_bytes: Math.max(0, v.tx - b.tx) });
  }
  return out;
}

/** Thermal zone types that measure the CPU (or the SoC carrying it), in order of preference. */
const CPU_ZONES = [/^cpu/i, /^x86_pkg_temp$/i, /^soc/i, /^acpitz$/i];

/** The CPU temperature in °C from /sys/class/thermal, or undefined where the device has no such zone. */
export async function readCpuTemperature(sysRoot: string): Promise<number | undefined> {
  const dir = path.join(sysRoot, 'class', 'thermal');
  let zones: string[];
  try {
    zones = (await readdir(dir)).filter((z) => z.startsWith('thermal_zone'));
  } catch {
    return undefined;
  }
  const found: Array<{ rank: number; celsius: number }> = [];
  for (const zone of zones.slice(0, 64)) {
    try {
      const type = (await readFile(path.join(dir, zone, 'type'), 'utf8')).trim();
      const rank = CPU_ZONES.findIndex((re) => re.test(type));
      if (rank < 0) continue;
      const milli = Number((await readFile(path.join(dir, zone, 'temp'), 'utf8')).trim());
      if (Number.isFinite(milli) && milli > -273_000 && milli < 1_000_000) found.push({ rank, celsius: round2(milli / 1000) });
    } catch {
      // a zone that cannot be read (disabled sensor) is skipped
    }
  }
  found.sort((a, b) => a.rank - b.rank);
  return found[0]?.celsius;
}
