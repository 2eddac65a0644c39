/**
 * One connection of the agent to the broker, from dial to close: the challenge/auth/welcome
 * handshake (the agent proves its device key, the broker proves the key the agent pinned), keep-alive pings, the inventory reports, the channels the broker opens (served by
 * agent/sessions, or by the configuration engine for `file` channels), configuration messages,
 * and a reload request. Configurations and update announcements are acted on only when signed by the
 * pinned broker key for this device and this connection (shared/broker-signature.ts).
 */
import crypto, { type KeyObject } from 'node:crypto';
import type { Logger } from 'pino';
import WebSocket from 'ws';
import { BROKER_SIGNED_TYPES, brokerKeyFingerprint, parseBrokerPublicKey, verifyBrokerMessage, verifyWelcome } from '../shared/broker-signature.js';
import { signChallenge } from '../shared/device-key.js';
import { Mux } from '../shared/mux.js';
import { PROTOCOL_VERSION, type ControlMessage } from '../shared/protocol.js';
import { FROM_BROKER, parseEnvelope, readChallenge, readUnknownDevice, readWelcome, type BrokerMessage } from '../shared/wire.js';
import { retryAfterMs } from './backoff.js';
import { CONNECT_TIMEOUT_MS, dialer, HANDSHAKE_TIMEOUT_MS } from './dial.js';
import type { BrokerEndpoint } from './broker-client.js';
import type { ConfigEngine } from './config/engine.js';
import type { Identity } from './identity.js';
import type { Updater } from './update/updater.js';
import { inventoryDigest } from './inventory-digest.js';
import { handleChannel, type SessionContext } from './sessions/index.js';

const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

export type ConnectionEnd =
  /** The socket closed or could not be opened; `welcomed` says whether the broker had let us in. */
  | {
      kind: 'closed';
      code: number;
      reason: string;
      welcomed: boolean;
      error?: string;
      /** the broker did not prove the pinned key (or any key) in its welcome */
      untrusted?: boolean;
      /** the broker proved with the pinned key that it does not know this device (enrolling again is safe) */
      unknownProven?: boolean;
      /** the broker refused the upgrade and said when to come back (Retry-After) */
      retryAfterMs?: number;
      /** nothing listened: the connection was refused, or a proxy answered that the broker behind it is away (backoff.ts: Reconnect) */
      down?: boolean;
    }
  /** The broker asked for a reload; it was acknowledged and the connection closed. */
  | { kind: 'reload' }
  /** The agent is stopping. */
  | { kind: 'stopped' };

export interface ConnectionOptions {
  endpoint: BrokerEndpoint;
  identity: Identity;
  version: string;
  log: Logger;
  sessions: SessionContext;
  inventory: () => Promise<Record<string, unknown>>;
  /** The typed inventory (software, containers, users, ports, …), by item type. */
  inventoryItems?: () => Promise<Record<string, unknown>>;
  inventoryIntervalMs: number;
  /** Called after each inventory collection, once its reports were handed to the socket (agent/memory.ts). */
  afterInventory?: () => void;
  /** applies the configuration the broker sends (and fetches its files over `file` channels) */
  config?: ConfigEngine;
  /** Where metrics samples wait: handed a sender while the connection is up (agent/metrics). */
  metrics?: { attach(send: (msg: ControlMessage) => void): () => void };
  /** agent updates: the broker's announcements and the `file` channels answering its downloads */
  updater?: Updater;
  signal: AbortSignal;
  /** The broker key pinned at enrolment; absent for a device enrolled before brokers signed (learnt at this connection). */
  brokerKey?: KeyObject;
  /** A broker key learnt on first use (no key pinned): the broker proved it holds it. */
  onBrokerKey?: (key: KeyObject) => void;
  /** Called once the broker has welcomed the agent. */
  onWelcome?: (info: { heartbeatMs: number }) => void;
  /** Reaching the broker, and the whole handshake (dial.ts); tests shorten them. */
  timeouts?: { connectMs: number; handshakeMs: number };
}

/**
 * An upgrade answer of a proxy whose broker is away (restarting): 502, 504, or 503 without
 * Retry-After. The broker's own 503 (its handshakes are full) says when to come back.
 */
function isAwayAnswer(status: number | undefined, retryAfter: number | undefined): boolean {
  return status === 502 || status === 504 || (status === 503 && retryAfter === undefined);
}

export function runConnection(o: ConnectionOptions): Promise<ConnectionEnd> {
  if (o.signal.aborted) return Promise.resolve({ kind: 'stopped' });
  return new Promise((resolve) => {
    const { log } = o;
    let welcomed = false;
    let reloading = false;
    let stopping = false;
    let lastError: string | undefined;
    /** Why the agent gave up waiting (a bound below), over the error ws reports for the abort. */
    let gaveUp: string | undefined;
    let retryAfter: number | undefined;
    let down = false;
    let untrusted = false;
    let unknownProven = false;
    // This connection's nonce: the broker signs it in the welcome and in every signed message.
    const agentNonce = crypto.randomBytes(32).toString('base64url');
    let challenge: string | undefined;
    let brokerKey: KeyObject | undefined;
    let lastSeq = 0;
    let mux: Mux<BrokerMessage> | undefined;
    let heartbeat: NodeJS.Timeout | undefined;
    let inventoryTimer: NodeJS.Timeout | undefined;
    let detachMetrics: (() => void) | undefined;
    let lastHeard = Date.now();

    const connectTimer = setTimeout(() => {
      gaveUp = 'the broker could not be reached in time';
      ws.terminate();
    }, o.timeouts?.connectMs ?? CONNECT_TIMEOUT_MS);
    const ws = new WebSocket(o.endpoint.wsUrl, {
      ...(o.endpoint.secure ? o.endpoint.tls : {}),
      handshakeTimeout: o.timeouts?.handshakeMs ?? HANDSHAKE_TIMEOUT_MS,
      // Reaching the broker has its own, shorter bound (dial.ts).
      createConnection: dialer(o.endpoint.secure, () => clearTimeout(connectTimer)),
      maxPayload: MAX_MESSAGE_BYTES,
      perMessageDeflate: false,
      headers: { 'user-agent': `fleet-agent/${o.version}` },
    });
    const handshakeTimer = setTimeout(() => {
      gaveUp = 'the broker did not complete the handshake in time';
      ws.terminate();
    }, o.timeouts?.handshakeMs ?? HANDSHAKE_TIMEOUT_MS);

    const stop = () => {
      stopping = true;
      ws.close(1001, 'agent stopping');
      // A broker that does not answer the close handshake is not waited for.
      setTimeout(() => ws.terminate(), 2000).unref();
    };
    o.signal.addEventListener('abort', stop, { once: true });

    const heard = () => {
      lastHeard = Date.now();
    };

    // What this connection delivered, by type: a type goes again only when its digest changed.
    const delivered = new Map<string, string>();
    const deliver = (type: string, digest: string, msg: ControlMessage) => {
      if (!mux || delivered.get(type) === digest) return false;
      mux.send(msg);
      delivered.set(type, digest);
      return true;
    };
    const collectAndSend = async (force: boolean) => {
      if (force) delivered.clear();
      const sent: string[] = [];
      let items: Record<string, unknown> | undefined;
      if (o.inventoryItems) {
        try {
          items = await o.inventoryItems();
        } catch (err) {
          log.warn({ err: (err as Error).message }, 'inventory items not collected');
        }
      }
      try {
        // The system report names the item types found this time: the broker forgets the others
        // (docker uninstalled), and a change of that set is a change of the report.
        const data = { ...(await o.inventory()), ...(items ? { inventory_types: Object.keys(items).sort() } : {}) };
        if (deliver('system', inventoryDigest('system', data), { t: 'inventory', data })) sent.push('system');
      } catch (err) {
        log.warn({ err: (err as Error).message }, 'inventory not collected');
      }
      for (const [type, data] of Object.entries(items ?? {})) {
        const digest = inventoryDigest(type, data);
        if (deliver(type, digest, { t: 'inventory_item', type, digest, data })) sent.push(type);
      }
      log.debug({ sent }, 'inventory reported');
    };
    // One collection at a time: a request while one runs waits for it.
    let inventoryRun: Promise<void> = Promise.resolve();
    const sendInventory = (force = false) => {
      inventoryRun = inventoryRun.then(() => collectAndSend(force)).then(() => o.afterInventory?.());
      return inventoryRun;
    };

    const onControl = (msg: BrokerMessage) => {
      if (BROKER_SIGNED_TYPES.includes(msg.t)) {
        const checked = brokerKey
          ? verifyBrokerMessage(brokerKey, msg, { deviceId: o.identity.deviceId, nonce: agentNonce, afterSeq: lastSeq })
          : ({ ok: false, error: 'unsigned' } as const);
        if (!checked.ok) {
          log.error({ t: msg.t, error: checked.error }, 'broker message refused: not signed by the pinned broker key for this device and connection');
          return;
        }
        lastSeq = checked.seq;
      }
      if (o.updater?.handleControl(msg)) return;
      if (o.config?.handleControl(msg)) return;
      if (msg.t === 'reload' && msg.mode === 'run') {
        // qbee's run-agent: the configuration runs now; the connection and its sessions stay.
        log.info('configuration run requested by the broker');
        mux?.send({ t: 'reload_ack', id: msg.id });
        o.config?.trigger();
        return;
      }
      if (msg.t === 'reload') {
        log.info('reload requested by the broker');
        reloading = true;
        mux?.send({ t: 'reload_ack', id: msg.id });
        // Ends the sessions (their channels close with the socket) and this connection.
        ws.close(1000, 'agent reloading');
        setTimeout(() => ws.terminate(), 2000).unref();
        return;
      }
      if (msg.t === 'inventory') {
        // The broker asks for a fresh report: every type again, changed or not.
        void sendInventory(true);
        return;
      }
      log.debug({ t: msg.t }, 'broker message ignored');
    };

    const welcome = (heartbeatMs: number) => {
      welcomed = true;
      clearTimeout(handshakeTimer);
      mux = new Mux(ws, {
        receives: FROM_BROKER,
        leaseReads: true,
        // Channel data is read past ws's 'message' (shared/ws-tap.ts): it is heard all the same.
        onDataFrame: heard,
        onOpen: (channel) => {
          if (channel.kind === 'file' && o.updater?.owns(channel)) return o.updater.handleChannel(channel);
          return channel.kind === 'file' && o.config ? o.config.handleChannel(channel) : handleChannel(channel, o.sessions);
        },
      });
      mux.on('control', onControl);
      mux.on('protocol-error', (err: Error) => log.warn({ err: err.message }, 'unreadable message from the broker'));
      const interval = Math.max(1000, heartbeatMs);
      heartbeat = setInterval(() => {
        if (Date.now() - lastHeard > 3 * interval) {
          log.warn('broker silent for 3 heartbeats: reconnecting');
          lastError = 'broker silent';
          ws.terminate();
          return;
        }
        if (ws.readyState === WebSocket.OPEN) ws.ping();
      }, interval);
      inventoryTimer = setInterval(() => void sendInventory(), o.inventoryIntervalMs);
      o.onWelcome?.({ heartbeatMs: interval });
      void sendInventory();
      const connected = mux;
      o.config?.attach((msg) => connected.send(msg));
      o.updater?.attach((msg) => connected.send(msg));
      o.updater?.welcomed();
      const metricsMux = mux;
      detachMetrics = o.metrics?.attach((msg) => {
        if (ws.readyState !== WebSocket.OPEN) throw new Error('connection closed');
        metricsMux.send(msg);
      });
    };

    /**
     * The key the welcome proves: the pinned one, or (nothing pinned: a device enrolled before brokers
     * signed) the one it presents, then pinned. Undefined when the broker proves neither.
     */
    const trustedKey = (msg: Extract<ControlMessage, { t: 'welcome' }>, nonce: string): KeyObject | undefined => {
      const fields = { device_id: o.identity.deviceId, agent_nonce: agentNonce, challenge: nonce };
      if (o.brokerKey) {
        if (verifyWelcome(o.brokerKey, fields, msg.broker_signature)) return o.brokerKey;
        lastError = 'the broker did not prove the key pinned at enrolment: another server answers at this address';
        log.error({ pinned: brokerKeyFingerprint(o.brokerKey) }, lastError);
        return undefined;
      }
      let offered: KeyObject;
      try {
        offered = parseBrokerPublicKey(msg.broker_key);
      } catch {
        lastError = 'the broker presented no signing key';
        log.error(lastError);
        return undefined;
      }
      if (!verifyWelcome(offered, fields, msg.broker_signature)) {
        lastError = 'the broker did not prove the signing key it presented';
        log.error(lastError);
        return undefined;
      }
      log.warn({ broker_key: brokerKeyFingerprint(offered) }, 'no broker key was pinned (enrolled before brokers signed): pinning the key this broker proved');
      o.onBrokerKey?.(offered);
      return offered;
    };

    ws.on('message', (data, isBinary) => {
      heard();
      if (welcomed) return; // the mux reads everything from here on
      if (untrusted) return; // closing: nothing an untrusted broker sends is read
      const envelope = isBinary ? undefined : parseEnvelope(String(data));
      const challenged = envelope && readChallenge(envelope);
      if (challenged && challenge === undefined) {
        challenge = challenged.nonce;
        ws.send(
          JSON.stringify({
            t: 'auth',
            device_id: o.identity.deviceId,
            signature: signChallenge(o.identity.privateKey, challenged.nonce),
            version: o.version,
            protocol: PROTOCOL_VERSION,
            nonce: agentNonce,
          } satisfies ControlMessage),
        );
        return;
      }
      const unknown = envelope && readUnknownDevice(envelope);
      if (unknown && challenge !== undefined) {
        const fields = { device_id: o.identity.deviceId, agent_nonce: agentNonce, challenge, outcome: 'unknown_device' as const };
        unknownProven = o.brokerKey !== undefined && verifyWelcome(o.brokerKey, fields, unknown.broker_signature);
        return; // the broker closes with 4401 next
      }
      const welcomeMsg = envelope && readWelcome(envelope);
      if (welcomeMsg && challenge !== undefined) {
        brokerKey = trustedKey(welcomeMsg, challenge);
        if (!brokerKey) {
          untrusted = true;
          ws.close(1008, 'broker not trusted');
          return;
        }
        welcome(welcomeMsg.heartbeat_ms);
        return;
      }
      lastError = 'unexpected message during the handshake';
      ws.close(1002, 'protocol error');
    });
    ws.on('ping', heard);
    ws.on('pong', heard);
    ws.on('unexpected-response', (_req, res) => {
      lastError = `the broker answered the upgrade with HTTP ${res.statusCode}`;
      retryAfter = retryAfterMs(res.headers['retry-after']);
      down = isAwayAnswer(res.statusCode, retryAfter);
      res.resume();
      ws.terminate();
    });
    ws.on('error', (err: NodeJS.ErrnoException) => {
      lastError = err.message;
      if (err.code === 'ECONNREFUSED') down = true;
    });
    ws.on('close', (code, reasonBuffer) => {
      clearTimeout(connectTimer);
      clearTimeout(handshakeTimer);
      clearInterval(heartbeat);
      clearInterval(inventoryTimer);
      if (welcomed) {
        o.config?.detach();
        o.updater?.detach();
      }
      detachMetrics?.();
      o.signal.removeEventListener('abort', stop);
      if (stopping) return resolve({ kind: 'stopped' });
      if (reloading) return resolve({ kind: 'reload' });
      resolve({
        kind: 'closed',
        code,
        reason: reasonBuffer.toString('utf8'),
        welcomed,
        ...((gaveUp ?? lastError) ? { error: gaveUp ?? lastError } : {}),
        ...(untrusted ? { untrusted } : {}),
        ...(unknownProven ? { unknownProven } : {}),
        ...(retryAfter !== undefined ? { retryAfterMs: retryAfter } : {}),
        ...(down ? { down } : {}),
      });
    });
  });
}
