/**
 * The configuration engine inside a real agent connection: a stand-in broker (WebSocket, handshake,
 * then a Mux) sends `config`; the agent asks for the template, gets it over a `file` channel,
 * renders it with a device attribute and answers `config_applied`. And what the agent refuses: a
 * broker that cannot prove the pinned key, and configurations not signed for this device and
 * connection (unsigned, tampered, another device's, replayed).
 */
import crypto, { type KeyObject } from 'node:crypto';
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { WebSocketServer, type WebSocket } from 'ws';
import { signBrokerMessage, signWelcome, brokerKeyPem } from '../shared/broker-signature.js';
import { Mux } from '../shared/mux.js';
import type { ControlMessage } from '../shared/protocol.js';
import { BrokerEndpoint } from './broker-client.js';
import { ConfigEngine } from './config/engine.js';
import { loadAgentBundle } from './config/registry.js';
import { runConnection, type ConnectionEnd, type ConnectionOptions } from './connection.js';
import { StateDir } from './identity.js';
import { FROM_AGENT, type AgentMessage } from '../shared/wire.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

/** Polls `check` until it gives a value, or fails after 20 s saying what was awaited. */
async function until<T>(check: () => T | undefined | false, what: string): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const value = check();
    if (value !== undefined && value !== false) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const brokerKey = crypto.generateKeyPairSync('ed25519');
const otherKey = crypto.generateKeyPairSync('ed25519');
const template = Buffer.from('device={{ serial }}\n');

function configMessage(target: string, commitId: string): Extract<ControlMessage, { t: 'config' }> {
  return {
    t: 'config',
    config: {
      commit_id: commitId,
      bundles: ['file_distribution'],
      bundle_data: { file_distribution: { enabled: true, files: [{ templates: [{ source: '/device.tmpl', destination: target, is_template: true }] }] } },
    },
    attributes: { serial: 'SN-0042' },
  };
}

interface Handshake {
  deviceId: string;
  agentNonce: string;
  challenge: string;
}

/**
 * A stand-in broker: challenge, the agent's auth, a welcome proven with `welcomeKey`, then `send`
 * sends what the test wants over the mux; it serves the template and collects what the agent sends.
 */
async function standInBroker(welcomeKey: { privateKey: KeyObject; publicKey: KeyObject }, send: (mux: Mux<AgentMessage>, h: Handshake) => void) {
  const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
  await new Promise((r) => wss.once('listening', r));
  cleanups.push(() => wss.close());
  const received: AgentMessage[] = [];
  const fileRequests: string[] = [];
  const connected = new Promise<WebSocket>((resolve) => {
    wss.on('connection', (ws) => {
      const challenge = 'challenge-nonce';
      ws.once('message', (data) => {
        const auth = JSON.parse(String(data)) as Extract<ControlMessage, { t: 'auth' }>;
        const h = { deviceId: auth.device_id, agentNonce: auth.nonce ?? '', challenge };
        const mux = new Mux(ws, { receives: FROM_AGENT });
        mux.on('control', (msg: AgentMessage) => {
          received.push(msg);
          if (msg.t === 'file_request') {
            fileRequests.push(msg.path);
            void mux
              .open('file', { id: msg.id, path: msg.path, size: template.length, sha256: crypto.createHash('sha256').update(template).digest('hex') })
              .then(({ channel }) => {
                channel.resume();
                channel.end(template);
              });
          }
        });
        ws.send(
          JSON.stringify({
            t: 'welcome',
            device_id: h.deviceId,
            heartbeat_ms: 60_000,
            broker_key: brokerKeyPem(welcomeKey.publicKey),
            broker_signature: signWelcome(welcomeKey.privateKey, { device_id: h.deviceId, agent_nonce: h.agentNonce, challenge }),
          }),
        );
        send(mux, h);
        resolve(ws);
      });
      ws.send(JSON.stringify({ t: 'challenge', nonce: challenge }));
    });
  });
  return { url: `http://127.0.0.1:${(wss.address() as AddressInfo).port}`, received, fileRequests, connected };
}

async function agentAgainst(url: string, pinned: KeyObject | undefined, more: Partial<ConnectionOptions> = {}) {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-conn-config-')));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  const stateDir = path.join(dir, 'state');
  // bundles write under the test's own tree (the agent refuses to write below a world-writable /tmp)
  const engine = new ConfigEngine({ stateDir, bundles: loadAgentBundle, root: dir });
  cleanups.push(() => engine.stop());
  await engine.start();
  const controller = new AbortController();
  cleanups.push(() => controller.abort());
  const learnt: KeyObject[] = [];
  const logs: { level: number; msg: string; error?: string }[] = [];
  const log = pino({ level: 'debug' }, { write: (line: string) => void logs.push(JSON.parse(line) as { level: number; msg: string }) });
  const ended: Promise<ConnectionEnd> = runConnection({
    endpoint: new BrokerEndpoint(url),
    identity: new StateDir(stateDir).identity(),
    version: 'test',
    log,
    sessions: { stateDir, log: () => {} },
    inventory: async () => ({}),
    inventoryIntervalMs: 3_600_000,
    config: engine,
    signal: controller.signal,
    ...(pinned ? { brokerKey: pinned } : {}),
    onBrokerKey: (key) => learnt.push(key),
    ...more,
  });
  return { dir, target: '/out/device.conf', file: path.join(dir, 'out', 'device.conf'), engine, controller, ended, learnt, logs };
}

it('applies a configuration signed by the pinned broker key for this device and connection', async () => {
  let target = '';
  const broker = await standInBroker(brokerKey, (mux, h) => {
    mux.send(signBrokerMessage(brokerKey.privateKey, configMessage(target, 'abc123'), { device_id: h.deviceId, nonce: h.agentNonce, seq: 1, ts: Date.now() }));
  });
  const agent = await agentAgainst(broker.url, brokerKey.publicKey);
  target = agent.target;
  const msg = (await until(() => broker.received.find((m) => m.t === 'config_applied'), 'config_applied')) as Extract<AgentMessage, { t: 'config_applied' }>;
  expect(msg.commit_id).toBe('abc123');
  expect(msg.reports.valid.map((r) => r.text)).toEqual([`Successfully rendered template file /device.tmpl to ${target}`]);
  expect(fs.readFileSync(agent.file, 'utf8')).toBe('device=SN-0042\n');
  agent.controller.abort();
  expect(await agent.ended).toEqual({ kind: 'stopped' });
});

it('refuses a broker that cannot prove the pinned key: nothing it sends is applied', async () => {
  let target = '';
  // Another broker at the same address: its own key, its own (valid) signatures.
  const impostor = await standInBroker(otherKey, (mux, h) => {
    mux.send(signBrokerMessage(otherKey.privateKey, configMessage(target, 'evil'), { device_id: h.deviceId, nonce: h.agentNonce, seq: 1, ts: Date.now() }));
  });
  const agent = await agentAgainst(impostor.url, brokerKey.publicKey);
  target = agent.target;
  const end = await agent.ended;
  expect(end).toMatchObject({ kind: 'closed', welcomed: false, untrusted: true, code: 1008 });
  expect(agent.engine.commitId).toBeUndefined();
  expect(impostor.received).toEqual([]);
  expect(fs.existsSync(agent.file)).toBe(false);
  expect(agent.learnt).toEqual([]);
});

it('refuses configurations that are unsigned, tampered with, for another device or replayed; applies the next good one', async () => {
  let target = '';
  const broker = await standInBroker(brokerKey, (mux, h) => {
    const fields = { device_id: h.deviceId, nonce: h.agentNonce, ts: Date.now() };
    mux.send(configMessage(target, 'unsigned'));
    const signed = signBrokerMessage(brokerKey.privateKey, configMessage(target, 'tampered'), { ...fields, seq: 1 });
    mux.send({ ...signed, attributes: { serial: 'SN-6666' } });
    mux.send(signBrokerMessage(brokerKey.privateKey, configMessage(target, 'other-device'), { ...fields, device_id: 'f'.repeat(64), seq: 2 }));
    mux.send(signBrokerMessage(brokerKey.privateKey, configMessage(target, 'other-connection'), { ...fields, nonce: 'an-earlier-connection-nonce', seq: 3 }));
    const good = signBrokerMessage(brokerKey.privateKey, configMessage(target, 'good'), { ...fields, seq: 5 });
    mux.send(good);
    // The same signed message again (and an older one) on this connection: a replay.
    mux.send(good);
    mux.send(signBrokerMessage(brokerKey.privateKey, configMessage(target, 'older'), { ...fields, seq: 5 }));
  });
  const agent = await agentAgainst(broker.url, brokerKey.publicKey);
  target = agent.target;
  const refusals = () => agent.logs.filter((l) => l.msg.startsWith('broker message refused')).map((l) => l.error);
  await until(() => refusals().length >= 6 && broker.received.some((m) => m.t === 'config_applied'), 'six refusals and the good configuration applied');
  expect(refusals()).toEqual(['unsigned', 'bad_signature', 'other_device', 'other_connection', 'replayed', 'replayed']);
  const applied = broker.received.filter((m) => m.t === 'config_applied').map((m) => (m as { commit_id: string }).commit_id);
  expect(new Set(applied)).toEqual(new Set(['good']));
  expect(agent.engine.commitId).toBe('good');
  expect(fs.readFileSync(agent.file, 'utf8')).toBe('device=SN-0042\n');
});

it('refuses a configuration signed with another key on a proven connection', async () => {
  let target = '';
  const broker = await standInBroker(brokerKey, (mux, h) => {
    mux.send(signBrokerMessage(otherKey.privateKey, configMessage(target, 'forged'), { device_id: h.deviceId, nonce: h.agentNonce, seq: 1, ts: Date.now() }));
  });
  const agent = await agentAgainst(broker.url, brokerKey.publicKey);
  target = agent.target;
  await broker.connected;
  await until(() => agent.logs.some((l) => l.msg.startsWith('broker message refused')), 'the refusal');
  expect(agent.logs.find((l) => l.msg.startsWith('broker message refused'))?.error).toBe('bad_signature');
  expect(agent.engine.commitId).toBeUndefined();
  expect(broker.fileRequests).toEqual([]);
});

it('learns the key of a broker that proves it when none is pinned (enrolled before brokers signed)', async () => {
  const broker = await standInBroker(brokerKey, () => {});
  const agent = await agentAgainst(broker.url, undefined);
  await until(() => agent.learnt.length > 0, 'the key to be learnt');
  expect(agent.learnt[0].equals(brokerKey.publicKey)).toBe(true);
});

it('says whether a refusal as "unknown device" was proven with the pinned key (only then may the agent enrol again)', async () => {
  for (const [key, proven] of [
    [brokerKey, true],
    [otherKey, false],
  ] as const) {
    const wss = new WebSocketServer({ port: 0, host: '127.0.0.1' });
    await new Promise((r) => wss.once('listening', r));
    cleanups.push(() => wss.close());
    wss.on('connection', (ws) => {
      ws.once('message', (data) => {
        const auth = JSON.parse(String(data)) as Extract<ControlMessage, { t: 'auth' }>;
        const fields = { device_id: auth.device_id, agent_nonce: auth.nonce ?? '', challenge: 'c', outcome: 'unknown_device' as const };
        ws.send(JSON.stringify({ t: 'unknown_device', broker_signature: signWelcome(key.privateKey, fields) }));
        ws.close(4401, 'unknown device: enrol first');
      });
      ws.send(JSON.stringify({ t: 'challenge', nonce: 'c' }));
    });
    const agent = await agentAgainst(`http://127.0.0.1:${(wss.address() as AddressInfo).port}`, brokerKey.publicKey);
    const end = await agent.ended;
    expect(end).toMatchObject({ kind: 'closed', code: 4401, welcomed: false });
    expect(end.kind === 'closed' && end.unknownProven === true).toBe(proven);
  }
});

it('gives memory back after each inventory: the first, and one the broker asks for', async () => {
  let ask: (() => void) | undefined;
  const broker = await standInBroker(brokerKey, (mux) => {
    ask = () => mux.send({ t: 'inventory', data: {} });
  });
  let released = 0;
  await agentAgainst(broker.url, brokerKey.publicKey, { inventory: async () => ({ hostname: 'device' }), afterInventory: () => void released++ });
  await until(() => released === 1 && broker.received.some((m) => m.t === 'inventory'), 'the first report and the release after it');
  ask?.();
  await until(() => released === 2, 'the release after the inventory the broker asked for');
  await until(() => broker.received.filter((m) => m.t === 'inventory').length === 2, 'the second report');
});
