/**
 * Hostile peers against a fresh broker process each, printing the broker's RSS growth while the
 * peer runs (peak) and after it left, the bytes of log it caused, and what happened to the peer:
 *  - an agent sending data beyond the credit window,
 *  - an agent granting near-infinite credit and not reading (and one granting the most allowed),
 *  - an agent flooding unparseable text frames,
 *  - a console user sending invalid frames and not reading,
 *  - many unauthenticated agent handshakes from one address, then an enrolled agent from another,
 *  - slow-header HTTP connections from one address, then a request from another.
 * "Another address" is 127.0.0.2 (Linux routes all of 127/8 to loopback).
 * BENCH_HOSTILE_SECONDS (default 15) sets how long each peer runs; BENCH_HOSTILE_SETTLE_MS
 * (default 5000) how long to wait after it left before the "after" figure. The broker is its production
 * build (`node dist/broker/main.js`, built once into a temporary directory, as `npm run start:prod` runs it);
 * BENCH_HOSTILE_SOURCE=1 runs it from source through tsx instead. ACCEPT_RATE_PER_ADDRESS,
 * when set, is handed to the broker (0: no accept rate, to compare). Figures are printed, never
 * asserted.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { handleChannel } from '../agent/sessions/index.js';
import { buildBroker } from '../broker/packaging/build.js';
import { DEFAULT_WINDOW, Mux } from '../shared/mux.js';
import { AGENT_ENROL_PATH, AGENT_WS_PATH, encodeData, MAX_CHANNEL_CREDIT } from '../shared/protocol.js';
import { connectDevice, makeDevice, type FakeConnection, type FakeDevice } from '../test/support/agent.js';
import { connectRemote, type RecordedSession } from '../test/support/remote-ws.js';
import { FROM_BROKER } from '../shared/wire.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SECONDS = Number(process.env.BENCH_HOSTILE_SECONDS ?? 15);
const SETTLE_MS = Number(process.env.BENCH_HOSTILE_SETTLE_MS ?? 5000);
const ADMIN = { email: 'bench@example.com', password: 'bench-password-1' };
const OTHER_ADDRESS = '127.0.0.2';
/** Flooding peers re-open each connection the broker closed after this (so up to 2000/0.5 s dials a second). */
const REDIAL_MS = Number(process.env.BENCH_HOSTILE_REDIAL_MS ?? 500);

type Log = (line: string) => void;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MiB = (kib: number) => (kib / 1024).toFixed(1);

interface BrokerProcess {
  url: string;
  child: ChildProcess;
  /** Bytes the broker wrote to stdout and stderr (its log). */
  logBytes(): number;
  /** Resident set size in KiB. */
  rssKiB(): number;
  stop(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

function rssOf(pid: number): number {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  } catch {
    return Number(
      execFileSync('ps', ['-o', 'rss=', '-p', String(pid)])
        .toString()
        .trim() || 0,
    );
  }
}

async function startBrokerProcess(main: string | undefined): Promise<BrokerProcess> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bench-hostile-'));
  const port = await freePort();
  const child = spawn(process.execPath, main ? ['--enable-source-maps', main] : ['--import', 'tsx', path.join(ROOT, 'broker', 'main.ts')], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      DATA_DIR: dataDir,
      DATABASE_URL: `sqlite:${path.join(dataDir, 'fleet.sqlite')}`,
      PORT: String(port),
      HOST: '127.0.0.1',
      ADMIN_EMAIL: ADMIN.email,
      ADMIN_PASSWORD: ADMIN.password,
      LOG_LEVEL: 'info',
      // Set to compare limits in one run (e.g. ACCEPT_RATE_PER_ADDRESS=0: no accept rate).
      ...(process.env.ACCEPT_RATE_PER_ADDRESS ? { ACCEPT_RATE_PER_ADDRESS: process.env.ACCEPT_RATE_PER_ADDRESS } : {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let logBytes = 0;
  child.stdout?.on('data', (d: Buffer) => (logBytes += d.length));
  child.stderr?.on('data', (d: Buffer) => (logBytes += d.length));
  const url = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      if ((await fetch(`${url}/api/v2/openapi.json`)).ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline || child.exitCode !== null) throw new Error('the broker did not start');
    await sleep(200);
  }
  return {
    url,
    child,
    logBytes: () => logBytes,
    rssKiB: () => rssOf(child.pid as number),
    async stop() {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
      fs.rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

async function api(url: string, method: string, p: string, token?: string, body?: unknown): Promise<Record<string, unknown>> {
  const res = await fetch(`${url}${p}`, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (res.status >= 300) throw new Error(`${method} ${p}: ${res.status} ${await res.text()}`);
  return (await res.json()) as Record<string, unknown>;
}

interface Setup {
  token: string;
  device: FakeDevice;
}

/** The admin's token and an approved device of our own (key pair here). */
async function setUp(url: string): Promise<Setup> {
  const { token } = (await api(url, 'POST', '/api/v2/login', undefined, ADMIN)) as { token: string };
  const key = Object.keys(await api(url, 'POST', '/api/v2/bootstrapkey', token, { auto_accept: true }))[0];
  const device = makeDevice();
  await api(url, 'POST', AGENT_ENROL_PATH, undefined, { bootstrap_key: key, public_key: device.publicKeyPem, hostname: 'bench-hostile' });
  return { token, device };
}

/** Connects as the device; undefined when the broker refused or the socket failed. */
async function dialAgent(url: string, device: FakeDevice, localAddress?: string): Promise<FakeConnection | undefined> {
  try {
    const conn = await connectDevice(url, device, undefined, { localAddress });
    if (!conn.welcome) return undefined;
    recordClose(conn.ws);
    conn.ws.on('error', () => {});
    return conn;
  } catch {
    return undefined;
  }
}

/** The close code of every socket the bench opens, kept as it closes (the event comes only once). */
const closeCodes = new WeakMap<WebSocket, number>();
function recordClose(ws: WebSocket): WebSocket {
  ws.once('close', (code) => closeCodes.set(ws, code));
  return ws;
}

function closedWithin(ws: WebSocket, ms: number): Promise<number | undefined> {
  if (ws.readyState === WebSocket.CLOSED) return Promise.resolve(closeCodes.get(ws));
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(undefined), ms);
    ws.once('close', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

/** Sends `frame()` while the socket's own buffer stays under `bound` (the bench must not fill its own memory). */
function pump(ws: WebSocket, frame: () => Buffer | string, bound = 4 * 1024 * 1024): void {
  const step = () => {
    if (ws.readyState !== WebSocket.OPEN) return;
    for (let i = 0; i < 64 && ws.bufferedAmount < bound; i++) {
      const f = frame();
      ws.send(f, { binary: typeof f !== 'string' });
    }
    setTimeout(step, ws.bufferedAmount < bound ? 0 : 5);
  };
  step();
}

const codes = (list: (number | undefined)[]) => {
  const counts = new Map<string, number>();
  for (const c of list) counts.set(String(c ?? 'open'), (counts.get(String(c ?? 'open')) ?? 0) + 1);
  return [...counts].map(([c, n]) => `${c}×${n}`).join(' ');
};

/**
 * The agent answers every open and then misbehaves (`onOpened`); a user keeps a tunnel session
 * open to it (not reading, or flooding input). Both come back whenever they are closed.
 */
async function channelAbuse(
  b: BrokerProcess,
  s: Setup,
  until: number,
  onOpened: (conn: FakeConnection, ch: number) => void,
  user: (session: RecordedSession) => void,
): Promise<string> {
  const closes: (number | undefined)[] = [];
  let sessions = 0;
  while (Date.now() < until) {
    const conn = await dialAgent(b.url, s.device);
    if (!conn) {
      await sleep(200);
      continue;
    }
    conn.ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      const msg = JSON.parse(String(data)) as { t?: string; ch?: number };
      if (msg.t !== 'open' || typeof msg.ch !== 'number') return;
      conn.send({ t: 'opened', ch: msg.ch });
      onOpened(conn, msg.ch);
    });
    const session = connectRemote(b.url, 'tunnel', { device_id: s.device.id, proto: 'tcp', port: 22, dst: '127.0.0.1' }, s.token);
    sessions += 1;
    recordClose(session.ws);
    session.ws.on('error', () => {});
    try {
      await session.ready;
      user(session);
    } catch {
      // refused (the agent was cut meanwhile)
    }
    // Wait for the broker to cut the agent (or the session), or for the end of the run.
    const left = Math.max(0, until - Date.now());
    await Promise.race([closedWithin(conn.ws, left), session.closed, sleep(left)]);
    // A paused agent socket does not see the close: read again to learn the code.
    conn.ws.resume();
    closes.push(await closedWithin(conn.ws, 2000));
    conn.ws.terminate();
    session.ws.terminate();
  }
  return `${sessions} sessions; agent closes: ${codes(closes)}`;
}

async function ignoreCredit(b: BrokerProcess, s: Setup, until: number): Promise<string> {
  const chunk = Buffer.alloc(64 * 1024, 0x61);
  return channelAbuse(
    b,
    s,
    until,
    (conn, ch) => pump(conn.ws, () => encodeData(ch, chunk)),
    (session) => session.ws.pause(),
  );
}

function grantAndStopReading(n: number) {
  return async (b: BrokerProcess, s: Setup, until: number): Promise<string> => {
    const chunk = Buffer.alloc(64 * 1024, 0x62);
    return channelAbuse(
      b,
      s,
      until,
      (conn, ch) => {
        conn.send({ t: 'credit', ch, n });
        conn.ws.pause();
      },
      (session) => pump(session.ws, () => chunk),
    );
  };
}

async function garbageText(b: BrokerProcess, s: Setup, until: number): Promise<string> {
  const closes: (number | undefined)[] = [];
  while (Date.now() < until) {
    const conn = await dialAgent(b.url, s.device);
    if (!conn) {
      await sleep(200);
      continue;
    }
    pump(conn.ws, () => 'this is not a control message', 1024 * 1024);
    closes.push(await closedWithin(conn.ws, Math.max(0, until - Date.now())));
    conn.ws.terminate();
  }
  return `${closes.length} connections; closes: ${codes(closes)}`;
}

async function invalidFramesUser(b: BrokerProcess, s: Setup, until: number): Promise<string> {
  // An honest agent serving consoles for the user to abuse.
  const agent = await dialAgent(b.url, s.device);
  if (!agent) return 'the agent could not connect';
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bench-agent-'));
  new Mux(agent.ws, { receives: FROM_BROKER, onOpen: (channel) => handleChannel(channel, { stateDir, log: () => {} }) });
  const closes: (number | undefined)[] = [];
  let refused = 0;
  try {
    while (Date.now() < until) {
      const session = connectRemote(b.url, 'console', { device_id: s.device.id, cols: 80, rows: 24 }, s.token);
      recordClose(session.ws);
      session.ws.on('error', () => {});
      try {
        await session.ready;
      } catch {
        // Refused (the accept rate per address, once sessions come faster than it): dial again later, as the other flooding peers do.
        refused += 1;
        await sleep(REDIAL_MS);
        continue;
      }
      session.ws.pause();
      pump(session.ws, () => 'not json', 1024 * 1024);
      closes.push(await closedWithin(session.ws, Math.max(0, until - Date.now())));
      session.ws.terminate();
    }
  } finally {
    agent.ws.terminate();
    fs.rmSync(stateDir, { recursive: true, force: true });
  }
  return `${closes.length} sessions; closes: ${codes(closes)}; ${refused} refused before ready`;
}

async function handshakeFlood(b: BrokerProcess, s: Setup, until: number): Promise<string> {
  const TARGET = 2000;
  const held = new Set<WebSocket>();
  let accepted = 0;
  let refused = 0;
  let stopping = false;
  const open = () => {
    const ws = new WebSocket(`${b.url.replace(/^http/, 'ws')}${AGENT_WS_PATH}`);
    held.add(ws);
    ws.once('message', () => (accepted += 1));
    ws.once('unexpected-response', (_req, res) => {
      refused += 1;
      res.resume();
      ws.terminate();
    });
    ws.on('error', () => {});
    ws.once('close', () => {
      held.delete(ws);
      if (!stopping) setTimeout(open, REDIAL_MS);
    });
  };
  for (let i = 0; i < TARGET; i++) open();
  await sleep(Math.max(0, (until - Date.now()) / 2));
  const agent = await dialAgent(b.url, s.device, OTHER_ADDRESS);
  const gotIn = agent !== undefined;
  agent?.ws.terminate();
  await sleep(Math.max(0, until - Date.now()));
  stopping = true;
  const holding = held.size;
  for (const ws of held) ws.terminate();
  return `${TARGET} held at a time from one address (challenges answered ${accepted}, 503 ${refused}, ${holding} sockets open at the end); enrolled agent from ${OTHER_ADDRESS}: ${gotIn ? 'got in' : 'LOCKED OUT'}`;
}

async function slowHeaders(b: BrokerProcess, _s: Setup, until: number): Promise<string> {
  const TARGET = 2000;
  const port = Number(new URL(b.url).port);
  const open = new Set<net.Socket>();
  let closedByBroker = 0;
  let stopping = false;
  const dial = () => {
    const socket = net.connect(port, '127.0.0.1');
    open.add(socket);
    socket.on('error', () => {});
    socket.once('connect', () => socket.write('GET /api/v2/openapi.json HTTP/1.1\r\nHost: x\r\n'));
    const drip = setInterval(() => socket.writable && socket.write('X'), 1000);
    socket.once('close', () => {
      clearInterval(drip);
      open.delete(socket);
      if (stopping) return;
      closedByBroker += 1;
      setTimeout(dial, REDIAL_MS);
    });
  };
  for (let i = 0; i < TARGET; i++) dial();
  await sleep(Math.max(0, (until - Date.now()) / 2));
  const answer = await new Promise<string>((resolve) => {
    const req = http.get(`${b.url}/api/v2/openapi.json`, { localAddress: OTHER_ADDRESS, timeout: 10_000 }, (res) => {
      res.resume();
      resolve(`HTTP ${res.statusCode}`);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (err) => resolve(`failed (${err.message})`));
  });
  await sleep(Math.max(0, until - Date.now()));
  stopping = true;
  const stillOpen = open.size;
  for (const socket of open) socket.destroy();
  return `${TARGET} dripping connections from one address (closed by the broker ${closedByBroker}, ${stillOpen} open at the end); a request from ${OTHER_ADDRESS}: ${answer}`;
}

type Peer = (b: BrokerProcess, s: Setup, until: number) => Promise<string>;

const PEERS: [string, Peer][] = [
  ['agent ignoring the credit window', ignoreCredit],
  ['agent granting 2^40 credit and not reading', grantAndStopReading(2 ** 40)],
  ['agent granting the most allowed credit and not reading', grantAndStopReading(MAX_CHANNEL_CREDIT - DEFAULT_WINDOW)],
  ['agent flooding unparseable text frames', garbageText],
  ['console user sending invalid frames, not reading', invalidFramesUser],
  ['unauthenticated agent handshakes from one address', handshakeFlood],
  ['slow-header HTTP connections from one address', slowHeaders],
];

export async function benchHostile(log: Log): Promise<void> {
  const only = process.env.BENCH_HOSTILE_ONLY;
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bench-hostile-build-'));
  try {
    // The build imports its packages from the node_modules above it, as in a checkout.
    fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(work, 'node_modules'));
    const main = process.env.BENCH_HOSTILE_SOURCE ? undefined : (await buildBroker(path.join(work, 'dist', 'broker'))).main;
    log(`each peer runs ${SECONDS} s against a fresh broker process (${main ? 'production build' : 'from source'}); RSS growth over the broker's baseline`);
    await runPeers(log, only, main);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

async function runPeers(log: Log, only: string | undefined, main: string | undefined): Promise<void> {
  for (const [name, peer] of PEERS) {
    if (only && !name.includes(only)) continue;
    const b = await startBrokerProcess(main);
    try {
      const s = await setUp(b.url);
      await sleep(1000);
      const baseline = b.rssKiB();
      const logBefore = b.logBytes();
      let peak = baseline;
      const sampler = setInterval(() => (peak = Math.max(peak, b.rssKiB())), 100);
      const outcome = await peer(b, s, Date.now() + SECONDS * 1000);
      const logged = b.logBytes() - logBefore;
      await sleep(SETTLE_MS);
      clearInterval(sampler);
      const after = b.rssKiB();
      log(
        `${name}: RSS ${MiB(baseline)} MiB, peak +${MiB(peak - baseline)} MiB, ${SETTLE_MS / 1000} s after +${MiB(after - baseline)} MiB; ` +
          `log ${(logged / 1024).toFixed(1)} KiB (${(logged / 1024 / SECONDS).toFixed(1)} KiB/s); ${outcome}`,
      );
    } finally {
      await b.stop();
    }
  }
}
