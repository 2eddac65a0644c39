/**
 * The SSH gateway against OpenSSH's sshd on the same machine, in the same run (the anchor of every row):
 *  - scp of a file from the device's side and to it (the agent runs here, so the device path is a temp
 *    file), each path twice, alternated with sshd's, the rows from the second pass,
 *  - `ssh -L` throughput to a local sink,
 *  - session opens per second: `ssh … true` over one master connection and on fresh connections,
 *  - the keystroke round trip (`ssh -tt … cat`) p50/p99, and what the gateway adds to sshd's,
 *  - `longlived` (not in the default run): BENCH_LONGLIVED_TRANSFERS uploads of SCP_MIB in one broker
 *    process, each with the broker's CPU per MB, its garbage collections by kind, and (under
 *    `node --expose-gc`) its heap used after a full collection, so a per-session retention or a
 *    process growing dearer with age shows as a trend between the first and the last rows.
 * The broker runs here, the agent and the load generators in their own processes; without sshd the
 * gateway's figures are printed alone. The gateway's rows measure the path `fleet ssh-config` sets up
 * (one connection, through `fleet ssh-proxy`: the CLI is built first with `npm run build:cli` for a
 * quick start, else each connection waits for tsx); a second line gives `ssh -J` (two SSH layers).
 * `npm run bench -- ssh opens` runs one part. (Over 450 lines: one bench group whose parts share one
 * set-up of broker, agent, sshd and client files.)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { PerformanceObserver, constants as perfConstants } from 'node:perf_hooks';
import v8 from 'node:v8';
import { fileURLToPath } from 'node:url';
import ssh2, { type Client as SshClient, type ParsedKey } from 'ssh2';
import { cpuLine, cpuPer, cpuPerMb, reapedMs } from './cpu.js';
import { ensureKeyPair, saveCertificate, sshConfigBlock, sshFiles, type IssuedCertificate } from '../cli/ssh.js';
import { deviceIdOf } from '../shared/device-key.js';
import { eventually, startAgent, type TestAgent } from '../test/support/agent.js';
import { percentile } from '../test/support/keystrokes.js';
import { startTestBroker } from '../test/support/broker.js';
import { server, startSshd, task, viaSsh, type Sshd } from './remote.js';
import { withFleetOnPath } from '../test/support/fleet-path.js';
import { gatewayAlias, sshPreamble } from '../shared/ssh-config.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const KEYSTROKES = Number(process.env.BENCH_KEYSTROKES ?? 1000);
const SCP_MIB = Number(process.env.BENCH_SCP_MIB ?? 64);
const OPENS_CONCURRENCY = 8;
/** Library client: connections, and sessions in flight on each (below the gateway's 10 channels a connection). */
const CLIENT_CONNECTIONS = Number(process.env.BENCH_SSH_CONNECTIONS ?? 2);
const CLIENT_SESSIONS_EACH = Number(process.env.BENCH_SSH_SESSIONS_EACH ?? 8);
/** Opens through the gateway run this long unmeasured before the measured ones (BENCH_OPENS_WARMUP_SECONDS). */
const OPENS_WARMUP_SECONDS = Number(process.env.BENCH_OPENS_WARMUP_SECONDS ?? 2);
const PARTS = ['scp', 'forward', 'opens', 'client', 'latency', 'longlived'] as const;
/** Parts run only when named (`npm run bench -- ssh longlived`). */
const NAMED_ONLY: readonly string[] = ['longlived'];
/** Transfers of the `longlived` part, all in one broker process. */
const LONGLIVED_TRANSFERS = Number(process.env.BENCH_LONGLIVED_TRANSFERS ?? 10);
/** BENCH_CPU_PROF=<dir>: the agent writes a V8 CPU profile under <dir>/agent (run the bench with `node --cpu-prof` for the broker's). */
const PROFILE_DIR = process.env.BENCH_CPU_PROF;
/** BENCH_SCP_DIRECTIONS: the scp rows to run (`down`, `up`, comma-separated; both when unset), so a profile holds one path. */
const SCP_DIRECTIONS = (process.env.BENCH_SCP_DIRECTIONS ?? 'down,up').split(',').map((d) => d.trim());
type Part = (typeof PARTS)[number];
type Log = (line: string) => void;

/** A server the OpenSSH client reaches: `args` for ssh, `scpArgs` for scp (no `-p`, a config file instead). */
interface Target {
  args(extra: string[]): string[];
  scpArgs: string[];
  destination: string;
  /** sshd's listener, for its CPU (the anchor only). */
  pid?: number;
}

/** BENCH_SSH_CIPHERS: the client's cipher preference (`Ciphers`) towards both servers; OpenSSH's default (chacha20-poly1305 first) when unset. */
const CIPHERS = process.env.BENCH_SSH_CIPHERS;
const cipherArgs = CIPHERS ? ['-o', `Ciphers=${CIPHERS}`] : [];

const fromSshd = (sshd: Sshd): Target => ({
  args: (extra) => sshd.args([...cipherArgs, ...extra]),
  scpArgs: ['-F', sshd.config, ...cipherArgs],
  destination: sshd.destination,
  pid: sshd.pid,
});

/** `ratio` of a figure to its anchor, 2 decimals; `-` without an anchor. */
export function ratioTo(value: number, anchor: number | undefined): string {
  return anchor && Number.isFinite(anchor) && anchor > 0 ? (value / anchor).toFixed(2) : '-';
}

function run(cmd: string, args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr = `${stderr}${String(d)}`.slice(-500)));
    child.on('error', (err) => resolve({ code: -1, stderr: err.message }));
    child.on('close', (code) => resolve({ code, stderr }));
  });
}

/**
 * One scp (`from` to `to`, one of them `host:path`) of `bytes`: MB/s over the whole run, connection
 * set-up included. The copy `made` is checked and removed after the CPU figures are taken (removing
 * a large file is the kernel's work on this process's account, not the broker's).
 */
async function scp(target: Target, from: string, to: string, made: string, bytes: number): Promise<{ mbps: number; made: string }> {
  const started = process.hrtime.bigint();
  const r = await run('scp', [...target.scpArgs, '-q', '-o', 'BatchMode=yes', from, to]);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (r.code !== 0) throw new Error(`scp exited ${r.code}: ${r.stderr.trim()}`);
  return { mbps: bytes / 1e6 / seconds, made };
}

/** Waits (up to 2 s) until `read` gives the same figure twice 50 ms apart: sshd's listener reaps a session a moment after scp ends. */
async function settle(read: () => number): Promise<void> {
  let last = read();
  for (let i = 0; i < 40; i++) {
    await new Promise((r) => setTimeout(r, 50));
    const now = read();
    if (now === last) return;
    last = now;
  }
}

/** Checks and removes what an scp made. */
function checkCopy(made: string, bytes: number): void {
  const size = fs.existsSync(made) ? fs.statSync(made).size : 0;
  fs.rmSync(made, { force: true });
  if (size !== bytes) throw new Error(`scp made ${size} of ${bytes} bytes`);
}

/** `ssh … true` run `concurrency` at a time for SECONDS: sessions per second (over a master connection when `extra` names its ControlPath). */
async function opens(target: Target, extra: string[]): Promise<{ perSecond: number; opened: number; failed: number; lastError: string }> {
  const deadline = Date.now() + SECONDS * 1000;
  let opened = 0;
  let failed = 0;
  let lastError = '';
  const started = Date.now();
  const worker = async () => {
    while (Date.now() < deadline) {
      const r = await run('ssh', target.args(['-o', 'BatchMode=yes', ...extra]).concat('true'));
      if (r.code === 0) opened++;
      else {
        failed++;
        lastError = r.stderr.trim();
      }
    }
  };
  await Promise.all(Array.from({ length: OPENS_CONCURRENCY }, worker));
  return { perSecond: opened / ((Date.now() - started) / 1000), opened, failed, lastError };
}

/** A master connection (`ControlMaster`) that later `ssh` runs share; closed with `ssh -O exit`. */
async function withMaster<T>(target: Target, dir: string, body: (extra: string[]) => Promise<T>): Promise<T> {
  const socket = path.join(dir, `cm-${crypto.randomBytes(4).toString('hex')}`);
  const master: ChildProcess = spawn('ssh', target.args(['-o', 'BatchMode=yes', '-o', 'ControlMaster=yes', '-o', `ControlPath=${socket}`, '-N']), {
    stdio: 'ignore',
  });
  try {
    const until = Date.now() + 20_000;
    while (!fs.existsSync(socket)) {
      if (Date.now() > until || master.exitCode !== null) throw new Error('the master connection did not come up');
      await new Promise((r) => setTimeout(r, 50));
    }
    return await body(['-o', 'ControlMaster=no', '-o', `ControlPath=${socket}`]);
  } finally {
    master.kill('SIGTERM');
  }
}

/** A client library's sign-in: a key, and for the gateway the certificate that goes with it. */
function signInKey(keyFile: string, certFile?: string): ParsedKey {
  const key = ssh2.utils.parseKey(fs.readFileSync(keyFile));
  if (key instanceof Error) throw key;
  if (!certFile) return key;
  // ssh2's client knows no certificates: the same key, offered as its certificate (the signature is the key's).
  const [type, blob] = fs.readFileSync(certFile, 'utf8').trim().split(/\s+/);
  const cert = Buffer.from(blob, 'base64');
  return Object.assign(Object.create(key) as ParsedKey, { type, getPublicSSH: () => cert });
}

/** An ssh2 client connection, signed in (over `sock`, a channel of another connection, for the gateway's inner hop). */
function connectClient(options: { host?: string; port?: number; sock?: NodeJS.ReadWriteStream; user: string; key: ParsedKey }): Promise<SshClient> {
  return new Promise((resolve, reject) => {
    const client = new ssh2.Client();
    client.once('ready', () => resolve(client));
    client.once('error', reject);
    client.connect({
      ...(options.sock ? { sock: options.sock as never } : { host: options.host, port: options.port }),
      username: options.user,
      authHandler: [{ type: 'publickey', username: options.user, key: options.key }],
      hostVerifier: () => true,
      readyTimeout: 30_000,
    });
  });
}

/** `exec true` to its end (exit status 0) on one connection. */
function execTrue(client: SshClient): Promise<void> {
  return new Promise((resolve, reject) => {
    client.exec('true', (err, channel) => {
      if (err) return reject(err);
      let code: number | null = null;
      channel.on('exit', (c: number | null) => (code = c));
      channel.on('close', () => (code === 0 ? resolve() : reject(new Error(`exit status ${code}`))));
      channel.resume();
      channel.stderr.resume();
      channel.end();
    });
  });
}

/** A forwarding (direct-tcpip, as `ssh -L` opens one) to `port` on the far side, to its end: the greeter's byte, then its close. */
function forwardOnce(client: SshClient, port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    client.forwardOut('127.0.0.1', 0, '127.0.0.1', port, (err, channel) => {
      if (err) return reject(err);
      let got = 0;
      channel.on('data', (d: Buffer) => (got += d.length));
      channel.on('close', () => (got > 0 ? resolve() : reject(new Error('closed before the greeting'))));
      channel.end();
    });
  });
}

/** A server (its own process) that greets each connection with one byte and ends it. */
function greeter(): Promise<{ port: number; child: ChildProcess }> {
  const code = `const s=require('net').createServer(c=>{c.on('error',()=>{});c.end('x')});s.listen(0,'127.0.0.1',()=>console.log(s.address().port))`;
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['-e', code], { stdio: ['ignore', 'pipe', 'inherit'] });
    child.stdout?.once('data', (d) => resolve({ port: Number(String(d).trim()), child }));
    child.once('exit', (c) => reject(new Error(`greeter exited ${c}`)));
  });
}

/** `open` run for `seconds` (SECONDS) over `clients`, CLIENT_SESSIONS_EACH in flight on each. */
async function clientOpens(
  clients: SshClient[],
  open: (client: SshClient) => Promise<void>,
  seconds = SECONDS,
): Promise<{ perSecond: number; opened: number; failed: number; lastError: string; p50: number; p99: number }> {
  const deadline = Date.now() + seconds * 1000;
  let opened = 0;
  let failed = 0;
  let lastError = '';
  const took: number[] = [];
  const started = Date.now();
  const worker = async (client: SshClient) => {
    while (Date.now() < deadline) {
      try {
        const t0 = performance.now();
        await open(client);
        took.push(performance.now() - t0);
        opened++;
      } catch (err) {
        failed++;
        lastError = (err as Error).message;
      }
    }
  };
  await Promise.all(clients.flatMap((client) => Array.from({ length: CLIENT_SESSIONS_EACH }, () => worker(client))));
  took.sort((a, b) => a - b);
  return { perSecond: opened / ((Date.now() - started) / 1000), opened, failed, lastError, p50: percentile(took, 50), p99: percentile(took, 99) };
}

/**
 * Opens from ssh2's `Client`, signed in once per connection (to the gateway with the certificate,
 * through -J's inner connection; to sshd with its key), so no `ssh` process or handshake is in the
 * loop: sessions (`exec true`, a process on the far side each) and forwardings (direct-tcpip to a
 * greeter, no process). The CPU figures are this process's (the library client, and for the gateway
 * the broker too) and the agent's, per open. Each kind runs unmeasured on each path first
 * (OPENS_WARMUP_SECONDS), so no row pays for a process's warm-up.
 */
async function benchClientOpens(
  log: Log,
  o: { sshd?: Sshd; greeterPort: number; gatewayPort: number; device: string; files: { key: string; cert: string } },
): Promise<void> {
  type Opens = Awaited<ReturnType<typeof cpuPer<Awaited<ReturnType<typeof clientOpens>>>>>;
  const show = (name: string, r: Opens) =>
    log(
      `  ${name}: ${r.perSecond.toFixed(1)}/s (${r.opened} opened, ${r.failed} failed${r.failed ? `: ${r.lastError.slice(0, 120)}` : ''}; each open to its close p50 ${r.p50.toFixed(1)} ms, p99 ${r.p99.toFixed(1)} ms; CPU per open: this process ${r.selfMs.toFixed(2)} ms, agent ${r.agentMs.toFixed(2)} ms, its command helper ${r.helperMs.toFixed(2)} ms, its commands ${r.commandsMs.toFixed(2)} ms)`,
    );
  const kinds: [string, (c: SshClient) => Promise<void>][] = [
    ['`exec true`', execTrue],
    ['forwardings (direct-tcpip to a greeter)', (c) => forwardOnce(c, o.greeterPort)],
  ];
  const measure = (clients: SshClient[], open: (c: SshClient) => Promise<void>) =>
    cpuPer(
      () => clientOpens(clients, open),
      (r) => r.opened,
    );
  const direct = new Map<string, Opens>();
  if (o.sshd) {
    const key = signInKey(o.sshd.key);
    const { port, user } = o.sshd;
    const clients = await Promise.all(Array.from({ length: CLIENT_CONNECTIONS }, () => connectClient({ host: '127.0.0.1', port, user, key })));
    try {
      for (const [name, open] of kinds) {
        await clientOpens(clients, open, OPENS_WARMUP_SECONDS);
        direct.set(name, await measure(clients, open));
      }
    } finally {
      for (const c of clients) c.end();
    }
  }
  const key = signInKey(o.files.key, o.files.cert);
  // What fleet ssh-proxy does: the preamble, then one SSH connection bound to the device.
  const direct1 = async () => {
    const sock = net.connect(o.gatewayPort, '127.0.0.1');
    sock.write(sshPreamble(`${o.device}.127.0.0.1`) as string);
    return { outer: undefined, inner: await connectClient({ sock, user: 'root', key }) };
  };
  const hop = async () => {
    const outer = await connectClient({ host: '127.0.0.1', port: o.gatewayPort, user: 'fleet', key });
    const sock = await new Promise<NodeJS.ReadWriteStream>((resolve, reject) =>
      outer.forwardOut('127.0.0.1', 0, `${o.device}.127.0.0.1`, 22, (err, channel) => (err ? reject(err) : resolve(channel))),
    );
    return { outer, inner: await connectClient({ sock, user: 'root', key }) };
  };
  const ones: { outer?: SshClient; inner: SshClient }[] = await Promise.all(Array.from({ length: CLIENT_CONNECTIONS }, direct1));
  const hops: { outer?: SshClient; inner: SshClient }[] = await Promise.all(Array.from({ length: CLIENT_CONNECTIONS }, hop));
  try {
    // Unmeasured first: each kind of open on each path, so no row pays for the broker's and agent's warm-up (JIT, first sessions).
    for (const [, open] of kinds) {
      for (const clients of [ones.map((h) => h.inner), hops.map((h) => h.inner)]) await clientOpens(clients, open, OPENS_WARMUP_SECONDS);
    }
    for (const [name, open] of kinds) {
      log(`opens, library client (ssh2): ${name} over ${CLIENT_CONNECTIONS} signed-in connection(s), ${CLIENT_SESSIONS_EACH} in flight on each, ${SECONDS} s`);
      const anchor = direct.get(name);
      if (anchor) show('sshd', anchor);
      const through = await measure(
        ones.map((h) => h.inner),
        open,
      );
      show('gateway (one connection, preamble as fleet ssh-proxy sends it)', through);
      const jumped = await measure(
        hops.map((h) => h.inner),
        open,
      );
      show("gateway (through -J's inner connection)", jumped);
      log(
        `  ROW opens (library client, ${name}): gateway / sshd = ${ratioTo(through.perSecond, anchor?.perSecond)}; gateway ${through.perSecond.toFixed(1)}/s (target >= 300/s; load average ${os.loadavg()[0].toFixed(2)})`,
      );
    }
  } finally {
    for (const h of [...ones, ...hops]) {
      h.inner.end();
      h.outer?.end();
    }
  }
}

/** What a `gc` performance entry's `detail.kind` means. */
const GC_KINDS: Record<number, string> = {
  [perfConstants.NODE_PERFORMANCE_GC_MINOR]: 'scavenge',
  [perfConstants.NODE_PERFORMANCE_GC_MAJOR]: 'full',
  [perfConstants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental marking',
  [perfConstants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak callbacks',
};

/**
 * This process's garbage collections by kind and their summed pause, counted from the last `reset()`.
 * The observer's entries arrive after each collection: read `summary()` and `pauseMs` one turn of the
 * loop after the work measured. `stop()` ends the counting.
 */
function collectionCounter() {
  let counts = new Map<string, number>();
  let pauseMs = 0;
  const observer = new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) {
      const kind = GC_KINDS[(entry as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind ?? -1] ?? 'other';
      counts.set(kind, (counts.get(kind) ?? 0) + 1);
      pauseMs += entry.duration;
    }
  });
  observer.observe({ entryTypes: ['gc'] });
  return {
    reset(): void {
      counts = new Map();
      pauseMs = 0;
    },
    /** e.g. "51 scavenge, 2 full", or "none". */
    summary: (): string => [...counts].map(([kind, n]) => `${n} ${kind}`).join(', ') || 'none',
    get pauseMs(): number {
      return pauseMs;
    },
    stop: (): void => observer.disconnect(),
  };
}

/**
 * LONGLIVED_TRANSFERS uploads (`ssh … 'cat > /dev/null'` fed SCP_MIB from a file) through the gateway,
 * one after another in this broker process: per transfer the broker's CPU per MB (this process: the
 * agent and ssh run in their own), its garbage collections by kind (scavenges, and the incremental
 * marking of full collections) with their summed pause, and, when `global.gc` is exposed, its heap
 * used after a full collection between transfers.
 */
async function benchLongLived(log: Log, target: Target, dir: string): Promise<void> {
  const bytes = SCP_MIB * 1024 * 1024;
  const file = path.join(dir, 'longlived.bin');
  const fd = fs.openSync(file, 'w');
  for (let i = 0; i < SCP_MIB; i++) fs.writeSync(fd, crypto.randomBytes(1024 * 1024));
  fs.closeSync(fd);
  const collections = collectionCounter();
  const gc = (globalThis as { gc?: () => void }).gc;
  const heapMiB = () => (v8.getHeapStatistics().used_heap_size / 1048576).toFixed(1);
  log(
    `long-lived broker: ${LONGLIVED_TRANSFERS} uploads of ${SCP_MIB} MiB in one broker process${gc ? '' : ' (run node with --expose-gc for the heap after a full collection)'}`,
  );
  try {
    if (gc) {
      gc();
      log(`  heap used after a full collection, before the first: ${heapMiB()} MiB`);
    }
    for (let i = 1; i <= LONGLIVED_TRANSFERS; i++) {
      collections.reset();
      const before = process.cpuUsage();
      const r = await run('sh', ['-c', `exec ssh "$@" 'cat > /dev/null' < "${file}"`, 'ssh', ...target.args(['-o', 'BatchMode=yes'])]);
      const cpu = process.cpuUsage(before);
      if (r.code !== 0) throw new Error(`ssh exited ${r.code}: ${r.stderr.trim()}`);
      // The observer's entries arrive after the collection: one turn of the loop before reading them.
      await new Promise((resolve) => setImmediate(resolve));
      const msPerMb = (cpu.user + cpu.system) / 1000 / (bytes / 1e6);
      if (gc) gc();
      log(
        `  transfer ${i}: broker ${msPerMb.toFixed(2)} ms CPU per MB; collections: ${collections.summary()} (${collections.pauseMs.toFixed(0)} ms)${gc ? `; heap after a full collection ${heapMiB()} MiB` : ''} (load average ${os.loadavg()[0].toFixed(2)})`,
      );
    }
  } finally {
    collections.stop();
    fs.rmSync(file, { force: true });
  }
}

export async function benchSsh(log: Log, only?: string): Promise<void> {
  if (only !== undefined && !PARTS.includes(only as Part)) throw new Error(`unknown part "${only}": one of ${PARTS.join(', ')}`);
  const runs = (part: Part) => (only === undefined && !NAMED_ONLY.includes(part)) || only === part;
  log(`ssh: starting a broker (SQLite) with its SSH gateway and an agent process (load average ${os.loadavg()[0].toFixed(2)})`);
  const t = await startTestBroker({ database: 'sqlite', env: { SSH_PORT: '0' } });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bench-sshgw-'));
  let agent: TestAgent | undefined;
  let sink: ChildProcess | undefined;
  let sshd: Sshd | undefined;
  try {
    const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
    // The device's login shells start in an empty home, as the anchor sshd's do (bench/remote.ts): a
    // login shell reads ~/.profile (and through it, on Debian, ~/.bashrc), whose cost is the machine's.
    const deviceHome = path.join(dir, 'device-home');
    fs.mkdirSync(deviceHome);
    agent = startAgent({
      broker: t.url,
      bootstrapKey: Object.keys(key.body)[0],
      args: ['--log-level', 'warn'],
      env: { HOME: deviceHome },
      nodeFlags: PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(PROFILE_DIR, 'agent')}`] : [],
    });
    // Quiet agent (its per-session log lines would be parsed in this, the broker's, process): wait on its key instead.
    const keyFile = path.join(agent.stateDir, 'device-key.pem');
    await eventually(() => fs.existsSync(keyFile), 30_000, 'the agent key');
    const device = deviceIdOf(crypto.createPublicKey(fs.readFileSync(keyFile)));
    await eventually(() => t.broker.services.agents.isConnected(device), 30_000, 'the agent to connect');

    // The client as `fleet login` + `fleet ssh-config` leave it: key, certificate, known_hosts, config block.
    const env = { ...process.env, HOME: dir, XDG_CONFIG_HOME: path.join(dir, '.config') };
    // The block's ProxyCommand runs `fleet`: this checkout's, for every ssh and scp run below.
    process.env.PATH = (await withFleetOnPath(process.env)).PATH;
    const cert = await t.api<IssuedCertificate>('POST', '/api/v2/ssh/certificate', { token: t.adminToken, body: { public_key: ensureKeyPair('bench', env) } });
    if (cert.status !== 200) throw new Error(`no certificate: ${cert.status} ${JSON.stringify(cert.body)}`);
    saveCertificate('bench', t.url, cert.body, env);
    const config = path.join(dir, 'ssh_config');
    // A `Ciphers` line before the block holds for every connection (ssh -J's jump reads the same file).
    fs.writeFileSync(config, `${CIPHERS ? `Ciphers ${CIPHERS}\n` : ''}${sshConfigBlock('bench', t.url, cert.body.ssh_port, env)}`);
    const gatewayDestination = `root@${device}.127.0.0.1`;
    const gateway: Target = {
      args: (extra) => ['-F', config, ...extra, gatewayDestination],
      scpArgs: ['-F', config],
      destination: gatewayDestination,
    };
    // The same through `ssh -J` (the gateway's own connection, and an inner one to the device).
    const jump = ['-J', gatewayAlias(t.url)];
    const jumped: Target = {
      args: (extra) => ['-F', config, ...jump, ...extra, gatewayDestination],
      scpArgs: ['-F', config, ...jump],
      destination: gatewayDestination,
    };

    sshd = await startSshd(log);
    if (!sshd) log('OpenSSH anchors: /usr/sbin/sshd not installed (apt-get install openssh-server), the gateway figures printed alone');
    const anchor = sshd && fromSshd(sshd);

    if (runs('scp')) {
      const bytes = SCP_MIB * 1024 * 1024;
      const file = path.join(dir, 'payload.bin');
      const fd = fs.openSync(file, 'w');
      for (let i = 0; i < SCP_MIB; i++) fs.writeSync(fd, crypto.randomBytes(1024 * 1024));
      fs.closeSync(fd);
      const down = (target: Target) => {
        const made = path.join(dir, `copy-${crypto.randomUUID()}`);
        return scp(target, `${target.destination}:${file}`, made, made, bytes);
      };
      const up = (target: Target) => scp(target, file, `${target.destination}:${path.join(dir, 'uploaded.bin')}`, path.join(dir, 'uploaded.bin'), bytes);
      // Alternated, twice each, as `ssh -L` is (sshd too): the first pass in a broker process pays
      // for its warm-up (JIT, first sessions); the rows use the second.
      const directions: { title: string; row: string; direction: string; copy: typeof down; paths: [string, Target | undefined][] }[] = [
        {
          title: `${SCP_MIB} MiB from the device's side to a local file`,
          row: 'scp',
          direction: 'down',
          copy: down,
          paths: [
            ['sshd', anchor],
            ['gateway', gateway],
            ['gateway, ssh -J', jumped],
          ],
        },
        {
          title: `${SCP_MIB} MiB from a local file to the device's side`,
          row: 'scp up',
          direction: 'up',
          copy: up,
          paths: [
            ['sshd', anchor],
            ['gateway', gateway],
          ],
        },
      ];
      for (const d of directions.filter((x) => SCP_DIRECTIONS.includes(x.direction))) {
        log(`scp: ${d.title}`);
        const last = new Map<string, number>();
        for (const round of [1, 2]) {
          for (const [name, target] of d.paths) {
            if (!target) continue;
            // The whole path's CPU: the client's (scp and its ssh, reaped by this process) and, for
            // sshd, its sessions' (reaped by its listener), beside the broker's and the agent's.
            const clientBefore = reapedMs(process.pid);
            const sshdBefore = sshd?.pid === undefined ? Number.NaN : reapedMs(sshd.pid);
            const mb = bytes / 1e6;
            if (name === 'sshd') {
              const r = await d.copy(target);
              await settle(() => reapedMs(sshd!.pid!));
              const clientMs = (reapedMs(process.pid) - clientBefore) / mb;
              const sshdMs = (reapedMs(sshd!.pid!) - sshdBefore) / mb;
              checkCopy(r.made, bytes);
              last.set(name, r.mbps);
              log(
                `  sshd (pass ${round}): ${r.mbps.toFixed(0)} MB/s (CPU per MB: client ${clientMs.toFixed(2)} ms, sshd ${sshdMs.toFixed(2)} ms, path ${(clientMs + sshdMs).toFixed(2)} ms)`,
              );
              continue;
            }
            const r = (await cpuPerMb(
              () => d.copy(target),
              () => bytes,
            ))!;
            const clientMs = (reapedMs(process.pid) - clientBefore) / mb;
            checkCopy(r.made, bytes);
            last.set(name, r.mbps);
            log(
              `  ${name} (pass ${round}): ${r.mbps.toFixed(0)} MB/s (${cpuLine(r)}, client ${clientMs.toFixed(2)} ms, path ${(clientMs + r.brokerMsPerMb + r.agentMsPerMb).toFixed(2)} ms; load average ${os.loadavg()[0].toFixed(2)})`,
            );
          }
        }
        const ratio = (name: string) => ratioTo(last.get(name) ?? 0, last.get('sshd'));
        log(
          `  ROW ${d.row}: gateway / sshd = ${ratio('gateway')} (target >= 0.8)${d.paths.some(([n]) => n === 'gateway, ssh -J') ? `; ssh -J / sshd = ${ratio('gateway, ssh -J')}` : ''}`,
        );
      }
      fs.rmSync(file, { force: true });
    }

    if (runs('forward')) {
      const sinkServer = await server({ mode: 'sink' });
      sink = sinkServer.child;
      log(`ssh -L: one stream into a local sink, ${SECONDS} s`);
      // Per pass, the broker's page faults, system time and garbage collections: a fresh buffer's
      // first touch and a run of full collections are CPU per MB that the totals cannot tell apart.
      const collections = collectionCounter();
      const pass = async (target: Target) => {
        collections.reset();
        const usage = process.resourceUsage();
        const r = await cpuPerMb(
          () => viaSsh({ args: (extra) => target.args(['-o', 'BatchMode=yes', ...extra]) }, sinkServer.port, log),
          (r) => r.mbps * 1e6 * SECONDS,
        );
        await new Promise((resolve) => setImmediate(resolve));
        if (!r) return r;
        const after = process.resourceUsage();
        const mb = r.mbps * SECONDS;
        const detail = `broker per MB: ${((after.minorPageFault - usage.minorPageFault) / mb).toFixed(1)} page faults, system ${((after.systemCPUTime - usage.systemCPUTime) / 1000 / mb).toFixed(2)} ms; collections: ${collections.summary()}`;
        return { ...r, detail };
      };
      // Alternated, twice each, sshd too: the first pass in a broker process pays for its warm-up (the rows use the second).
      let direct: { mbps: number; sshMs: number; sshdMs: number } | undefined;
      let through: Awaited<ReturnType<typeof pass>>;
      let viaJ: Awaited<ReturnType<typeof pass>>;
      for (const round of [1, 2]) {
        direct = anchor ? await viaSsh(anchor, sinkServer.port, log) : undefined;
        // The whole path's CPU per MB: ssh's (the client) and sshd's, or ssh's, the broker's and the agent's (the sink's is the same on both).
        const perMb = (r: { mbps: number }, ms: number) => (ms / (r.mbps * SECONDS)).toFixed(2);
        if (direct)
          log(
            `  sshd (pass ${round}): ${direct.mbps.toFixed(0)} MB/s (CPU per MB: ssh ${perMb(direct, direct.sshMs)} ms, sshd ${perMb(direct, direct.sshdMs)} ms, path ${perMb(direct, direct.sshMs + direct.sshdMs)} ms)`,
          );
        const gatewayLine = (r: NonNullable<typeof through>) =>
          `${r.mbps.toFixed(0)} MB/s (${cpuLine(r)}, ssh ${perMb(r, r.sshMs)} ms, path ${(Number(perMb(r, r.sshMs)) + r.brokerMsPerMb + r.agentMsPerMb).toFixed(2)} ms; load average ${os.loadavg()[0].toFixed(2)})`;
        through = await pass(gateway);
        if (through) log(`  gateway (pass ${round}): ${gatewayLine(through)}; ${through.detail}`);
        viaJ = await pass(jumped);
        if (viaJ) log(`  gateway, ssh -J (pass ${round}): ${gatewayLine(viaJ)}; ${viaJ.detail}`);
      }
      collections.stop();
      log(
        `  ROW ssh -L: gateway / sshd = ${ratioTo(through?.mbps ?? 0, direct?.mbps)} (target >= 0.8); ssh -J / sshd = ${ratioTo(viaJ?.mbps ?? 0, direct?.mbps)}`,
      );
    }

    if (runs('opens')) {
      log(`session opens: \`ssh … true\`, ${OPENS_CONCURRENCY} at a time for ${SECONDS} s`);
      const show = (name: string, r: Awaited<ReturnType<typeof opens>>) =>
        log(`  ${name}: ${r.perSecond.toFixed(1)}/s (${r.opened} opened, ${r.failed} failed${r.failed ? `: ${r.lastError.slice(0, 120)}` : ''})`);
      const viaMaster = (target: Target) => withMaster(target, dir, (extra) => opens(target, extra));
      const directMux = anchor ? await viaMaster(anchor) : undefined;
      if (directMux) show('sshd, sessions over one master connection', directMux);
      const mux = await viaMaster(gateway);
      show('gateway, sessions over one master connection', mux);
      log(
        `  ROW opens (one connection): gateway / sshd = ${ratioTo(mux.perSecond, directMux?.perSecond)}; gateway ${mux.perSecond.toFixed(0)}/s (target >= 300/s)`,
      );
      const directFresh = anchor ? await opens(anchor, []) : undefined;
      if (directFresh) show('sshd, a connection per session', directFresh);
      const fresh = await opens(gateway, []);
      show('gateway, a connection per session (fleet ssh-proxy: a process and one handshake each)', fresh);
      const freshJ = await opens(jumped, []);
      show('gateway, a connection per session (ssh -J: two handshakes each)', freshJ);
      log(
        `  ROW opens (new connections): gateway / sshd = ${ratioTo(fresh.perSecond, directFresh?.perSecond)}; ssh -J / sshd = ${ratioTo(freshJ.perSecond, directFresh?.perSecond)}`,
      );
    }

    if (runs('client')) {
      const greet = await greeter();
      try {
        await benchClientOpens(log, { sshd, greeterPort: greet.port, gatewayPort: cert.body.ssh_port, device, files: sshFiles('bench', env) });
      } finally {
        greet.child.kill();
      }
    }

    if (runs('longlived')) await benchLongLived(log, gateway, dir);

    if (runs('latency')) {
      log(`keystroke round trip (${KEYSTROKES} keystrokes, ssh -tt … raw-mode cat)`);
      const direct = anchor ? await task({ mode: 'rtt', via: 'ssh', args: anchor.args(['-tt']), count: KEYSTROKES }) : undefined;
      const through = await task({ mode: 'rtt', via: 'ssh', args: gateway.args(['-o', 'BatchMode=yes', '-tt']), count: KEYSTROKES, settleMs: 3000 });
      const ms = (n: number) => `${n.toFixed(3)} ms`;
      if (direct) log(`  sshd: p50 ${ms(direct.p50)}, p99 ${ms(direct.p99)}`);
      log(`  gateway: p50 ${ms(through.p50)}, p99 ${ms(through.p99)}`);
      if (direct) {
        log(`  ROW keystroke: added by the gateway p50 ${ms(through.p50 - direct.p50)}, p99 ${ms(through.p99 - direct.p99)}`);
        log(`  ROW keystroke: gateway / sshd = p50 ${ratioTo(through.p50, direct.p50)}, p99 ${ratioTo(through.p99, direct.p99)}`);
      }
    }
    log(
      `ssh: done (load average ${os
        .loadavg()
        .map((n) => n.toFixed(2))
        .join(' ')})`,
    );
  } finally {
    sshd?.close();
    sink?.kill();
    await agent?.close();
    await t.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

// `tsx bench/ssh.ts` runs this group alone.
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  benchSsh((line) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`), process.argv[2]).then(
    () => process.exit(0),
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
