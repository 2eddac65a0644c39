/**
 * `npm run bench -- agent`: what the installable agent costs on a device, against the development
 * path (`tsx agent/main.ts`) in the same run: installed size, idle RSS and idle CPU, both agents
 * enrolled and connected to one local broker. Printed, never asserted.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { AGENT_MALLOC_ARENA_MAX, AGENT_MALLOC_TRIM_THRESHOLD, AGENT_NODE_FLAGS, buildAgent } from '../agent/packaging/build.js';
import { startAgent, type TestAgent } from '../test/support/agent.js';
import { startTestBroker } from '../test/support/broker.js';

const SETTLE_MS = 5_000;
const IDLE_MS = Number(process.env.BENCH_AGENT_IDLE_MS) || 15_000;
const TICKS = 100; // USER_HZ on Linux
const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;

/** The process and its descendants, from /proc. */
function tree(root: number): number[] {
  const parents = new Map<number, number>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      parents.set(Number(entry), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone meanwhile
    }
  }
  const found = [root];
  for (let i = 0; i < found.length; i++) for (const [pid, ppid] of parents) if (ppid === found[i]) found.push(pid);
  return found;
}

/** VmRSS, or one of its parts (RssAnon: private memory; RssFile: mapped files, mostly the node binary, shared). */
function rssBytes(pids: number[], field = 'VmRSS'): number {
  let kib = 0;
  for (const pid of pids) kib += Number(new RegExp(`${field}:\\s+(\\d+)`).exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0);
  return kib * 1024;
}

/** utime + stime in clock ticks. */
function cpuTicks(pids: number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
    ticks += Number(fields[11]) + Number(fields[12]);
  }
  return ticks;
}

interface Idle {
  processes: number;
  rss: number;
  anon: number;
  file: number;
  cpuPercent: number;
}

async function measureIdle(roots: number[]): Promise<Idle[]> {
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  const trees = roots.map(tree);
  const before = trees.map(cpuTicks);
  const started = Date.now();
  await new Promise((r) => setTimeout(r, IDLE_MS));
  const seconds = (Date.now() - started) / 1000;
  return trees.map((pids, i) => ({
    processes: pids.length,
    rss: rssBytes(pids),
    anon: rssBytes(pids, 'RssAnon'),
    file: rssBytes(pids, 'RssFile'),
    cpuPercent: ((cpuTicks(pids) - before[i]) / TICKS / seconds) * 100,
  }));
}

export async function benchAgent(log: (line: string) => void): Promise<void> {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bench-agent-'));
  const t = await startTestBroker({ database: 'sqlite' });
  const agents: TestAgent[] = [];
  try {
    const build = await buildAgent(path.join(work, 'dist'));
    log(
      `installed size: ${mib(build.installedBytes)} (/usr/lib/fleet-agent, unit, link; plus the system's Node.js >= 20), ` +
        `.deb ${mib(fs.statSync(build.deb).size)}, tarball ${mib(fs.statSync(build.tarball).size)}, version ${build.version} ${build.arch}`,
    );
    const keyAnswer = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
    const key = Object.keys(keyAnswer.body as object)[0];
    const quiet = ['--log-level', 'info'];
    // Both at once, so that they see the same machine load.
    const nodeOptions = process.env.BENCH_AGENT_NODE_OPTIONS;
    const env: Record<string, string> = nodeOptions ? { NODE_OPTIONS: nodeOptions } : {};
    agents.push(startAgent({ broker: t.url, program: build.bundle, bootstrapKey: key, args: quiet, env }));
    // The same bundle under Node's default flags and glibc's default arenas (FLEET_AGENT_NODE_FLAGS empty,
    // MALLOC_ARENA_MAX=0: glibc's default), as it ran before AGENT_NODE_FLAGS. Its launcher still fixes
    // MALLOC_TRIM_THRESHOLD_ (glibc has no value that means "its default").
    agents.push(
      startAgent({ broker: t.url, program: build.bundle, bootstrapKey: key, args: quiet, env: { ...env, FLEET_AGENT_NODE_FLAGS: '', MALLOC_ARENA_MAX: '0' } }),
    );
    agents.push(startAgent({ broker: t.url, bootstrapKey: key, args: quiet }));
    await Promise.all(agents.map((a) => a.waitConnected(t, 60_000)));
    log(`both agents connected; idle for ${SETTLE_MS / 1000} s, then measured over ${IDLE_MS / 1000} s`);
    // The floor: node itself doing nothing, on this machine, at the same time.
    const bare = spawn(process.execPath, ['-e', 'setInterval(() => {}, 60_000)'], { stdio: 'ignore' });
    const [bundled, defaults, dev, floor] = await measureIdle([...agents.map((a) => a.process.pid as number), bare.pid as number]);
    bare.kill();
    const line = (name: string, m: Idle) =>
      `${name}: ${m.processes} process${m.processes === 1 ? '' : 'es'}, idle RSS ${mib(m.rss)} (private ${mib(m.anon)}, mapped files ${mib(m.file)}), idle CPU ${m.cpuPercent.toFixed(2)} %`;
    log(
      line(
        `bundled agent (fleet-agent.mjs: MALLOC_ARENA_MAX=${AGENT_MALLOC_ARENA_MAX} MALLOC_TRIM_THRESHOLD_=${AGENT_MALLOC_TRIM_THRESHOLD} node ${AGENT_NODE_FLAGS})`,
        bundled,
      ),
    );
    log(line("bundled agent, Node's default flags and arenas (FLEET_AGENT_NODE_FLAGS='' MALLOC_ARENA_MAX=0)", defaults));
    log(line('development agent (tsx agent/main.ts)', dev));
    log(line(`bare node ${process.version} (the floor)`, floor));
    const over = (m: Idle) => (m.rss - floor.rss) / 1024 / 1024;
    log(
      `the agent's own cost (RSS over bare node): ${over(bundled).toFixed(1)} MiB, with Node's default flags ${over(defaults).toFixed(1)} MiB; ` +
        `target < 10 MiB: ${over(bundled) < 10 ? 'met' : 'missed'}`,
    );
    log(
      `bundled / development: RSS ×${(bundled.rss / dev.rss).toFixed(2)}; target one process ≤ 40 MiB: ${bundled.processes === 1 && bundled.rss <= 40 * 1024 * 1024 ? 'met' : 'missed'}`,
    );
  } finally {
    await Promise.all(agents.map((a) => a.close()));
    await t.close();
    fs.rmSync(work, { recursive: true, force: true });
  }
}
