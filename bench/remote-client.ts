/**
 * The load side of bench/remote.ts, in its own process so that it does not share the broker's
 * event loop: `node --import tsx bench/remote-client.ts '<json task>'` prints one JSON line.
 *
 *   sink        a TCP server that counts what it receives and answers the count (8 bytes) at the end
 *   source      a TCP server that sends to each connection until the connection's end, then ends
 *   throughput  streams for some seconds through: direct TCP, a broker tunnel, or a local forwarder;
 *               upload (to a sink) or, over TCP, download (from a source)
 *   rtt         keystroke round trips: a local pty, a console through the broker, OpenSSH (`ssh -tt`) or
 *               the bare Node chain (bench/bare-relay.ts, bench/bare-agent.ts), or all of them side by
 *               side, their keystrokes taken in turn
 *   opens       tunnel sessions opened and closed per second (authorization and audit included), or
 *               bare WebSocket connections opened and closed (the anchor: a `ws` server doing nothing)
 */
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import { spawn as spawnPty } from 'node-pty';
import WebSocket from 'ws';
import { RemoteSession } from '../cli/remote.js';
import { ConsoleAcks } from '../shared/console-acks.js';
import { interleavedRoundTrips, percentilesOf, type KeystrokePath } from '../test/support/keystrokes.js';

type Task =
  | { mode: 'sink' }
  | { mode: 'source' }
  | { mode: 'throughput'; via: 'tcp'; port: number; seconds: number; streams: number; direction?: 'upload' | 'download' }
  | { mode: 'throughput'; via: 'tunnel'; url: string; token: string; device: string; port: number; seconds: number; streams: number }
  | { mode: 'rtt'; via: 'pty'; count: number }
  | { mode: 'rtt'; via: 'console'; url: string; token: string; device: string; count: number }
  /**
   * The local pty, the console, (with `bare`, bench/bare-relay.ts's client URL) the bare Node chain and (with `sshArgs`, ending with `-tt user@host`) OpenSSH, all open at
   * once, keystrokes taken in turn: each series' p50/p99 under the same conditions.
   */
  | { mode: 'rtt'; via: 'side-by-side'; url: string; token: string; device: string; sshArgs?: string[]; bare?: string; count: number }
  /** The bare Node chain alone: `bare` is bench/bare-relay.ts's client URL. */
  | { mode: 'rtt'; via: 'bare'; bare: string; count: number }
  /**
   * `ssh <args>`: the args end with `-tt user@host`; `settleMs` waits before measuring (a flood starting
   * meanwhile); `hold` keeps the connection (and the forwards it carries) until stdin ends.
   */
  | { mode: 'rtt'; via: 'ssh'; args: string[]; count: number; settleMs?: number; hold?: boolean }
  | { mode: 'opens'; url: string; token: string; device: string; port: number; seconds: number; concurrency: number }
  | { mode: 'opens'; bare: string; seconds: number; concurrency: number };

const BLOCK = crypto.randomBytes(256 * 1024);

/** The CLI's own session code, so the figures are what `fleet` users get (masking included). */
function openSession(task: { url: string; token: string }, kind: 'console' | 'tunnel', query: Record<string, string | number>): Promise<RemoteSession> {
  return RemoteSession.open({ url: task.url, token: async () => task.token }, kind, query, 'api');
}

function sink(): void {
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    let count = 0;
    socket.on('data', (d) => (count += d.length));
    socket.on('end', () => {
      const answer = Buffer.alloc(8);
      answer.writeBigUInt64BE(BigInt(count));
      socket.end(answer);
    });
    socket.on('error', () => {});
  });
  server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: (server.address() as net.AddressInfo).port })));
}

/** Sends BLOCK to each connection until it half-closes, then ends it: the far end of a download. */
function source(): void {
  const server = net.createServer({ allowHalfOpen: true }, (socket) => {
    let ended = false;
    const pump = () => {
      while (!ended) if (!socket.write(BLOCK)) return void socket.once('drain', pump);
    };
    socket.on('end', () => {
      ended = true;
      socket.end();
    });
    socket.on('error', () => socket.destroy());
    socket.resume();
    pump();
  });
  server.listen(0, '127.0.0.1', () => console.log(JSON.stringify({ port: (server.address() as net.AddressInfo).port })));
}

/** One TCP stream from a source: read for `seconds`, half-close, count what arrived until the source ends. */
function tcpDownload(port: number, seconds: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    let count = 0;
    socket.on('error', reject);
    socket.on('data', (d: Buffer) => (count += d.length));
    socket.on('end', () => {
      socket.end();
      resolve(count);
    });
    socket.on('connect', () => setTimeout(() => socket.end(), seconds * 1000));
  });
}

/** One TCP stream: write for `seconds`, half-close, read the sink's count. */
function tcpStream(port: number, seconds: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const reply: Buffer[] = [];
    const stop = Date.now() + seconds * 1000;
    socket.on('error', reject);
    socket.on('data', (d) => reply.push(d));
    socket.on('end', () => {
      const answer = Buffer.concat(reply);
      resolve(answer.length >= 8 ? Number(answer.readBigUInt64BE(0)) : 0);
    });
    socket.on('connect', () => {
      const pump = () => {
        while (Date.now() < stop) if (!socket.write(BLOCK)) return void socket.once('drain', pump);
        socket.end();
      };
      pump();
    });
  });
}

async function tunnelStream(task: Extract<Task, { via: 'tunnel' }>): Promise<number> {
  const session = await openSession(task, 'tunnel', { device_id: task.device, port: task.port, dst: '127.0.0.1' });
  return new Promise((resolve) => {
    const reply: Buffer[] = [];
    session.on('data', (data: Buffer) => reply.push(data));
    session.on('close', () => {
      const answer = Buffer.concat(reply);
      resolve(answer.length >= 8 ? Number(answer.readBigUInt64BE(0)) : 0);
    });
    session.start();
    const stop = Date.now() + task.seconds * 1000;
    const pump = () => {
      while (Date.now() < stop) if (!session.send(BLOCK)) return void session.once('drain', pump);
      session.control({ type: 'eof' });
    };
    pump();
  });
}

async function throughput(task: Extract<Task, { mode: 'throughput' }>): Promise<Record<string, number>> {
  const started = process.hrtime.bigint();
  const one = () =>
    task.via === 'tunnel' ? tunnelStream(task) : task.direction === 'download' ? tcpDownload(task.port, task.seconds) : tcpStream(task.port, task.seconds);
  const counts = await Promise.all(Array.from({ length: task.streams }, one));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const bytes = counts.reduce((a, b) => a + b, 0);
  return { bytes, seconds, mbps: bytes / seconds / 1e6 };
}

const RAW_CAT = 'stty raw -echo; exec cat';

async function quiet(ms: number): Promise<void> {
  await new Promise((r) => setTimeout(r, ms));
}

/** A path open and ready for keystrokes: `cat` in raw mode (no tty echo) at its far end. */
type OpenPath = KeystrokePath & { close(): void };

/** OpenSSH's own client and server: a tty on the far side, raw mode, cat. */
function sshPath(args: string[]): OpenPath {
  const ssh = spawn('ssh', [...args, RAW_CAT], { stdio: ['pipe', 'pipe', 'ignore'] });
  let listener: ((d: Buffer) => void) | undefined;
  ssh.stdout.on('data', (d: Buffer) => listener?.(d));
  return { send: (b) => void ssh.stdin.write(b), onData: (cb) => (listener = cb), close: () => ssh.kill('SIGTERM') };
}

/** A local pty running cat: the anchor, with no broker, agent or network in its path. */
function ptyPath(): OpenPath {
  const pty = spawnPty('/bin/bash', ['-c', RAW_CAT], { name: 'xterm-256color', cols: 80, rows: 24, encoding: null });
  let listener: ((d: Buffer) => void) | undefined;
  pty.onData((d) => listener?.(d as unknown as Buffer));
  // Written to the pty's master side at once, as the agent does (agent/sessions/pty-input.ts), not
  // through node-pty's thread-pool write: the anchor is the fastest local round trip.
  const fd = (pty as unknown as { fd: number }).fd;
  return { send: (b) => void fs.writeSync(fd, b), onData: (cb) => (listener = cb), close: () => pty.kill() };
}

/**
 * The floor of the console's path: a `ws` client → bench/bare-relay.ts → bench/bare-agent.ts → a pty
 * running cat, each hop relaying one message per read with nothing else on its path (no
 * authentication, multiplexer, recording or acknowledgements). The first message opens the pty, as a
 * console's open starts its shell.
 */
async function barePath(url: string): Promise<OpenPath> {
  const ws = new WebSocket(url, { perMessageDeflate: false });
  await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
  let listener: ((d: Buffer) => void) | undefined;
  ws.on('message', (d: Buffer) => listener?.(d));
  ws.send(Buffer.from('open'));
  return { send: (b) => ws.send(b), onData: (cb) => (listener = cb), close: () => ws.close() };
}

/** A console through the broker, as `fleet console` opens it, running cat. */
async function consolePath(task: { url: string; token: string; device: string }): Promise<OpenPath> {
  const session = await openSession(task, 'console', { device_id: task.device, cols: 80, rows: 24 });
  let listener: ((d: Buffer) => void) | undefined;
  // Acknowledged once shown, as `fleet console` does (cli/commands/console.ts showOutput): one ack
  // frame per CONSOLE_ACK_EVERY bytes, none for a lone echo. BENCH_ACK_EACH=1 acknowledges each echo
  // in the turn after it, as both clients did before, to measure the difference in one sitting.
  const acks = process.env.BENCH_ACK_EACH === '1' ? undefined : new ConsoleAcks((bytes) => session.control({ type: 'ack', bytes }));
  session.on('data', (data: Buffer) => {
    listener?.(data);
    if (acks) setImmediate(() => acks.shown(data.length));
    else setImmediate(() => session.control({ type: 'ack', bytes: data.length }));
  });
  session.start();
  session.send(Buffer.from(`${RAW_CAT}\n`));
  return { send: (b) => void session.send(b), onData: (cb) => (listener = cb), close: () => session.close() };
}

async function rtt(task: Extract<Task, { mode: 'rtt' }>): Promise<Record<string, unknown>> {
  if (task.via === 'side-by-side') {
    // All paths open at once, their keystrokes taken in turn (test/support/keystrokes.ts).
    const paths: Record<string, OpenPath> = { pty: ptyPath(), console: await consolePath(task) };
    if (task.bare) paths.bare = await barePath(task.bare);
    if (task.sshArgs) paths.ssh = sshPath(task.sshArgs);
    await quiet(1500);
    try {
      return percentilesOf(await interleavedRoundTrips(paths, task.count));
    } finally {
      for (const p of Object.values(paths)) p.close();
    }
  }
  const path =
    task.via === 'ssh' ? sshPath(task.args) : task.via === 'pty' ? ptyPath() : task.via === 'bare' ? await barePath(task.bare) : await consolePath(task);
  await quiet(task.via === 'ssh' ? (task.settleMs ?? 1500) : task.via === 'pty' ? 300 : 1000);
  const { one } = percentilesOf(await interleavedRoundTrips({ one: path }, task.count));
  if (task.via === 'ssh' && task.hold) await new Promise((resolve) => process.stdin.on('end', resolve).on('error', resolve).resume());
  path.close();
  return { ...one };
}

/** One bare WebSocket connection opened and closed (the handshake and close a session costs at least). */
function bareOpen(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { perMessageDeflate: false });
    ws.once('open', () => ws.close());
    ws.once('error', reject);
    ws.once('close', () => resolve());
  });
}

async function opens(task: Extract<Task, { mode: 'opens' }>): Promise<Record<string, number>> {
  const stop = Date.now() + task.seconds * 1000;
  let opened = 0;
  let failed = 0;
  const started = process.hrtime.bigint();
  const cpu = process.cpuUsage();
  await Promise.all(
    Array.from({ length: task.concurrency }, async () => {
      while (Date.now() < stop) {
        try {
          if ('bare' in task) {
            await bareOpen(task.bare);
            opened += 1;
            continue;
          }
          const session = await openSession(task, 'tunnel', { device_id: task.device, port: task.port, dst: '127.0.0.1' });
          opened += 1;
          await new Promise<void>((resolve) => {
            session.once('close', () => resolve());
            session.start().close();
          });
        } catch {
          failed += 1;
        }
      }
    }),
  );
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  const used = process.cpuUsage(cpu);
  // The load task's own CPU over the opens (its start-up left out): the client's share of a session.
  return { opened, failed, seconds, perSecond: opened / seconds, cpuMs: (used.user + used.system) / 1000 };
}

async function main(): Promise<void> {
  const task = JSON.parse(process.argv[2] ?? '{}') as Task;
  if (task.mode === 'sink') return sink();
  if (task.mode === 'source') return source();
  const result = task.mode === 'throughput' ? await throughput(task) : task.mode === 'rtt' ? await rtt(task) : await opens(task);
  console.log(JSON.stringify(result));
  process.exit(0);
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : String(err));
  process.exit(1);
});
