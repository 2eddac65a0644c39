/**
 * A real agent process for tests: `tsx agent/main.ts …` against a test broker, with short
 * reconnect backoff, its structured log collected, and killed at close.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { deviceIdOf, publicKeyPem, signChallenge } from '../../shared/device-key.js';
import { AGENT_ENROL_PATH, AGENT_WS_PATH, PROTOCOL_VERSION } from '../../shared/protocol.js';
import type { TestBroker } from './broker.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const TSX = path.join(ROOT, 'node_modules', '.bin', 'tsx');

export interface AgentLogLine {
  level: number;
  msg: string;
  deviceId?: string;
  [key: string]: unknown;
}

export interface TestAgent {
  process: ChildProcess;
  stateDir: string;
  /** The directory configuration bundles write under (the agent's `/`). */
  configRoot: string;
  /** Parsed log lines (pino JSON on stderr), in order. */
  logs: AgentLogLine[];
  /** Everything the process wrote that was not a log line. */
  output: string[];
  /** The device id, once the agent has logged its identity. */
  deviceId(timeoutMs?: number): Promise<string>;
  waitForLog(match: (line: AgentLogLine) => boolean, timeoutMs?: number, from?: number): Promise<AgentLogLine>;
  /** Resolves with the exit code (null when killed by a signal). */
  exited(timeoutMs?: number): Promise<number | null>;
  /** Polls the broker until this agent is connected. */
  waitConnected(t: TestBroker, timeoutMs?: number): Promise<string>;
  close(): Promise<void>;
}

export interface AgentOptions {
  /** Left out when `args` give a config file naming the broker. */
  broker?: string;
  /** An executable to run (a built agent: the bundle) instead of `tsx agent/main.ts`. */
  program?: string;
  bootstrapKey?: string;
  /** A directory to keep state in (not removed at close); a fresh temporary one by default. */
  stateDir?: string;
  caFile?: string;
  /** Further command-line arguments. */
  args?: string[];
  /** Node.js flags for the agent under tsx (`--cpu-prof …` when a bench profiles it). */
  nodeFlags?: string[];
  env?: Record<string, string>;
  /**
   * Where configuration bundles write (FLEET_AGENT_CONFIG_ROOT): a fresh temporary directory by
   * default, so that a test agent never applies configuration to this machine's `/`.
   */
  configRoot?: string;
}

/** Polls `check` until it returns something other than undefined/false, or fails at the deadline. */
export async function eventually<T>(check: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 20_000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of running) p.kill('SIGKILL');
});

export function startAgent(o: AgentOptions): TestAgent {
  const ownDir = !o.stateDir;
  const stateDir = o.stateDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-agent-'));
  const ownRoot = !o.configRoot;
  const configRoot = o.configRoot ?? fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-agent-root-'));
  const args = [
    ...(o.program ? [] : [...(o.nodeFlags ?? []), path.join(ROOT, 'agent', 'main.ts')]),
    ...(o.broker ? ['--broker', o.broker] : []),
    '--state-dir',
    stateDir,
    '--log-level',
    'debug',
    '--retry-min-ms',
    '50',
    '--retry-max-ms',
    '400',
    ...(o.bootstrapKey ? ['--bootstrap-key', o.bootstrapKey] : []),
    ...(o.caFile ? ['--ca-file', o.caFile] : []),
    ...(o.args ?? []),
  ];
  const child = spawn(o.program ?? TSX, args, {
    cwd: ROOT,
    env: { ...process.env, FLEET_AGENT_CONFIG_ROOT: configRoot, ...o.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  const logs: AgentLogLine[] = [];
  const output: string[] = [];
  let exitCode: number | null | undefined;
  const exit = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      running.delete(child);
      exitCode = code;
      resolve(code);
    }),
  );
  let buffered = '';
  const onData = (chunk: Buffer) => {
    buffered += chunk.toString('utf8');
    let nl: number;
    while ((nl = buffered.indexOf('\n')) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      try {
        const parsed = JSON.parse(line) as AgentLogLine;
        if (parsed && typeof parsed.msg === 'string') {
          logs.push(parsed);
          continue;
        }
      } catch {
        // not a log line
      }
      if (line.trim()) output.push(line);
    }
  };
  child.stderr.on('data', onData);
  child.stdout.on('data', onData);

  const waitForLog = (match: (line: AgentLogLine) => boolean, timeoutMs = 20_000, from = 0) =>
    eventually(
      () => {
        const found = logs.slice(from).find(match);
        if (found) return found;
        if (exitCode !== undefined) throw new Error(`the agent exited (${exitCode}) before logging what was awaited; log:\n${describe()}`);
        return undefined;
      },
      timeoutMs,
      'an agent log line',
    );
  const describe = () =>
    [
      ...logs.map(
        (l) =>
          `${l.level} ${l.msg} ${JSON.stringify({ ...l, level: undefined, msg: undefined, time: undefined, pid: undefined, hostname: undefined, name: undefined })}`,
      ),
      ...output,
    ].join('\n');

  return {
    process: child,
    stateDir,
    configRoot,
    logs,
    output,
    deviceId: async (timeoutMs = 20_000) =>
      (await waitForLog((l) => l.msg === 'device identity' && typeof l.deviceId === 'string', timeoutMs)).deviceId as string,
    waitForLog,
    exited: (timeoutMs = 20_000) =>
      Promise.race([
        exit,
        new Promise<never>((_, reject) =>
          setTimeout(() => reject(new Error(`the agent did not exit within ${timeoutMs} ms; log:\n${describe()}`)), timeoutMs).unref(),
        ),
      ]),
    async waitConnected(t: TestBroker, timeoutMs = 20_000) {
      const id = (await waitForLog((l) => l.msg === 'device identity' && typeof l.deviceId === 'string', timeoutMs)).deviceId as string;
      await eventually(
        () => {
          if (exitCode !== undefined) throw new Error(`the agent exited (${exitCode}); log:\n${describe()}`);
          return t.broker.services.agents.isConnected(id);
        },
        timeoutMs,
        'the agent to connect',
      );
      return id;
    },
    async close() {
      if (exitCode === undefined) {
        child.kill('SIGTERM');
        const killer = setTimeout(() => child.kill('SIGKILL'), 5000);
        await exit;
        clearTimeout(killer);
      }
      // A shell or command the agent started may still be writing its last files as it goes: retry.
      if (ownDir) fs.rmSync(stateDir, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
      if (ownRoot) fs.rmSync(configRoot, { recursive: true, force: true, maxRetries: 10, retryDelay: 100 });
    },
  };
}

// ---- in-process stand-ins for API tests: enrol a key pair and hold the agent handshake by hand ----

export interface FakeDevice {
  id: string;
  privateKey: crypto.KeyObject;
  publicKeyPem: string;
}

export function makeDevice(): FakeDevice {
  const { privateKey, publicKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  return { id: deviceIdOf(publicKey), privateKey, publicKeyPem: publicKeyPem(publicKey) };
}

/** POST /agent/enrol as the agent does. */
export async function enrolDevice(t: TestBroker, bootstrapKey: string, device = makeDevice(), hostname = `host-${device.id.slice(0, 6)}`) {
  const r = await t.api('POST', AGENT_ENROL_PATH, { body: { bootstrap_key: bootstrapKey, public_key: device.publicKeyPem, hostname } });
  return { device, answer: r };
}

export interface FakeConnection {
  ws: WebSocket;
  /** The close code, once the broker closed the socket. */
  closed: Promise<number>;
  welcome?: { device_id: string; heartbeat_ms: number; broker_key?: string; broker_signature?: string };
  /** The broker's challenge nonce of this connection. */
  challenge?: string;
  /** Control messages received after the welcome. */
  messages: Record<string, unknown>[];
  send(msg: Record<string, unknown>): void;
}

/**
 * Connects to the agent WebSocket and answers the challenge with `device`'s key (or `sign`).
 * Resolves after the welcome, or when the broker closes the socket first.
 */
export async function connectDevice(
  url: string,
  device: FakeDevice,
  sign?: (nonce: string) => string,
  options: {
    autoPong?: boolean;
    headers?: Record<string, string>;
    localAddress?: string;
    /** the agent's nonce, as agents send it since brokers sign */ nonce?: string;
  } = {},
): Promise<FakeConnection> {
  const ws = new WebSocket(`${url.replace(/^http/, 'ws')}${AGENT_WS_PATH}`, {
    autoPong: options.autoPong ?? true,
    headers: options.headers,
    localAddress: options.localAddress,
  });
  const conn: FakeConnection = {
    ws,
    closed: new Promise((resolve) => ws.once('close', (code) => resolve(code))),
    messages: [],
    send: (msg) => ws.send(JSON.stringify(msg)),
  };
  await new Promise<void>((resolve, reject) => {
    ws.on('message', (data, isBinary) => {
      if (isBinary) return;
      const msg = JSON.parse(String(data));
      if (msg.t === 'challenge') {
        const signature = sign ? sign(msg.nonce) : signChallenge(device.privateKey, msg.nonce);
        conn.challenge = msg.nonce;
        conn.send({
          t: 'auth',
          device_id: device.id,
          signature,
          version: '9.9.9-test',
          protocol: PROTOCOL_VERSION,
          ...(options.nonce ? { nonce: options.nonce } : {}),
        });
      } else if (msg.t === 'welcome') {
        conn.welcome = msg;
        resolve();
      } else conn.messages.push(msg);
    });
    ws.once('close', () => resolve());
    ws.once('error', reject);
  });
  return conn;
}

/** A TCP echo server on 127.0.0.1 (half-close kept: it ends its side once the client ended), for tunnel tests. */
export async function echoServer(): Promise<{ server: net.Server; port: number }> {
  const server = net.createServer({ allowHalfOpen: true }, (s) => s.pipe(s));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as net.AddressInfo).port };
}

/**
 * A real agent process enrolled through a new bootstrap key (auto-accept unless `key` says otherwise;
 * `key.group_id` places it) and connected: the agent and its device id.
 */
export async function startEnrolledAgent(t: TestBroker, key: { group_id?: string } = {}, timeoutMs = 60_000): Promise<{ agent: TestAgent; device: string }> {
  const created = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { ...key, auto_accept: true } });
  if (created.status !== 200) throw new Error(`bootstrap key not created: ${created.status} ${JSON.stringify(created.body)}`);
  const agent = startAgent({ broker: t.url, bootstrapKey: Object.keys(created.body as object)[0] });
  return { agent, device: await agent.waitConnected(t, timeoutMs) };
}
