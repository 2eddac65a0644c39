/**
 * Remote-access speed, each figure next to its baseline measured in the same run:
 *  - single-tunnel throughput as a ratio to direct loopback TCP (and `fleet connect`, and
 *    OpenSSH's `ssh -L` when sshd is installed),
 *  - aggregate throughput of 10 parallel tunnels,
 *  - console keystroke round trip p50/p99 through the broker vs a local pty,
 *  - console p99 while a tunnel saturates the same agent (fairness),
 *  - tunnel session opens per second, with authorization and audit.
 * The broker runs here, the agent and the load generators in their own processes.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { WebSocketServer } from 'ws';
import { deviceIdOf } from '../shared/device-key.js';
import { eventually, startAgent, type TestAgent } from '../test/support/agent.js';
import { startTestBroker, type TestBroker } from '../test/support/broker.js';
import { addedOver } from '../test/support/keystrokes.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const CLIENT = path.join(ROOT, 'bench', 'remote-client.ts');
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const KEYSTROKES = Number(process.env.BENCH_KEYSTROKES ?? 1000);
/** The opens part: rounds of the anchor then ours, BENCH_SECONDS split among them. */
const OPENS_ROUNDS = Math.max(1, Number(process.env.BENCH_OPENS_ROUNDS ?? 5));
/**
 * BENCH_CPU_PROF=<dir>: the agent and every load task write a V8 CPU profile under <dir>/agent and
 * <dir>/client (run the bench itself with `node --cpu-prof --import tsx bench/run.ts` for the broker's).
 */
const PROFILE_DIR = process.env.BENCH_CPU_PROF;
const profileFlags = (role: string): string[] => (PROFILE_DIR ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(PROFILE_DIR, role)}`] : []);
/**
 * `npm run bench -- remote latency` runs one part: throughput, tunnel (the `ROW tunnel` figures alone,
 * both directions, BENCH_ROUNDS times), latency (round trip and fairness) or opens.
 */
const PARTS = ['throughput', 'tunnel', 'latency', 'opens'] as const;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 1);
type Direction = 'upload' | 'download';
type Part = (typeof PARTS)[number];

type Log = (line: string) => void;
/** What the load tasks answer (each task fills its own figures). */
type Figures = Record<'mbps' | 'bytes' | 'seconds' | 'p50' | 'p99' | 'count' | 'perSecond' | 'opened' | 'failed' | 'cpuMs', number>;

/**
 * Runs one load task in a child process; resolves with its JSON answer. With `release`, the task's
 * stdin stays open until `release` settles: a task given `hold: true` keeps what it started (an ssh
 * connection carrying another task's forward) until then.
 */
export function task<T = Figures>(spec: Record<string, unknown>, release?: Promise<unknown>): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...profileFlags('client'), '--import', 'tsx', CLIENT, JSON.stringify(spec)], {
      cwd: ROOT,
      stdio: [release ? 'pipe' : 'ignore', 'pipe', 'pipe'] as ('pipe' | 'ignore')[],
    });
    if (release) {
      child.stdin?.on('error', () => {});
      void release.finally(() => child.stdin?.end());
    }
    let out = '';
    let err = '';
    child.stdout?.on('data', (d) => (out += d));
    child.stderr?.on('data', (d) => (err += d));
    child.on('close', (code, signal) => {
      if (code !== 0) return reject(new Error(`${String(spec.mode)} failed: ${err.trim() || `exit ${code ?? signal}`}`));
      // A task that answers nothing rejects (a throw here would end the bench without its cleanup).
      try {
        resolve(JSON.parse(out.trim().split('\n').at(-1) as string) as T);
      } catch {
        reject(new Error(`${String(spec.mode)} answered no figures (stdout ${JSON.stringify(out.slice(-200))}, stderr ${JSON.stringify(err.slice(-200))})`));
      }
    });
  });
}

/** A long-running child that prints `{"port"}` once listening (the sink). */
export function server(spec: Record<string, unknown>): Promise<{ port: number; child: ChildProcess }> {
  return started<{ port: number }>(CLIENT, [JSON.stringify(spec)]).then(({ answer, child }) => ({ port: answer.port, child }));
}

/** A long-running script of bench/ in a node process of its own; resolves with the JSON line it prints once ready. */
function started<T>(script: string, args: string[]): Promise<{ answer: T; child: ChildProcess }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [...profileFlags('client'), '--import', 'tsx', script, ...args], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    child.stdout?.once('data', (d) => resolve({ answer: JSON.parse(String(d)) as T, child }));
    child.once('exit', (code) => reject(new Error(`${path.basename(script)} exited ${code}`)));
  });
}

/**
 * The keystroke row's floor: bench/bare-relay.ts and bench/bare-agent.ts, a `ws` relay and an
 * agent-like process with node-pty, in processes of their own as the broker and the agent are.
 */
async function startBareChain(): Promise<{ url: string; relay: ChildProcess; agent: ChildProcess; close(): void }> {
  const relay = await started<{ port: number }>(path.join(ROOT, 'bench', 'bare-relay.ts'), []);
  const base = `ws://127.0.0.1:${relay.answer.port}`;
  const agent = await started(path.join(ROOT, 'bench', 'bare-agent.ts'), [`${base}/agent`]).catch((err: unknown) => {
    relay.child.kill();
    throw err;
  });
  return {
    url: `${base}/client`,
    relay: relay.child,
    agent: agent.child,
    close: () => {
      agent.child.kill();
      relay.child.kill();
    },
  };
}

export function waitForPort(port: number, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const attempt = () => {
      const s = net.connect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve();
      });
      s.once('error', () => {
        s.destroy();
        if (Date.now() > deadline) reject(new Error(`nothing listens on ${port}`));
        else setTimeout(attempt, 100);
      });
    };
    attempt();
  });
}

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/**
 * CPU time so far (ms) of this process (the broker) and of the agent's: the work per byte or per
 * open, steadier than rates on a shared machine, where the rates follow the load of others.
 */
function cpuTimes(agentPid: number | undefined): { broker: number; agent: number } {
  const own = process.cpuUsage();
  return { broker: (own.user + own.system) / 1000, agent: agentPid === undefined ? Number.NaN : processTreeMs(agentPid) };
}

/**
 * CPU time so far (ms) of a process and its children, read from /proc (the agent runs under tsx's
 * launcher); NaN where that cannot be read (not Linux, or the process is gone).
 */
function processTreeMs(pid: number): number {
  return processTreeSum(pid, (p) => {
    const stat = fs.readFileSync(`/proc/${p}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / 100; // utime + stime, in clock ticks of 10 ms
  });
}

/**
 * Read and write system calls so far of a process and its children (/proc's `syscr` and `syscw`:
 * read(2), readv(2), write(2), writev(2) on sockets, pipes and files alike), NaN where unreadable.
 * Counted by the kernel, they cost the process nothing, unlike strace (BENCH_SYSCALLS). With
 * `threadsOnly`, the process's live threads alone: a process's own count also takes in the
 * children it has reaped (this one's load tasks and `fleet connect`).
 */
function processTreeCalls(pid: number, threadsOnly = false): Calls {
  const field = (file: string, name: string): number => {
    const line = fs
      .readFileSync(file, 'utf8')
      .split('\n')
      .find((l) => l.startsWith(`${name}: `));
    return line === undefined ? Number.NaN : Number(line.slice(name.length + 2));
  };
  const threads = (name: string) => {
    try {
      return fs.readdirSync(`/proc/${pid}/task`).reduce((sum, tid) => sum + field(`/proc/${pid}/task/${tid}/io`, name), 0);
    } catch {
      return Number.NaN;
    }
  };
  const sum = (name: string) => (threadsOnly ? threads(name) : processTreeSum(pid, (p) => field(`/proc/${p}/io`, name)));
  return { reads: sum('syscr'), writes: sum('syscw') };
}

type Calls = { reads: number; writes: number };
const callsSince = (before: Calls, after: Calls): Calls => ({ reads: after.reads - before.reads, writes: after.writes - before.writes });
/** Reads and writes per MB moved, as "reads/writes". */
const callsPerMb = (c: Calls, bytes: number) => `${((c.reads * 1e6) / bytes).toFixed(1)}/${((c.writes * 1e6) / bytes).toFixed(1)}`;

/** `own(pid)` summed over a process and its descendants (a child that ends between the listing and the read is left out). */
function processTreeSum(pid: number, own: (pid: number) => number): number {
  const tree = (p: number): number => {
    const children = fs.readFileSync(`/proc/${p}/task/${p}/children`, 'utf8').trim();
    return own(p) + (children ? children.split(' ').reduce((sum, child) => sum + childOf(Number(child)), 0) : 0);
  };
  const childOf = (p: number): number => {
    try {
      return tree(p);
    } catch {
      return 0;
    }
  };
  try {
    return tree(pid);
  } catch {
    return Number.NaN;
  }
}

/** What `run` cost the broker and the agent, per `unit` of what it answers (`per(result)` units). */
async function costOf<T>(
  agentPid: number | undefined,
  run: () => Promise<T>,
  per: (result: T) => number,
): Promise<{ result: T; broker: number; agent: number }> {
  const before = cpuTimes(agentPid);
  const result = await run();
  const after = cpuTimes(agentPid);
  const units = per(result);
  return { result, broker: (after.broker - before.broker) / units, agent: (after.agent - before.agent) / units };
}

/**
 * BENCH_SYSCALLS=1: the system calls each of `roles` (the broker: this process; the agent; the bare
 * chain's relay and agent) makes during `run`, counted by `strace -c -f` attached to each (strace
 * slows them: the times of that run are not comparable, only the counts). A role with `tree` is
 * traced with the processes below it at the start (the agent runs under tsx's launcher). Resolves
 * with `run`'s result and, per role, the calls of each name.
 */
async function syscallsOf<T, R extends string>(
  roles: Record<R, { pid: number | undefined; tree?: boolean }>,
  run: () => Promise<T>,
  options: { ownThreadsOnly?: boolean } = {},
): Promise<{ result: T; counts?: Record<R, Record<string, number>> }> {
  const entries = Object.entries(roles) as [R, { pid: number | undefined; tree?: boolean }][];
  if (process.env.BENCH_SYSCALLS !== '1' || entries.some(([, r]) => r.pid === undefined)) return { result: await run() };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-strace-'));
  const tracers = entries.map(([role, { pid, tree }]) => {
    const out = path.join(dir, role);
    const processes = [pid as number, ...(tree ? descendants(pid as number) : [])];
    // ownThreadsOnly: each process's threads, not what it starts meanwhile (the broker's load tasks are
    // its children: -f would count their calls as the broker's).
    const pids = (options.ownThreadsOnly ? processes.flatMap(threadsOf) : processes).flatMap((p) => ['-p', String(p)]);
    const child = spawn('strace', ['-c', ...(options.ownThreadsOnly ? [] : ['-f']), '-o', out, ...pids], { stdio: ['ignore', 'ignore', 'pipe'] });
    const attached = new Promise<void>((resolve) => child.stderr.on('data', (d: Buffer) => String(d).includes('attached') && resolve()));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    return { role, out, child, attached, exited };
  });
  try {
    await Promise.all(tracers.map((t) => t.attached));
    const result = await run();
    for (const t of tracers) t.child.kill('SIGINT');
    await Promise.all(tracers.map((t) => t.exited));
    const counts: Record<string, Record<string, number>> = Object.fromEntries(entries.map(([role]) => [role, {}]));
    for (const t of tracers) {
      // strace -c: "% time seconds usecs/call calls [errors] syscall" per line.
      for (const line of fs.readFileSync(t.out, 'utf8').split('\n')) {
        const cols = line.trim().split(/\s+/);
        const name = cols.at(-1) ?? '';
        const calls = Number(cols[3]);
        if (/^[a-z_0-9]+$/.test(name) && Number.isFinite(calls)) counts[t.role][name] = calls;
      }
    }
    return { result, counts: counts as Record<R, Record<string, number>> };
  } finally {
    for (const t of tracers) t.child.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

/** The threads of `pid` (read from /proc). */
function threadsOf(pid: number): number[] {
  return fs.readdirSync(`/proc/${pid}/task`).map(Number);
}

/** The processes below `pid` (read from /proc). */
function descendants(pid: number): number[] {
  const children = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  return children.flatMap((c) => [c, ...descendants(c)]);
}

/** The calls per keystroke that wake or feed another process (writes), wait (epoll_wait) and read, and all of them. */
function callsPer(counts: Record<string, number>, keystrokes: number): string {
  const sum = (names: string[]) => names.reduce((a, n) => a + (counts[n] ?? 0), 0);
  const per = (n: number) => (n / keystrokes).toFixed(2);
  const each = Object.entries(counts)
    .filter(([name, n]) => name !== 'total' && n / keystrokes >= 0.05)
    .sort((a, b) => b[1] - a[1])
    .map(([name, n]) => `${name} ${per(n)}`)
    .join(' ');
  return `${each}; writes ${per(sum(['write', 'writev', 'sendmsg', 'sendto', 'pwrite64']))}, reads ${per(sum(['read', 'readv', 'recvfrom', 'recvmsg']))}, epoll_wait ${per(sum(['epoll_wait', 'epoll_pwait']))}, futex ${per(sum(['futex']))}, all ${per(counts.total ?? 0)}`;
}

const mb = (r: { mbps: number }) => `${r.mbps.toFixed(0)} MB/s`;
const ratio = (a: { mbps: number }, b: { mbps: number }) => (a.mbps / b.mbps).toFixed(2);
const ms = (n: number) => `${n.toFixed(3)} ms`;
/**
 * Time added by us over time added by OpenSSH. OpenSSH's can be about 0 or below it (its p99 under the
 * local pty's): a ratio would then be meaningless (it printed -45544), so both are printed as they are.
 */
function addedRatio(ours: number, anchor: number): string {
  if (anchor < 0.005) return `anchor ≈ 0 (OpenSSH added ${ms(anchor)}, we added ${ms(ours)})`;
  return (ours / anchor).toFixed(2);
}

/** A ratio over the bare chain's added time, or "floor ≈ 0" where that is about nothing (its p99 can be under the pty's). */
function floorRatio(x: number, floor: number): string {
  return floor < 0.005 ? 'floor ≈ 0' : (x / floor).toFixed(2);
}
const signedMs = (n: number) => `${n >= 0 ? '+' : '−'}${Math.abs(n).toFixed(3)} ms`;

/** `fleet connect` as a user runs it: a local listener in front of the tunnel (to a sink, or from a source for a download). */
async function viaFleetConnect(
  t: TestBroker,
  token: string,
  device: string,
  sinkPort: number,
  direction: Direction = 'upload',
): Promise<Figures & { cliMs: number; cliCalls: { reads: number; writes: number } }> {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [...profileFlags('cli'), path.join(ROOT, 'bin', 'fleet.js'), 'connect', device, '-t', `${port}:127.0.0.1:${sinkPort}`],
    {
      cwd: ROOT,
      env: { ...process.env, FLEET_URL: t.url, FLEET_TOKEN: token },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let said = '';
  child.stderr?.on('data', (d) => (said = `${said}${String(d)}`.slice(-500)));
  try {
    await waitForPort(port).catch((err: Error) => {
      throw new Error(`${err.message}${said ? `; it said: ${said.trim()}` : ''}`);
    });
    // Its CPU time over the transfer alone (the session's open included, its start-up not).
    const pid = child.pid ?? -1;
    const before = processTreeMs(pid);
    const callsBefore = processTreeCalls(pid);
    const figures = await task({ mode: 'throughput', via: 'tcp', port, seconds: SECONDS, streams: 1, direction });
    return { ...figures, cliMs: processTreeMs(pid) - before, cliCalls: callsSince(callsBefore, processTreeCalls(pid)) };
  } finally {
    child.kill('SIGINT');
  }
}

/** A private sshd on a high port (generated host and user keys in a temp dir): OpenSSH, the anchor of every row. */
export interface Sshd {
  /** `ssh` arguments reaching it as this user, before the command's own (`-N -L …`, `-tt cmd`). */
  args(extra: string[]): string[];
  /** An ssh client config file with one Host, `destination` (for scp, whose port flag differs). */
  config: string;
  destination: string;
  /** For a client library: where it listens, as whom, with which private key (a file). */
  port: number;
  user: string;
  key: string;
  /** The daemon's process id: its tree holds each connection's sshd while the connection lives. */
  pid?: number;
  close(): void;
}

export async function startSshd(log: Log): Promise<Sshd | undefined> {
  const sshd = '/usr/sbin/sshd';
  if (!fs.existsSync(sshd)) return undefined;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bench-ssh-'));
  let daemon: ChildProcess | undefined;
  const close = () => {
    daemon?.kill('SIGTERM');
    fs.rmSync(dir, { recursive: true, force: true });
  };
  try {
    const run = (cmd: string, args: string[]) =>
      new Promise<void>((resolve, reject) => {
        const p = spawn(cmd, args, { stdio: 'ignore' });
        p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} exited ${code}`))));
        p.on('error', reject);
      });
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', path.join(dir, 'host_key')]);
    await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', path.join(dir, 'user_key')]);
    fs.copyFileSync(path.join(dir, 'user_key.pub'), path.join(dir, 'authorized_keys'));
    // Sessions start in an empty home: bash, run by sshd, reads the user's ~/.bashrc even for
    // `ssh host true`, and what a developer's rc file does (a version manager's rehash under a lock
    // that waits up to 60 s, say) is not sshd's speed.
    fs.mkdirSync(path.join(dir, 'home'));
    const sshPort = await freePort();
    fs.writeFileSync(
      path.join(dir, 'sshd_config'),
      [
        `Port ${sshPort}`,
        'ListenAddress 127.0.0.1',
        `HostKey ${path.join(dir, 'host_key')}`,
        `AuthorizedKeysFile ${path.join(dir, 'authorized_keys')}`,
        `PidFile ${path.join(dir, 'sshd.pid')}`,
        'PasswordAuthentication no',
        'KbdInteractiveAuthentication no',
        'UsePAM no',
        'StrictModes no',
        'AllowTcpForwarding yes',
        'PermitRootLogin prohibit-password',
        'PermitTTY yes',
        // The library-client rows keep 8 sessions in flight on a connection: at sshd's default of 10,
        // a session still closing refused the next open (300-500 failed per 5 s), which understated sshd.
        'MaxSessions 64',
        // scp speaks SFTP by default since OpenSSH 9.
        'Subsystem sftp internal-sftp',
        `SetEnv HOME=${path.join(dir, 'home')}`,
        '',
      ].join('\n'),
    );
    // As root, sshd insists on its privilege-separation directory. It is left in place: another
    // sshd on the machine (another bench run) checks it on every connection it accepts.
    if (process.getuid?.() === 0) fs.mkdirSync('/run/sshd', { mode: 0o755, recursive: true });
    daemon = spawn(sshd, ['-D', '-e', '-f', path.join(dir, 'sshd_config')], { stdio: ['ignore', 'ignore', 'pipe'] });
    await waitForPort(sshPort);
    const args = (extra: string[]) => [
      '-p',
      String(sshPort),
      '-i',
      path.join(dir, 'user_key'),
      '-o',
      'StrictHostKeyChecking=no',
      '-o',
      'UserKnownHostsFile=/dev/null',
      '-o',
      'LogLevel=ERROR',
      ...extra,
      `${os.userInfo().username}@127.0.0.1`,
    ];
    const config = path.join(dir, 'ssh_config');
    fs.writeFileSync(
      config,
      [
        'Host bench-sshd',
        '  HostName 127.0.0.1',
        `  Port ${sshPort}`,
        `  User ${os.userInfo().username}`,
        `  IdentityFile ${path.join(dir, 'user_key')}`,
        '  IdentitiesOnly yes',
        '  StrictHostKeyChecking no',
        '  UserKnownHostsFile /dev/null',
        '  LogLevel ERROR',
        '',
      ].join('\n'),
    );
    return { args, config, destination: 'bench-sshd', port: sshPort, user: os.userInfo().username, key: path.join(dir, 'user_key'), pid: daemon.pid, close };
  } catch (err) {
    log(`sshd: skipped (${(err as Error).message})`);
    close();
    return undefined;
  }
}

/**
 * `ssh -L` in front of the sink, through the bench's sshd (or any server `args` reaches). With the
 * daemon's `pid`, also the CPU time (ms) over the transfer of the ssh client and of sshd's process
 * tree (the connection's sshd), read from /proc as for `fleet connect`: OpenSSH's work per GB.
 */
export async function viaSsh(
  sshd: Pick<Sshd, 'args' | 'pid'>,
  sinkPort: number,
  log: Log,
  direction: Direction = 'upload',
): Promise<(Figures & { sshMs: number; sshdMs: number; sshCalls: Calls; sshdCalls: Calls }) | undefined> {
  const localPort = await freePort();
  const client = spawn('ssh', sshd.args(['-N', '-L', `${localPort}:127.0.0.1:${sinkPort}`, '-o', 'ExitOnForwardFailure=yes']), { stdio: 'ignore' });
  const cpu = () => ({
    ssh: client.pid === undefined ? Number.NaN : processTreeMs(client.pid),
    sshd: sshd.pid === undefined ? Number.NaN : processTreeMs(sshd.pid),
  });
  try {
    await waitForPort(localPort);
    const calls = () => ({ ssh: processTreeCalls(client.pid ?? -1), sshd: processTreeCalls(sshd.pid ?? -1) });
    const before = cpu();
    const callsBefore = calls();
    const figures = await task({ mode: 'throughput', via: 'tcp', port: localPort, seconds: SECONDS, streams: 1, direction });
    const after = cpu();
    const callsAfter = calls();
    return {
      ...figures,
      sshMs: after.ssh - before.ssh,
      sshdMs: after.sshd - before.sshd,
      sshCalls: callsSince(callsBefore.ssh, callsAfter.ssh),
      sshdCalls: callsSince(callsBefore.sshd, callsAfter.sshd),
    };
  } catch (err) {
    log(`ssh -L: skipped (${(err as Error).message})`);
    return undefined;
  } finally {
    client.kill('SIGTERM');
  }
}

export async function benchRemote(log: Log, only?: string): Promise<void> {
  if (only !== undefined && !PARTS.includes(only as Part)) throw new Error(`unknown part "${only}": one of ${PARTS.join(', ')}`);
  const runs = (part: Part) => only === undefined || only === part;
  log('remote: starting a broker (SQLite) and an agent process');
  const t = await startTestBroker({ database: 'sqlite' });
  let agent: TestAgent | undefined;
  let sink: ChildProcess | undefined;
  let source: ChildProcess | undefined;
  let sshd: Sshd | undefined;
  try {
    const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
    // Quiet agent: its per-session log lines would otherwise be parsed in this (the broker's) process.
    agent = startAgent({ broker: t.url, bootstrapKey: Object.keys(key.body)[0], args: ['--log-level', 'warn'], nodeFlags: profileFlags('agent') });
    const keyFile = path.join(agent.stateDir, 'device-key.pem');
    await eventually(() => fs.existsSync(keyFile), 20_000, 'the agent key');
    const device = deviceIdOf(crypto.createPublicKey(fs.readFileSync(keyFile)));
    await eventually(() => t.broker.services.agents.isConnected(device), 20_000, 'the agent to connect');
    // An operator whose grants have options, so every open runs the evaluator for real.
    const user = await t.userWith([
      { permission: 'remote-access:connect', resources: ['tag:none/console', '*/console', '*/tunnel(proto=tcp;dst=127.0.0.1,localhost)'] },
      // `fleet connect` looks the device up before it listens.
      { permission: 'device:read' },
    ]);
    const sinkServer = await server({ mode: 'sink' });
    sink = sinkServer.child;
    const sourceServer = await server({ mode: 'source' });
    source = sourceServer.child;
    const base = { url: t.url, token: user.token, device };

    sshd = await startSshd(log);
    if (!sshd) log('OpenSSH anchors: /usr/sbin/sshd not installed (apt-get install openssh-server), their rows skipped');

    /** `fleet connect` then `ssh -L`, one direction: the `ROW tunnel` line (upload: to the sink; download: from the source). */
    const tunnelRow = async (direction: Direction, direct?: { mbps: number }): Promise<void> => {
      const port = direction === 'upload' ? sinkServer.port : sourceServer.port;
      const ofDirect = (r: { mbps: number }) => (direct ? ` = ${ratio(r, direct)} of direct` : '');
      const agentPid = agent?.process.pid ?? -1;
      const callsBefore = { agent: processTreeCalls(agentPid), broker: processTreeCalls(process.pid, true) };
      const { result: cli, ...perGb } = await costOf(
        agent?.process.pid,
        () => viaFleetConnect(t, user.token, device, port, direction).catch((err: Error) => (log(`  fleet connect: failed (${err.message})`), undefined)),
        (r) => (r?.bytes ?? 0) / 1e9,
      );
      const calls = {
        agent: callsSince(callsBefore.agent, processTreeCalls(agentPid)),
        broker: callsSince(callsBefore.broker, processTreeCalls(process.pid, true)),
      };
      if (cli) {
        log(
          `  fleet connect (local port), ${direction}: ${mb(cli)}${ofDirect(cli)}; CPU per GB: agent ${(perGb.agent / 1000).toFixed(2)} s, broker ${(perGb.broker / 1000).toFixed(2)} s, fleet connect ${(cli.cliMs / 1000 / (cli.bytes / 1e9)).toFixed(2)} s`,
        );
        log(
          `    reads/writes per MB: agent ${callsPerMb(calls.agent, cli.bytes)}, broker ${callsPerMb(calls.broker, cli.bytes)}, fleet connect ${callsPerMb(cli.cliCalls, cli.bytes)}`,
        );
      }
      const ssh = sshd ? await viaSsh(sshd, port, log, direction) : undefined;
      if (ssh) {
        const gb = ssh.bytes / 1e9;
        const cost = Number.isFinite(ssh.sshdMs)
          ? `; CPU per GB: ssh ${(ssh.sshMs / 1000 / gb).toFixed(2)} s, sshd ${(ssh.sshdMs / 1000 / gb).toFixed(2)} s`
          : '';
        log(`  ssh -L (OpenSSH, same machine), ${direction}: ${mb(ssh)}${ofDirect(ssh)}${cost}`);
        log(`    reads/writes per MB: ssh ${callsPerMb(ssh.sshCalls, ssh.bytes)}, sshd ${callsPerMb(ssh.sshdCalls, ssh.bytes)}`);
        if (cli && cost) {
          const ours = perGb.agent + perGb.broker + cli.cliMs / (cli.bytes / 1e9);
          log(`  CPU per GB, ours (agent + broker + fleet connect) / OpenSSH's (ssh + sshd) = ${(ours / ((ssh.sshMs + ssh.sshdMs) / gb)).toFixed(2)}`);
        }
      }
      if (cli && ssh) log(`  ROW tunnel ${direction}: fleet connect / ssh -L = ${ratio(cli, ssh)} (target >= 1.25)`);
    };

    if (runs('tunnel')) {
      for (let round = 1; round <= ROUNDS; round++) {
        log(`tunnel: fleet connect and ssh -L, ${SECONDS} s each way (round ${round} of ${ROUNDS}, load average ${os.loadavg()[0].toFixed(1)})`);
        await tunnelRow('upload');
        await tunnelRow('download');
      }
    }

    if (runs('throughput')) {
      log(`throughput: direct loopback TCP, 1 stream, ${SECONDS} s`);
      const direct = await task({ mode: 'throughput', via: 'tcp', port: sinkServer.port, seconds: SECONDS, streams: 1 });
      log(`  direct loopback TCP: ${mb(direct)}`);
      log('throughput: one tunnel through the broker');
      const { result: single, ...perGb } = await costOf(
        agent.process.pid,
        () => task({ mode: 'throughput', via: 'tunnel', ...base, port: sinkServer.port, seconds: SECONDS, streams: 1 }),
        (r) => r.bytes / 1e9,
      );
      log(`  tunnel (WebSocket client): ${mb(single)} = ${ratio(single, direct)} of direct (target >= 0.5)`);
      log(`  CPU per GB through the tunnel: broker ${(perGb.broker / 1000).toFixed(2)} s, agent ${(perGb.agent / 1000).toFixed(2)} s`);
      await tunnelRow('upload', direct);

      await tunnelRow('download');

      log('throughput: 10 parallel tunnels');
      const directTen = await task({ mode: 'throughput', via: 'tcp', port: sinkServer.port, seconds: SECONDS, streams: 10 });
      const ten = await task({ mode: 'throughput', via: 'tunnel', ...base, port: sinkServer.port, seconds: SECONDS, streams: 10 });
      log(`  10 tunnels: ${mb(ten)} aggregate (${(ten.mbps / 10).toFixed(0)} MB/s each) = ${ratio(ten, directTen)} of 10 direct streams (${mb(directTen)})`);
    }

    if (runs('latency')) {
      // The paths side by side: all open at once, keystrokes taken in turn (a local pty's, the
      // console's, the bare Node chain's, OpenSSH's, the order rotated each round), so each series'
      // percentiles are taken over the same seconds of this shared machine. One after another, each for
      // its own seconds, a slow second of the machine in one series' window moved its p99 against the others'.
      const bareChain = await startBareChain();
      let idleP99 = Number.NaN;
      try {
        log(
          `console keystroke round trip (${KEYSTROKES} keystrokes per path, raw-mode cat; local pty, through the broker, the bare Node chain${sshd ? ', ssh -tt' : ''} taken in turn)`,
        );
        type Side = Record<'pty' | 'console' | 'bare' | 'ssh', { p50: number; p99: number; count: number }>;
        // CPU so far of the four Node processes on the paths (ms): ours (broker, agent) and the bare chain's.
        const hopsCpu = () => {
          const ours = cpuTimes(agent?.process.pid);
          return {
            broker: ours.broker,
            agent: ours.agent,
            relay: processTreeMs(bareChain.relay.pid ?? -1),
            bareAgent: processTreeMs(bareChain.agent.pid ?? -1),
          };
        };
        const before = hopsCpu();
        const started = performance.now();
        const side = await task<Side>({ mode: 'rtt', via: 'side-by-side', ...base, sshArgs: sshd?.args(['-tt']), bare: bareChain.url, count: KEYSTROKES });
        const runMs = performance.now() - started;
        const after = hopsCpu();
        // As long again with nothing typed (the sessions closed): what the processes spend meanwhile on
        // their own (timers, the agent's reports, the broker's bookkeeping), to take off the run's CPU.
        await new Promise((r) => setTimeout(r, runMs));
        const idle = hopsCpu();
        const perKey = (role: keyof typeof before, count: number) => {
          const run = after[role] - before[role];
          const net = run - (idle[role] - after[role]);
          return `${((run / count) * 1000).toFixed(0)} µs (${((net / count) * 1000).toFixed(0)} net of an idle window as long)`;
        };
        const { pty: localPty, console: viaBroker, bare } = side;
        idleP99 = viaBroker.p99;
        if (process.env.BENCH_SYSCALLS === '1') {
          // Each process's own threads (strace -c without -f): the broker's load task and the shells the
          // agents start are left out, so the four hops compare with each other.
          const { result, counts } = await syscallsOf(
            { broker: { pid: process.pid }, agent: { pid: agent.process.pid, tree: true } },
            () => task({ mode: 'rtt', via: 'console', ...base, count: KEYSTROKES }),
            { ownThreadsOnly: true },
          );
          if (counts) {
            // The session's open and its 50 warm-up keystrokes are in the counts too.
            const n = result.count + 50;
            log(`  system calls per keystroke (strace -c on each process's threads, ${n} keystrokes): broker ${callsPer(counts.broker, n)}`);
            log(`  system calls per keystroke: agent ${callsPer(counts.agent, n)}`);
          }
          const bareCalls = await syscallsOf(
            { relay: { pid: bareChain.relay.pid }, agent: { pid: bareChain.agent.pid } },
            () => task({ mode: 'rtt', via: 'bare', bare: bareChain.url, count: KEYSTROKES }),
            { ownThreadsOnly: true },
          );
          if (bareCalls.counts) {
            const n = bareCalls.result.count + 50;
            log(`  system calls per keystroke, bare Node chain: relay ${callsPer(bareCalls.counts.relay, n)}`);
            log(`  system calls per keystroke, bare Node chain: agent ${callsPer(bareCalls.counts.agent, n)}`);
          }
        }
        log(`  local pty: p50 ${ms(localPty.p50)}, p99 ${ms(localPty.p99)}`);
        log(`  through the broker: p50 ${ms(viaBroker.p50)}, p99 ${ms(viaBroker.p99)}`);
        // Steadier than the times on a shared machine: the work each keystroke's round trip costs (the
        // session's open and its warm-up keystrokes included, and whatever else the process did
        // meanwhile, which the idle window's figure takes off; the other paths' keystrokes cost the
        // broker and the agent nothing). Long runs (BENCH_KEYSTROKES=20000) spread the open and the
        // compiler's first work on the path thin.
        log(`  CPU per keystroke: broker ${perKey('broker', viaBroker.count)}, agent ${perKey('agent', viaBroker.count)}`);
        const added = addedOver(side, 'pty');
        log(`  added: p50 ${ms(added.console.p50)}, p99 ${ms(added.console.p99)} (target p99 <= 1 ms)`);
        log(
          `  bare Node chain (ws relay + node-pty, no auth/mux/recording): p50 ${ms(bare.p50)}, p99 ${ms(bare.p99)}; added p50 ${ms(added.bare.p50)}, p99 ${ms(added.bare.p99)}`,
        );
        log(`  CPU per keystroke, bare Node chain: relay ${perKey('relay', bare.count)}, agent ${perKey('bareAgent', bare.count)}`);
        if (sshd) {
          const viaSshTty = side.ssh;
          const sshAdded = added.ssh;
          log(`  OpenSSH (ssh -tt … cat): p50 ${ms(viaSshTty.p50)}, p99 ${ms(viaSshTty.p99)}; added p50 ${ms(sshAdded.p50)}, p99 ${ms(sshAdded.p99)}`);
          log(
            `  ROW keystroke: added by us / added by OpenSSH = p50 ${addedRatio(added.console.p50, sshAdded.p50)}, p99 ${addedRatio(added.console.p99, sshAdded.p99)} (target <= 1, and p99 added <= 1 ms)`,
          );
        }
        // Beside the row: what Node with ws and node-pty costs by itself on this machine, in the same seconds.
        const overBare = (which: 'console' | 'ssh', p: 'p50' | 'p99') =>
          `${floorRatio(added[which][p], added.bare[p])} (${signedMs(added[which][p] - added.bare[p])})`;
        log(
          `  FLOOR keystroke: added by us / added by the bare Node chain = p50 ${overBare('console', 'p50')}, p99 ${overBare('console', 'p99')}` +
            (sshd ? `; OpenSSH's = p50 ${overBare('ssh', 'p50')}, p99 ${overBare('ssh', 'p99')}` : ''),
        );
      } finally {
        bareChain.close();
      }

      log('fairness: console round trip while a tunnel saturates the same agent');
      const flood = task({ mode: 'throughput', via: 'tunnel', ...base, port: sinkServer.port, seconds: SECONDS * 2, streams: 1 });
      await new Promise((r) => setTimeout(r, 1000));
      const loaded = await task({ mode: 'rtt', via: 'console', ...base, count: KEYSTROKES });
      const floodResult = await flood;
      log(`  console under load: p50 ${ms(loaded.p50)}, p99 ${ms(loaded.p99)} (idle p99 ${ms(idleP99)}); the tunnel meanwhile moved ${mb(floodResult)}`);
      if (sshd) {
        // OpenSSH's analogue: the tty and an `ssh -L` forward over one connection, the forward saturated.
        // The tty's task holds its ssh connection until the flood is done: its keystrokes usually end
        // first, and closing the connection then reset the forwarded stream (the flood's ECONNRESET).
        const forward = await freePort();
        let floodDone = () => {};
        const released = new Promise<void>((resolve) => (floodDone = resolve));
        const console_ = task(
          {
            mode: 'rtt',
            via: 'ssh',
            args: sshd.args(['-tt', '-L', `${forward}:127.0.0.1:${sinkServer.port}`]),
            count: KEYSTROKES,
            settleMs: 3000,
            hold: true,
          },
          released,
        );
        await waitForPort(forward).catch((err: unknown) => (floodDone(), Promise.reject(err)));
        const sshFlood = task({ mode: 'throughput', via: 'tcp', port: forward, seconds: SECONDS * 2, streams: 1 }).finally(floodDone);
        const [sshLoaded, sshFloodResult] = await Promise.all([console_, sshFlood]);
        log(
          `  OpenSSH tty under a saturated -L on the same connection: p50 ${ms(sshLoaded.p50)}, p99 ${ms(sshLoaded.p99)}; the forward moved ${mb(sshFloodResult)}`,
        );
        log(`  ROW fairness: our p99 under load / OpenSSH's = ${(loaded.p99 / sshLoaded.p99).toFixed(2)} (target: ours <= 10 ms)`);
      }
    }

    if (runs('opens')) {
      log(`session opens: tunnels opened and closed for ${SECONDS} s, 32 at a time, in ${OPENS_ROUNDS} rounds each alternating with the anchor's`);
      const bare = new WebSocketServer({ port: 0, host: '127.0.0.1', perMessageDeflate: false });
      await new Promise((r) => bare.once('listening', r));
      const bareUrl = `ws://127.0.0.1:${(bare.address() as net.AddressInfo).port}/`;
      try {
        // The anchor and ours take turns, so that both see the same load from the machine's other
        // work: run one after the other, each once, their ratio swung several-fold with it.
        const slice = SECONDS / OPENS_ROUNDS;
        const anchor = { opened: 0, seconds: 0 };
        const ours = { opened: 0, failed: 0, seconds: 0, broker: 0, agent: 0, client: 0, statements: 0 };
        const ratios: number[] = [];
        for (let round = 0; round < OPENS_ROUNDS; round++) {
          const a = await task({ mode: 'opens', bare: bareUrl, seconds: slice, concurrency: 32 });
          const statementsBefore = t.broker.services.store.statements();
          const { result: o, ...cpu } = await costOf(
            agent.process.pid,
            () => task({ mode: 'opens', ...base, port: sinkServer.port, seconds: slice, concurrency: 32 }),
            () => 1,
          );
          ours.statements += t.broker.services.store.statements() - statementsBefore;
          anchor.opened += a.opened;
          anchor.seconds += a.seconds;
          ours.opened += o.opened;
          ours.failed += o.failed;
          ours.seconds += o.seconds;
          ours.broker += cpu.broker;
          ours.agent += cpu.agent;
          ours.client += o.cpuMs;
          ratios.push(o.perSecond / a.perSecond);
        }
        const anchorRate = anchor.opened / anchor.seconds;
        const rate = ours.opened / ours.seconds;
        const opened = Math.max(1, ours.opened);
        const spread = `${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)}`;
        log(`  bare WebSocket open + close against a ws server in the broker's process: ${anchorRate.toFixed(0)}/s`);
        log(`  ${rate.toFixed(0)} opens/s with authorization and audit (target >= 1000), ${ours.opened} opened, ${ours.failed} failed`);
        log(`  ROW opens: sessions / bare WebSocket opens = ${(rate / anchorRate).toFixed(2)} (rounds ${spread})`);
        log(
          `  CPU per session opened and closed: broker ${(ours.broker / opened).toFixed(2)} ms, agent ${(ours.agent / opened).toFixed(2)} ms, load task ${(ours.client / opened).toFixed(2)} ms`,
        );
        log(`  statements per session: ${(ours.statements / opened).toFixed(2)}`);
        if (process.env.BENCH_SYSCALLS === '1') {
          // A round of its own under strace (its rate is not comparable, only the counts).
          const { result, counts } = await syscallsOf(
            { broker: { pid: process.pid }, agent: { pid: agent.process.pid, tree: true } },
            () => task({ mode: 'opens', ...base, port: sinkServer.port, seconds: slice, concurrency: 32 }),
            { ownThreadsOnly: true },
          );
          if (counts) {
            log(`  system calls per session (strace -c on its threads, ${result.opened} sessions): broker ${callsPer(counts.broker, result.opened)}`);
            log(`  system calls per session: agent ${callsPer(counts.agent, result.opened)}`);
          }
        }
      } finally {
        await new Promise((r) => bare.close(r));
      }
    }
  } finally {
    sshd?.close();
    sink?.kill();
    source?.kill();
    await agent?.close();
    await t.close();
  }
}

// `tsx bench/remote.ts` runs this group alone.
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  benchRemote((line) => console.log(`[${new Date().toISOString().slice(11, 19)}] ${line}`), process.argv[2]).then(
    () => process.exit(0),
    (err) => {
      console.error(err);
      process.exit(1);
    },
  );
}
