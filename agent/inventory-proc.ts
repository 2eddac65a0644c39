/**
 * What the inventory reads from /proc: the listening ports (with the command holding each socket,
 * where this agent may look) and the top processes by CPU and memory.
 */
import fs from 'node:fs';
import os from 'node:os';
import { INVENTORY_LIMITS } from '../shared/inventory-limits.js';
import type { ListeningPort, RunningProcess } from '../shared/inventory.js';
import { parsePasswd } from './inventory-accounts.js';
import { clipLong, readText } from './inventory-read.js';

/** The address of /proc/net's hex notation: IPv4 as one little-endian word, IPv6 as four. */
export function procNetAddress(hex: string): string {
  if (hex.length === 8) {
    const n = parseInt(hex, 16);
    return [n & 0xff, (n >>> 8) & 0xff, (n >>> 16) & 0xff, (n >>> 24) & 0xff].join('.');
  }
  const bytes: number[] = [];
  for (let w = 0; w < 4; w++) {
    const word = hex.slice(w * 8, w * 8 + 8);
    for (let b = 3; b >= 0; b--) bytes.push(parseInt(word.slice(b * 2, b * 2 + 2), 16));
  }
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i] << 8) | bytes[i + 1]).toString(16));
  // the longest run of zero groups becomes ::
  let best = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j;
  }
  if (bestLen < 2) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

/** Listening sockets of one /proc/net table: TCP in LISTEN, UDP unconnected. Inodes for the owner lookup. */
export function parseProcNet(text: string, proto: ListeningPort['proto']): Array<{ proto: ListeningPort['proto']; socket: string; inode: string }> {
  const out: Array<{ proto: ListeningPort['proto']; socket: string; inode: string }> = [];
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 10) continue;
    const [local, remote, state, inode] = [f[1], f[2], f[3], f[9]];
    const tcp = proto.startsWith('tcp');
    if (tcp ? state !== '0A' : state !== '07' || !/^[0:]+$/.test(remote)) continue;
    const [addrHex, portHex] = local.split(':');
    if (!addrHex || !portHex) continue;
    const address = procNetAddress(addrHex);
    const port = parseInt(portHex, 16);
    out.push({ proto, socket: proto.endsWith('6') ? `[${address}]:${port}` : `${address}:${port}`, inode });
  }
  return out;
}

function commandLine(pid: string): string {
  const raw = readText(`/proc/${pid}/cmdline`);
  if (raw) return clipLong(raw.replace(/\0+$/, '').replace(/\0/g, ' '));
  const comm = readText(`/proc/${pid}/comm`);
  return comm ? `[${comm.trim()}]` : '';
}

const numericDirs = (dir: string) => {
  try {
    return fs.readdirSync(dir).filter((d) => /^\d+$/.test(d));
  } catch {
    return [];
  }
};

/** Socket inode → the command holding it, for the processes this agent may look into. */
function socketOwners(): Map<string, string> {
  const owners = new Map<string, string>();
  for (const pid of numericDirs('/proc')) {
    let fds: string[];
    try {
      fds = fs.readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    let cmd: string | undefined;
    for (const fd of fds) {
      let link: string;
      try {
        link = fs.readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      const m = /^socket:\[(\d+)\]$/.exec(link);
      if (m && !owners.has(m[1])) owners.set(m[1], (cmd ??= commandLine(pid)));
    }
  }
  return owners;
}

export function collectPorts(): ListeningPort[] | undefined {
  const sockets: ReturnType<typeof parseProcNet> = [];
  let any = false;
  for (const proto of ['tcp', 'tcp6', 'udp', 'udp6'] as const) {
    const text = readText(`/proc/net/${proto}`);
    if (text === undefined) continue;
    any = true;
    sockets.push(...parseProcNet(text, proto));
  }
  if (!any) return undefined;
  const owners = socketOwners();
  const seen = new Set<string>();
  const out: ListeningPort[] = [];
  for (const s of sockets) {
    const key = `${s.proto} ${s.socket}`;
    if (seen.has(key)) continue; // SO_REUSEPORT: one line per listener
    seen.add(key);
    out.push({ proto: s.proto, socket: s.socket, proc_info: owners.get(s.inode) ?? '' });
  }
  out.sort((a, b) => (a.proto + a.socket < b.proto + b.socket ? -1 : 1));
  return out.slice(0, INVENTORY_LIMITS.ports);
}

// ---- processes --------------------------------------------------------------------------------

const CLOCK_TICKS = 100; // USER_HZ on Linux

/** utime+stime and start time (clock ticks) from /proc/<pid>/stat; the command may hold spaces and parentheses. */
export function parseProcStat(text: string): { ticks: number; start: number } | undefined {
  const close = text.lastIndexOf(')');
  if (close < 0) return undefined;
  const f = text
    .slice(close + 2)
    .trim()
    .split(/\s+/);
  // f[0] is field 3 (state): utime is field 14, stime 15, starttime 22.
  const utime = Number(f[11]);
  const stime = Number(f[12]);
  const start = Number(f[19]);
  if (![utime, stime, start].every(Number.isFinite)) return undefined;
  return { ticks: utime + stime, start };
}

/** The processes using the most CPU (lifetime average, as `ps` shows) and the most memory, `perKind` of each. */
export function collectProcesses(perKind = INVENTORY_LIMITS.processes / 2): RunningProcess[] | undefined {
  const uptimeText = readText('/proc/uptime');
  const meminfo = readText('/proc/meminfo');
  if (!uptimeText || !meminfo) return undefined;
  const uptime = Number(uptimeText.split(' ')[0]);
  const memTotalKb = Number(/^MemTotal:\s+(\d+)/m.exec(meminfo)?.[1] ?? 0) || os.totalmem() / 1024;
  const names = new Map(parsePasswd(readText('/etc/passwd') ?? '').map((u) => [u.uid, u.user]));
  const all: RunningProcess[] = [];
  for (const pid of numericDirs('/proc')) {
    const stat = parseProcStat(readText(`/proc/${pid}/stat`) ?? '');
    const status = readText(`/proc/${pid}/status`);
    if (!stat || !status) continue;
    const uid = Number(/^Uid:\s+(\d+)/m.exec(status)?.[1] ?? -1);
    const rssKb = Number(/^VmRSS:\s+(\d+)/m.exec(status)?.[1] ?? 0);
    const elapsed = uptime - stat.start / CLOCK_TICKS;
    const cpu = elapsed > 0 ? (100 * stat.ticks) / CLOCK_TICKS / elapsed : 0;
    all.push({
      pid: Number(pid),
      user: names.get(uid) ?? (uid >= 0 ? String(uid) : ''),
      mem: Math.round((1000 * rssKb) / memTotalKb) / 10,
      cpu: Math.round(cpu * 10) / 10,
      cmdline: commandLine(pid),
    });
  }
  const chosen = new Map<number, RunningProcess>();
  for (const p of [...all].sort((a, b) => b.cpu - a.cpu).slice(0, perKind)) chosen.set(p.pid, p);
  for (const p of [...all].sort((a, b) => b.mem - a.mem).slice(0, perKind)) chosen.set(p.pid, p);
  return [...chosen.values()].sort((a, b) => b.cpu - a.cpu || b.mem - a.mem || a.pid - b.pid).slice(0, INVENTORY_LIMITS.processes);
}
