/**
 * CPU spent while a bench part runs, a figure that holds on a loaded machine where throughput and
 * rates do not: this process's (the broker's, in the ssh bench) and its child agent's.
 */
import fs from 'node:fs';
import { commandLine, descendantPids, processTable, type ProcessEntry } from '../test/support/proc.js';

/**
 * CPU seconds (user + system) of this process's live descendants whose command line has `match`
 * (Linux; 0 elsewhere); with `reaped`, of the children they have waited for instead (an agent's commands).
 */
export function descendantsCpu(match: string, reaped = false): number {
  const tick = 100; // USER_HZ on Linux
  let procs: ProcessEntry[];
  try {
    procs = processTable();
  } catch {
    return 0;
  }
  const ours = descendantPids(procs, process.pid);
  let total = 0;
  for (const p of procs) {
    if (!ours.has(p.pid) || !commandLine(p.pid).includes(match)) continue;
    // utime, stime ([11], [12]); with `reaped`, cutime, cstime ([13], [14]): what its waited-for children spent
    total += (reaped ? Number(p.stat[13]) + Number(p.stat[14]) : Number(p.stat[11]) + Number(p.stat[12])) / tick;
  }
  return total;
}

/**
 * CPU milliseconds of the children `pid` has waited for (cutime + cstime; Linux, NaN elsewhere): this
 * process's for the scp and ssh it ran, sshd's listener's for the sessions it reaped.
 */
export function reapedMs(pid: number): number {
  try {
    const text = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const stat = text.slice(text.lastIndexOf(')') + 2).split(' ');
    return ((Number(stat[13]) + Number(stat[14])) * 1000) / 100; // clock ticks of 10 ms
  } catch {
    return Number.NaN;
  }
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

/** The agent's command helper's name on its command line (agent/sessions/spawner.ts SPAWNER_NAME). */
const HELPER = 'fleet-agent-command-helper';

/**
 * CPU milliseconds of this process, of the agent, of its command helper (`helperMs`: the process
 * that starts commands without a terminal, where it runs) and of the commands either reaped
 * meanwhile (`commandsMs`: the shells of console sessions) per unit of `count` while `body` ran.
 * A helper that exits while `body` runs takes its figures with it.
 */
export async function cpuPer<T>(
  body: () => Promise<T>,
  count: (r: T) => number,
): Promise<T & { selfMs: number; agentMs: number; helperMs: number; commandsMs: number }> {
  const self = process.cpuUsage();
  const agent = descendantsCpu('agent/main.ts');
  const helper = descendantsCpu(HELPER);
  const commands = descendantsCpu('agent/main.ts', true) + descendantsCpu(HELPER, true);
  const r = await body();
  const { user, system } = process.cpuUsage(self);
  const n = Math.max(1, count(r));
  return {
    ...r,
    selfMs: (user + system) / 1000 / n,
    agentMs: ((descendantsCpu('agent/main.ts') - agent) * 1000) / n,
    helperMs: ((descendantsCpu(HELPER) - helper) * 1000) / n,
    commandsMs: ((descendantsCpu('agent/main.ts', true) + descendantsCpu(HELPER, true) - commands) * 1000) / n,
  };
}
