/**
 * `npm run bench -- scale [idle|storm] [--agents N] [--workers N] [--idle-seconds S]`: how many idle
 * agents one broker holds and what each costs, and how fast they all come back after a restart.
 *
 * The broker is the production build (`npm run build:broker`, one `node` process, SQLite in a
 * temporary DATA_DIR). The devices are enrolled through the broker's own store before it starts
 * (real EC P-256 keys, approved); the load generator (bench/scale-load.ts) runs in several child
 * processes and speaks the real agent protocol. Printed:
 *
 *   - broker RSS per agent: (RSS with N agents − RSS with none) / N, after a settle time
 *   - broker CPU share while idle (pings and heartbeats both ways), from /proc/<pid>/stat
 *   - the anchor: a bare `ws` server holding N connections from the same generator, per connection,
 *     and the broker's figure as a ratio of it
 *   - the reconnect storm: the broker restarted (SIGTERM, started again), time until all N are back
 *     on the agent's backoff with full jitter, with refused, busy (503) and failed handshakes counted
 *
 * Timings are printed, never asserted. Targets: ≥ 19,000 agents, ≤ 12 KiB each, storm ≤ 60 s.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import type { Insertable } from 'kysely';
import { buildBroker } from '../broker/packaging/build.js';
import { loadConfig } from '../broker/environment.js';
import { openStore } from '../broker/db/database.js';
import type { DevicesTable, NodesTable } from '../broker/db/schema.js';
import { ensureSystemNodes } from '../broker/devices/scope.js';
import { deviceIdOf, publicKeyPem } from '../shared/device-key.js';
import { AGENT_WS_PATH } from '../shared/protocol.js';
import { approvedDeviceRow } from '../test/support/broker.js';
import type { LoadStart, LoadStats } from './scale-load.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const TICKS = 100; // USER_HZ on Linux
const KIB = 1024;
const TARGET_AGENTS = 19_000;
const TARGET_KIB = 12;
const TARGET_STORM_S = 60;
/**
 * Source addresses of the generated agents (127.0.1.x), as a fleet comes from many: the broker caps
 * connections (MAX_CONNECTIONS_PER_ADDRESS, 256) and handshakes (32) per address, and 250 addresses
 * hold up to 64,000 agents under those caps.
 */
const LOCAL_ADDRESSES = Array.from({ length: 250 }, (_, i) => `127.0.1.${i + 1}`);

type Log = (line: string) => void;

function option(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  if (at < 0) return fallback;
  const value = Number(process.argv[at + 1]);
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} takes a positive whole number`);
  return value;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function rssBytes(pid: number): number {
  return Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0) * KIB;
}

function cpuTicks(pid: number): number {
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

function openFilesLimit(pid: number): string {
  return /Max open files\s+(\d+|unlimited)\s+(\d+|unlimited)/.exec(fs.readFileSync(`/proc/${pid}/limits`, 'utf8'))?.[1] ?? '?';
}

/**
 * The broker's accept queue: connections the kernel completed and the broker has not accepted yet
 * (`ss`'s Recv-Q of the listening socket), sampled every second; `peak()` the largest seen. Undefined
 * where `ss` is not installed. A connection waiting there is one no cap of the broker sees.
 */
function acceptQueueSampler(port: number): { peak(): number | undefined; stop(): void } {
  let peak: number | undefined;
  let busy = false;
  const timer = setInterval(() => {
    if (busy) return;
    busy = true;
    execFile('ss', ['-Hltn', `sport = :${port}`], (err, out) => {
      busy = false;
      if (err) return;
      const queued = Number(out.trim().split(/\s+/)[1]);
      if (Number.isInteger(queued)) peak = Math.max(peak ?? 0, queued);
    });
  }, 1000);
  return { peak: () => peak, stop: () => clearInterval(timer) };
}

/** Machine load, to print beside the figures: the machine may be shared. */
function loadAverage(): string {
  return os
    .loadavg()
    .map((l) => l.toFixed(1))
    .join(' ');
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** `node <args>` with the open-files limit raised to the hard limit (`ulimit -n`), in `cwd`. */
function nodeWithFdLimit(args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv; ipc?: boolean }): ChildProcess {
  return spawn('sh', ['-c', 'ulimit -n "$(ulimit -Hn)" && exec "$@"', 'sh', process.execPath, ...args], {
    cwd: options.cwd,
    env: options.env ?? process.env,
    stdio: options.ipc ? ['ignore', 'inherit', 'inherit', 'ipc'] : ['ignore', 'ignore', 'pipe'],
  });
}

async function waitHttp(url: string, child: ChildProcess, timeoutMs = 60_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (child.exitCode !== null) throw new Error(`the process exited with ${child.exitCode}`);
    try {
      const res = await fetch(url);
      await res.arrayBuffer();
      if (res.status < 500) return;
    } catch {
      // not listening yet
    }
    await sleep(100);
  }
  throw new Error(`${url} did not answer within ${timeoutMs / 1000} s`);
}

function stop(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    child.once('exit', () => resolve());
    child.kill(signal);
  });
}

/** The load generator: `workers` child processes sharing `count` connections. */
class Load {
  readonly children: ChildProcess[] = [];
  readonly stats: LoadStats[] = [];

  constructor(
    private readonly program: string,
    private readonly cwd: string,
  ) {}

  start(url: string, mode: LoadStart['mode'], count: number, workers: number, keys: { key: string; id: string }[]): void {
    for (let w = 0; w < workers; w++) {
      const from = Math.floor((count * w) / workers);
      const to = Math.floor((count * (w + 1)) / workers);
      const child = nodeWithFdLimit([this.program], { cwd: this.cwd, ipc: true });
      const slot = this.stats.length;
      this.stats.push(noStats());
      child.on('message', (m: LoadStats) => (this.stats[slot] = m));
      child.send({
        t: 'start',
        url,
        mode,
        count: to - from,
        agents: keys.slice(from, to),
        localAddresses: LOCAL_ADDRESSES,
        rampConcurrency: Math.max(16, Math.floor(512 / workers)),
      } satisfies LoadStart);
      this.children.push(child);
    }
  }

  total(): LoadStats {
    const sum = noStats();
    for (const s of this.stats) {
      sum.connected += s.connected;
      sum.inFlight += s.inFlight;
      sum.attempts += s.attempts;
      sum.busy += s.busy;
      sum.refused += s.refused;
      sum.errors += s.errors;
      sum.lost += s.lost;
      for (const [code, n] of Object.entries(s.closedBeforeWelcome)) sum.closedBeforeWelcome[code] = (sum.closedBeforeWelcome[code] ?? 0) + n;
      for (const [kind, n] of Object.entries(s.errorKinds)) sum.errorKinds[kind] = (sum.errorKinds[kind] ?? 0) + n;
    }
    return sum;
  }

  send(msg: { t: 'storm' } | { t: 'stop' }): void {
    for (const c of this.children) if (c.connected) c.send(msg);
  }

  async stop(): Promise<void> {
    this.send({ t: 'stop' });
    await Promise.all(this.children.map((c) => Promise.race([new Promise((r) => c.once('exit', r)), sleep(3000).then(() => stop(c, 'SIGKILL'))])));
  }

  /** Waits until `count` are connected, printing the progress every second; the seconds it took. */
  async waitConnected(count: number, log: Log, label: string, since = Date.now(), timeoutMs = 15 * 60_000): Promise<number | undefined> {
    let last = this.total().connected;
    let lastSecond = Date.now();
    while (Date.now() - since < timeoutMs) {
      await sleep(1000);
      const now = this.total();
      const rate = (now.connected - last) / ((Date.now() - lastSecond) / 1000);
      last = now.connected;
      lastSecond = Date.now();
      log(
        `  ${label}: ${now.connected}/${count} connected (${rate >= 0 ? '+' : ''}${rate.toFixed(0)}/s), ${now.inFlight} handshakes in flight; ` +
          `so far ${now.busy} busy (503), ${now.refused} refused, ${failedHandshakes(now)} failed handshakes, ${now.errors} other errors`,
      );
      if (now.connected >= count) return (Date.now() - since) / 1000;
      if (this.children.some((c) => c.exitCode !== null)) throw new Error('a load generator process died');
    }
    return undefined;
  }
}

function noStats(): LoadStats {
  return { t: 'stats', connected: 0, inFlight: 0, attempts: 0, busy: 0, refused: 0, closedBeforeWelcome: {}, errors: 0, errorKinds: {}, lost: 0 };
}

/** The counts of `after` above those of `before`. */
function grown(after: Record<string, number>, before: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(after).flatMap(([k, n]) => (n > (before[k] ?? 0) ? [[k, n - (before[k] ?? 0)]] : [])));
}

function failedHandshakes(s: LoadStats): number {
  return Object.values(s.closedBeforeWelcome).reduce((a, b) => a + b, 0);
}

function describeFailures(s: LoadStats): string {
  const codes = Object.entries(s.closedBeforeWelcome)
    .map(([code, n]) => `${n}× close ${code}${code === '4401' ? ' (key not accepted: a failed enrolment)' : ''}`)
    .join(', ');
  const kinds = Object.entries(s.errorKinds)
    .sort((a, b) => b[1] - a[1])
    .map(([kind, n]) => `${n}× ${kind}`)
    .join(', ');
  return `${s.attempts} attempts; ${s.refused} refused (no broker listening), ${s.busy} busy (503 from the handshake caps), ${failedHandshakes(s)} failed handshakes${codes ? ` (${codes})` : ''}, ${s.errors} other errors${kinds ? ` (${kinds})` : ''}`;
}

/**
 * Enrolled device keys, written through the broker's own store (approved, as an auto-accept key
 * would) and placed in the device tree, so each agent is sent its configuration on connect as a
 * fleet's agents are.
 */
async function enrolDevices(dataDir: string, count: number, log: Log): Promise<{ key: string; id: string }[]> {
  const started = Date.now();
  const keys: { key: string; id: string }[] = [];
  const store = await openStore(loadConfig({ DATA_DIR: dataDir }).databaseUrl);
  try {
    await ensureSystemNodes(store.db);
    const now = new Date().toISOString();
    const batch = 500;
    for (let from = 0; from < count; from += batch) {
      const rows: Insertable<DevicesTable>[] = [];
      const nodes: Insertable<NodesTable>[] = [];
      for (let i = from; i < Math.min(count, from + batch); i++) {
        const { privateKey, publicKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
        const id = deviceIdOf(publicKey);
        keys.push({ key: privateKey.export({ type: 'pkcs8', format: 'der' }).toString('base64'), id });
        rows.push({ ...approvedDeviceRow(id, `bench-${i}`), public_key: publicKeyPem(publicKey) });
        nodes.push({ node_id: id, parent_id: 'unassigned_group', type: 'device', title: `bench-${i}`, tags: '[]', created_at: now });
      }
      await store.db.transaction().execute(async (trx) => {
        await trx.insertInto('devices').values(rows).execute();
        await trx.insertInto('nodes').values(nodes).execute();
      });
    }
  } finally {
    await store.close();
  }
  log(`enrolled ${count} device keys (EC P-256, approved, in the device tree) through the store in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  return keys;
}

interface Broker {
  child: ChildProcess;
  url: string;
  stderr: string[];
}

async function startBroker(work: string, dataDir: string, port: number): Promise<Broker> {
  // For looking into the broker (BENCH_SCALE_NODE_FLAGS="--cpu-prof --heapsnapshot-signal=SIGUSR2"); unset, the production start as is.
  const flags = (process.env.BENCH_SCALE_NODE_FLAGS ?? '').split(' ').filter(Boolean);
  const child = nodeWithFdLimit([...flags, path.join(work, 'dist', 'broker', 'main.js')], {
    cwd: work,
    env: {
      PATH: process.env.PATH,
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
    },
  });
  const stderr: string[] = [];
  child.stderr?.on('data', (c: Buffer) => {
    if (stderr.length < 50) stderr.push(c.toString());
  });
  const url = `http://127.0.0.1:${port}`;
  await waitHttp(`${url}/api/v2/openapi.json`, child);
  return { child, url, stderr };
}

/** A bare `ws` server (no per-message deflate, as the broker), for the memory anchor. */
function startBareWs(work: string, port: number): ChildProcess {
  const script = `const { WebSocketServer } = require('ws');
new WebSocketServer({ host: '127.0.0.1', port: ${port}, perMessageDeflate: false }).on('connection', (ws) => ws.on('error', () => {}));`;
  return nodeWithFdLimit(['-e', script], { cwd: work });
}

async function settle(log: Log, ms: number): Promise<void> {
  log(`  settling ${ms / 1000} s`);
  await sleep(ms);
}

export async function benchScale(log: Log, part?: string): Promise<void> {
  const only = part && !part.startsWith('--') ? part : undefined;
  if (only && only !== 'idle' && only !== 'storm') throw new Error('scale parts: idle, storm');
  const count = option('agents', 2000);
  const workers = option('workers', Math.min(8, Math.max(2, Math.ceil(count / 2500))));
  const idleSeconds = option('idle-seconds', 35);
  const settleMs = option('settle-seconds', 10) * 1000;

  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bench-scale-'));
  const children: ChildProcess[] = [];
  let load: Load | undefined;
  try {
    log(`${count} agents, ${workers} load-generator processes, ${os.cpus().length} CPUs, load average ${loadAverage()}, node ${process.version}`);
    fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(work, 'node_modules'));
    await buildBroker(path.join(work, 'dist', 'broker'));
    const program = path.join(work, 'scale-load.mjs');
    await build({
      entryPoints: [path.join(ROOT, 'bench', 'scale-load.ts')],
      outfile: program,
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      packages: 'external',
      logLevel: 'warning',
    });
    log('broker built (node dist/broker/main.js) and the load generator bundled');

    const dataDir = path.join(work, 'data');
    fs.mkdirSync(dataDir, { mode: 0o700 });
    const keys = await enrolDevices(dataDir, count, log);
    const port = await freePort();

    // ---- the anchor: a bare ws server, the same generator (plain WebSockets), the same count ----
    let barePerConnection: number | undefined;
    if (!only || only === 'idle') {
      const barePort = await freePort();
      const bare = startBareWs(work, barePort);
      children.push(bare);
      await waitHttp(`http://127.0.0.1:${barePort}/`, bare);
      await sleep(1000);
      const before = rssBytes(bare.pid as number);
      const anchorLoad = new Load(program, work);
      anchorLoad.start(`ws://127.0.0.1:${barePort}/`, 'plain', count, workers, []);
      await anchorLoad.waitConnected(count, log, 'bare ws');
      await settle(log, settleMs);
      const after = rssBytes(bare.pid as number);
      barePerConnection = (after - before) / count;
      log(
        `anchor: a bare ws server (limit ${openFilesLimit(bare.pid as number)} open files) holds ${count} connections: RSS ${(before / KIB / KIB).toFixed(1)} → ${(after / KIB / KIB).toFixed(1)} MiB, ${(barePerConnection / KIB).toFixed(2)} KiB per connection`,
      );
      await anchorLoad.stop();
      await stop(bare);
    }

    // ---- the broker with idle agents ----
    let broker = await startBroker(work, dataDir, port);
    children.push(broker.child);
    const pid = broker.child.pid as number;
    await sleep(2000);
    const rssBefore = rssBytes(pid);
    log(
      `broker: pid ${pid}, port ${port}, one node process (${fs
        .readFileSync(`/proc/${pid}/cmdline`, 'utf8')
        .split('\0')
        .filter(Boolean)
        .map((a) => path.basename(a))
        .join(' ')}), limit ${openFilesLimit(pid)} open files, RSS ${(rssBefore / KIB / KIB).toFixed(1)} MiB with no agent`,
    );
    if (Number(openFilesLimit(pid)) < count + 100)
      log(`  note: the broker's open-files limit is below ${count} agents plus its own files: raise the hard limit (ulimit -Hn)`);

    load = new Load(program, work);
    const wsUrl = `ws://127.0.0.1:${port}${AGENT_WS_PATH}`;
    const fillTicks = cpuTicks(pid);
    const fillStarted = Date.now();
    load.start(wsUrl, 'agent', count, workers, keys);
    const filled = await load.waitConnected(count, log, 'agents');
    if (filled === undefined) log(`not all agents connected: ${load.total().connected}/${count}`);
    else {
      const fillSeconds = (cpuTicks(pid) - fillTicks) / TICKS;
      const fillCpu = (fillSeconds / ((Date.now() - fillStarted) / 1000)) * 100;
      log(
        `${count} agents connected in ${filled.toFixed(1)} s (${(count / filled).toFixed(0)}/s, at most ${Math.max(16, Math.floor(512 / workers)) * workers} handshakes at once, broker CPU ${fillCpu.toFixed(0)} % of one core, ` +
          `${((fillSeconds / count) * 1000).toFixed(2)} ms per handshake); ${describeFailures(load.total())}`,
      );
    }
    await settle(log, settleMs);
    const connected = load.total().connected;
    const rssAfter = rssBytes(pid);
    const perAgent = (rssAfter - rssBefore) / connected;
    log(
      `broker memory: RSS ${(rssBefore / KIB / KIB).toFixed(1)} → ${(rssAfter / KIB / KIB).toFixed(1)} MiB with ${connected} agents: ${(perAgent / KIB).toFixed(2)} KiB per agent` +
        (barePerConnection ? ` (×${(perAgent / barePerConnection).toFixed(2)} the bare ws server's ${(barePerConnection / KIB).toFixed(2)} KiB)` : ''),
    );
    if (!only || only === 'idle') {
      const t0 = cpuTicks(pid);
      const s0 = Date.now();
      log(`  measuring the broker's CPU over ${idleSeconds} s of idle agents (the broker pings each every heartbeat, each agent pings too)`);
      await sleep(idleSeconds * 1000);
      const cpu = ((cpuTicks(pid) - t0) / TICKS / ((Date.now() - s0) / 1000)) * 100;
      log(`broker CPU while idle: ${cpu.toFixed(1)} % of one core with ${load.total().connected} agents (load average ${loadAverage()})`);
      const rssIdle = rssBytes(pid);
      log(
        `  broker RSS after the idle period: ${(rssIdle / KIB / KIB).toFixed(1)} MiB, ${((rssIdle - rssBefore) / load.total().connected / KIB).toFixed(2)} KiB per agent (garbage of the handshakes collected meanwhile or not)`,
      );
    }
    log(
      `targets: ≥ ${TARGET_AGENTS} agents on one broker: ${connected >= TARGET_AGENTS ? 'met' : `not shown (${connected} in this run)`}; ` +
        `≤ ${TARGET_KIB} KiB each: ${perAgent <= TARGET_KIB * KIB ? 'met' : 'missed'} (${(perAgent / KIB).toFixed(2)} KiB)`,
    );

    // ---- the reconnect storm ----
    if (!only || only === 'storm') {
      const before = load.total();
      load.send({ t: 'storm' });
      log(
        `reconnect storm: the broker restarted (SIGTERM, then started again on the same port and data); agents come back on their own backoff with full jitter`,
      );
      const loadBefore = loadAverage();
      const since = Date.now();
      // The broker's CPU time during the stop, sampled until it exits (a stop starved of CPU on a loaded machine shows here).
      const ticksAtStop = cpuTicks(pid);
      let stopTicks = 0;
      const sampler = setInterval(() => {
        try {
          stopTicks = Math.max(stopTicks, cpuTicks(pid) - ticksAtStop);
        } catch {
          // exited
        }
      }, 20);
      await stop(broker.child);
      clearInterval(sampler);
      const down = (Date.now() - since) / 1000;
      const startedAt = Date.now();
      broker = await startBroker(work, dataDir, port);
      children.push(broker.child);
      const listening = (Date.now() - since) / 1000;
      // The new broker's CPU time: its start (until it answers HTTP), then the storm (until all are back).
      const newPid = broker.child.pid as number;
      const startTicks = cpuTicks(newPid);
      const startWall = (Date.now() - startedAt) / 1000;
      log(
        `  broker stopped in ${down.toFixed(1)} s (SIGTERM to exit, ${count} agents connected; at least ${(stopTicks / TICKS).toFixed(2)} s of CPU) and listening again ${listening.toFixed(1)} s after the restart began (load average ${loadBefore} → ${loadAverage()})`,
      );
      // Wait until every agent has noticed (the stop closes each connection) before counting them back.
      const acceptQueue = acceptQueueSampler(port);
      const back = await load.waitConnected(count, log, 'storm', since);
      acceptQueue.stop();
      const stormTicks = cpuTicks(newPid) - startTicks;
      const after = load.total();
      const delta: LoadStats = {
        ...after,
        attempts: after.attempts - before.attempts,
        busy: after.busy - before.busy,
        refused: after.refused - before.refused,
        errors: after.errors - before.errors,
        errorKinds: grown(after.errorKinds, before.errorKinds),
        closedBeforeWelcome: grown(after.closedBeforeWelcome, before.closedBeforeWelcome),
      };
      if (back === undefined) log(`storm: not all agents came back: ${after.connected}/${count}`);
      else
        log(
          `storm: all ${count} agents back ${back.toFixed(1)} s after the restart began (${(back - listening).toFixed(1)} s after it listened again, load average ${loadAverage()}); ${describeFailures(delta)}`,
        );
      log(
        `  broker CPU: its start ${(startTicks / TICKS).toFixed(2)} s (in ${startWall.toFixed(1)} s of wall time), then ${(stormTicks / TICKS).toFixed(2)} s until all were back ` +
          `(${((stormTicks / TICKS / count) * 1000).toFixed(2)} ms per agent, with the heartbeats of those already back); ` +
          `the broker's accept queue held at most ${acceptQueue.peak() ?? '? (no ss)'} connections not yet accepted (sampled each second)`,
      );
      log(
        `target: storm ≤ ${TARGET_STORM_S} s for ${TARGET_AGENTS}: ${back !== undefined && back <= TARGET_STORM_S ? (count >= TARGET_AGENTS ? 'met' : `met at ${count} agents`) : 'missed'}`,
      );
    }
    if (broker.stderr.length) log(`broker stderr (first lines): ${broker.stderr.join('').slice(0, 2000)}`);
  } finally {
    await load?.stop();
    for (const c of children) await stop(c);
    fs.rmSync(work, { recursive: true, force: true });
  }
}
