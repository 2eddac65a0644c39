/**
 * One load-generator process of `npm run bench -- scale` (bundled and run with node by bench/scale.ts,
 * several at once). It holds many agent connections speaking the real agent protocol: the
 * challenge signed with the device's enrolled key, `auth`, `welcome`, pongs to the broker's pings
 * and its own pings every heartbeat, and after a lost connection the agent's own backoff with full
 * jitter (agent/backoff.ts). Nothing else per connection: a plain `ws` client, no mux, no buffers.
 * In `plain` mode it only opens WebSockets (the bare `ws` server anchor).
 *
 * Parent → child: {t:'start', ...}. Child → parent every second: {t:'stats', ...}.
 */
import crypto, { type KeyObject } from 'node:crypto';
import WebSocket from 'ws';
import { Reconnect, retryAfterMs } from '../agent/backoff.js';
import { CONNECT_TIMEOUT_MS, dialer, HANDSHAKE_TIMEOUT_MS } from '../agent/dial.js';
import { signChallenge } from '../shared/device-key.js';
import { AgentClose, PROTOCOL_VERSION } from '../shared/protocol.js';

export interface LoadStart {
  t: 'start';
  url: string;
  mode: 'agent' | 'plain';
  /** pkcs8 DER (base64) and device id of each agent; in plain mode only the count matters */
  agents: { key: string; id: string }[];
  count: number;
  localAddresses: string[];
  /** handshakes this process runs at once while filling (the storm is not gated: agents come back on their own) */
  rampConcurrency: number;
}

export interface LoadStats {
  t: 'stats';
  /** welcomed (agent) or open (plain) now */
  connected: number;
  /** handshakes started and not finished */
  inFlight: number;
  attempts: number;
  /** 503 busy answers to the upgrade (the broker's handshake caps) */
  busy: number;
  /** no broker listening (ECONNREFUSED) */
  refused: number;
  /** closed by the broker before the welcome, by close code (4401 = key not accepted: a failed enrolment) */
  closedBeforeWelcome: Record<string, number>;
  /** other failures before the welcome (timeouts, resets) */
  errors: number;
  /** those by kind (error code, or the message) */
  errorKinds: Record<string, number>;
  /** welcomed connections that were lost */
  lost: number;
}

const BASE_RETRY_MS = 1000;
const MAX_RETRY_MS = 60_000;

const stats: LoadStats = {
  t: 'stats',
  connected: 0,
  inFlight: 0,
  attempts: 0,
  busy: 0,
  refused: 0,
  closedBeforeWelcome: {},
  errors: 0,
  errorKinds: {},
  lost: 0,
};

interface Agent {
  index: number;
  id: string;
  key?: KeyObject;
  backoff: Reconnect;
  ws?: WebSocket;
  welcomed: boolean;
  lastHeard: number;
}

let start: LoadStart;
let heartbeatMs = 30_000;
let ramping = true;
let stopping = false;
const agents: Agent[] = [];
const rampQueue: Agent[] = [];

function pump(): void {
  while (ramping && rampQueue.length > 0 && stats.inFlight < start.rampConcurrency) connect(rampQueue.shift() as Agent);
}

/**
 * As the agent (agent/agent.ts): nothing listening is tried again with the smaller cap; a broker that
 * refused for load and said when to come back guides the wait.
 */
function retry(agent: Agent, down: boolean, retryAfter?: number): void {
  if (stopping) return;
  setTimeout(() => connect(agent), down ? agent.backoff.afterDown() : agent.backoff.afterFailure(retryAfter));
}

function connect(agent: Agent): void {
  if (stopping) return;
  stats.attempts++;
  stats.inFlight++;
  let inFlight = true;
  const done = () => {
    if (inFlight) {
      inFlight = false;
      stats.inFlight--;
      if (ramping) pump();
    }
  };
  // As the agent (agent/dial.ts): reaching the broker is bounded apart from the handshake.
  const connectTimer = setTimeout(() => ws.terminate(), CONNECT_TIMEOUT_MS);
  const ws = new WebSocket(start.url, {
    perMessageDeflate: false,
    handshakeTimeout: HANDSHAKE_TIMEOUT_MS,
    createConnection: dialer(false, () => clearTimeout(connectTimer)),
    localAddress: start.localAddresses[agent.index % start.localAddresses.length],
  });
  agent.ws = ws;
  agent.welcomed = false;
  let failure: 'busy' | 'refused' | 'error' | undefined;
  let errorKind = 'closed without a close frame';
  let retryAfter: number | undefined;
  ws.on('unexpected-response', (_req, res) => {
    failure = res.statusCode === 503 ? 'busy' : 'error';
    retryAfter = retryAfterMs(res.headers['retry-after']);
    res.resume();
    ws.terminate();
  });
  ws.on('error', (err: NodeJS.ErrnoException) => {
    failure ??= err.code === 'ECONNREFUSED' ? 'refused' : 'error';
    errorKind = err.code ?? err.message.slice(0, 60);
  });
  ws.on('ping', () => (agent.lastHeard = Date.now()));
  ws.on('pong', () => (agent.lastHeard = Date.now()));
  if (start.mode === 'plain') {
    ws.on('open', () => {
      done();
      agent.welcomed = true;
      stats.connected++;
    });
  } else {
    ws.on('message', (data, isBinary) => {
      agent.lastHeard = Date.now();
      if (agent.welcomed) return; // what the broker sends later (configuration, inventory requests) is not needed here
      const msg = isBinary ? undefined : (JSON.parse(String(data)) as { t?: string; nonce?: string; heartbeat_ms?: number });
      if (msg?.t === 'challenge' && typeof msg.nonce === 'string') {
        ws.send(
          JSON.stringify({
            t: 'auth',
            device_id: agent.id,
            signature: signChallenge(agent.key as KeyObject, msg.nonce),
            version: 'bench',
            protocol: PROTOCOL_VERSION,
          }),
        );
      } else if (msg?.t === 'welcome') {
        if (typeof msg.heartbeat_ms === 'number') heartbeatMs = Math.max(1000, msg.heartbeat_ms);
        agent.welcomed = true;
        agent.backoff.connected();
        stats.connected++;
        done();
      } else ws.close(1002, 'protocol error');
    });
  }
  ws.on('close', (code) => {
    clearTimeout(connectTimer);
    done();
    agent.ws = undefined;
    if (agent.welcomed) {
      agent.welcomed = false;
      stats.connected--;
      stats.lost++;
    } else if (failure === 'busy') stats.busy++;
    else if (failure === 'refused') stats.refused++;
    else if (code !== 1006 && code !== 1005) stats.closedBeforeWelcome[code] = (stats.closedBeforeWelcome[code] ?? 0) + 1;
    else {
      stats.errors++;
      stats.errorKinds[errorKind] = (stats.errorKinds[errorKind] ?? 0) + 1;
    }
    if (code === AgentClose.removed) return; // as the agent: never back with this key
    retry(agent, failure === 'refused', retryAfter);
  });
}

/** The agent's own heartbeat: a ping every interval, spread over the interval; a silent broker is cut. */
function heartbeats(): void {
  let tick = 0;
  setInterval(() => {
    tick++;
    const slots = Math.max(1, Math.round(heartbeatMs / 1000));
    const now = Date.now();
    for (let i = tick % slots; i < agents.length; i += slots) {
      const a = agents[i];
      if (!a.welcomed || !a.ws) continue;
      if (now - a.lastHeard > 3 * heartbeatMs) a.ws.terminate();
      else a.ws.ping();
    }
  }, 1000);
}

process.on('message', (msg: LoadStart | { t: 'storm' } | { t: 'stop' }) => {
  if (msg.t === 'start') {
    start = msg;
    for (let i = 0; i < msg.count; i++) {
      const spec = msg.agents[i];
      agents.push({
        index: i,
        id: spec?.id ?? '',
        key: spec ? crypto.createPrivateKey({ key: Buffer.from(spec.key, 'base64'), format: 'der', type: 'pkcs8' }) : undefined,
        backoff: new Reconnect(BASE_RETRY_MS, MAX_RETRY_MS),
        welcomed: false,
        lastHeard: Date.now(),
      });
    }
    // The keys are held as KeyObjects; the message is let go.
    msg.agents.length = 0;
    rampQueue.push(...agents);
    if (msg.mode === 'agent') heartbeats();
    pump();
  } else if (msg.t === 'storm') {
    // From here on, agents come back as they would: each on its own backoff, no gate.
    ramping = false;
  } else if (msg.t === 'stop') {
    stopping = true;
    for (const a of agents) a.ws?.terminate();
    setTimeout(() => process.exit(0), 200);
  }
});

setInterval(() => process.send?.(stats), 1000);
process.on('disconnect', () => process.exit(0));
