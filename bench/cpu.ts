/**
 * CPU spent while a bench part runs, a figure that holds on a loaded machine where throughput and
 * rates do not: this process's (the broker's, in the ssh bench) and its child agent's.
 */
import fs from 'node:fs';

/**
 * CPU seconds (user + system) of this process's live descendants whose command line has `match`
 * (Linux; 0 elsewhere); with `reaped`, of the children they have waited for instead (an agent's commands).
 */
export function descendantsCpu(match: string, reaped = false): number {
  const tick = 100; // USER_HZ on Linux
  let procs: { pid: number; ppid: number; cpu: number }[];
  try {
    procs = fs
      .readdirSync('/proc')
      .filter((d) => /^\d+$/.test(d))
      .flatMap((d) => {
        try {
          const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
          const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
          return [{ pid: Number(d), ppid: Number(f[1]), cpu: (reaped ? Number(f[13]) + Number(f[14]) : Number(f[11]) + Number(f[12])) / tick }];
        } catch {
          return [];
        }
      });
  } catch {
    return 0;
  }
  const ours = new Set([process.pid]);
  for (let grew = true; grew;) {
    grew = false;
    for (const p of procs) {
      if (ours.has(p.pid) || !ours.has(p.ppid)) continue;
      ours.add(p.pid);
      grew = true;
    }
  }
  let total = 0;
  for (const p of procs) {
    if (p.pid === process.pid || !ours.has(p.pid)) continue;
    const cmd = fs.existsSync(`/proc/${p.pid}/cmdline`) ? fs.readFileSync(`/proc/${p.pid}/cmdline`, 'utf8') : '';
    if (cmd.includes(match)) total += p.cpu;
  }
  return total;
}

/** CPU the broker (this process) and the agent spent while `body` ran, in ms per MB moved. */
export async function cpuPerMb<T extends { mbps: number; bytes?: number }>(body: () => Promise<T | undefined>, bytesOf: (r: T) => number) {
  const broker = process.cpuUsage();
  const agent = descendantsCpu('agent/main.ts');
  const r = await body();
  if (!r) return undefined;
  const { user, system } = process.cpuUsage(broker);
  const mb = bytesOf(r) / 1e6;
  return { ...r, brokerMsPerMb: (user + system) / 1000 / mb, agentMsPerMb: ((descendantsCpu('agent/main.ts') - agent) * 1000) / mb };
}

export const cpuLine = (r: { brokerMsPerMb: number; agentMsPerMb: number }) =>
  `CPU per MB: broker ${r.brokerMsPerMb.toFixed(2)} ms, agent ${r.agentMsPerMb.toFixed(2)} ms`;

/**
 * CPU milliseconds of this process, of the agent, and of the agent's commands it reaped meanwhile
 * (`commandsMs`: the shells of console sessions) per unit of `count` while `body` ran.
 */
export async function cpuPer<T>(body: () => Promise<T>, count: (r: T) => number): Promise<T & { selfMs: number; agentMs: number; commandsMs: number }> {
  const self = process.cpuUsage();
  const agent = descendantsCpu('agent/main.ts');
  const commands = descendantsCpu('agent/main.ts', true);
  const r = await body();
  const { user, system } = process.cpuUsage(self);
  const n = Math.max(1, count(r));
  return {
    ...r,
    selfMs: (user + system) / 1000 / n,
    agentMs: ((descendantsCpu('agent/main.ts') - agent) * 1000) / n,
    commandsMs: ((descendantsCpu('agent/main.ts', true) - commands) * 1000) / n,
  };
}
