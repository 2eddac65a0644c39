/**
 * One reader per wire message (the agent protocol of protocol.ts, and the link-level messages between
 * brokers), applied once, where the message arrives: the mux reads every text frame with them, the
 * handshakes read their few messages with them, and handlers get typed values. A message of a known
 * type that does not read is the peer's protocol error (MuxErrorCode.unreadable, counted by the mux);
 * a type this end does not know is left alone (a newer peer may send more).
 *
 * Plain code, no schema library: the agent loads this module at start and its memory matters. Each
 * reader checks what its handler relies on and returns the message itself (not a copy: a signed
 * message is verified over what the broker sent), except where the reading builds a value
 * (`reports`, and `close`, which is cut rather than refused). Limits live beside the types they bound (REPORT_LIMITS, MAX_CHANNEL_CREDIT…).
 */
import type { BrokerSignature } from './broker-signature.js';
import { isAgentRefusalCode } from './codes.js';
import type { ChannelControl, ChannelKind, ControlMessage, ReloadMode } from './protocol.js';
import { checkReports, type CheckedReports } from './reports.js';

export type Fields = Record<string, unknown>;
/** Reads one message (already known to be an object with a string `t`): the typed message, or undefined. */
export type Reader<M> = (m: Fields) => M | undefined;
/** The readers of what one end accepts, by type. */
export type MessageTable<M extends { t: string }> = { readonly [T in M['t']]: Reader<Extract<M, { t: T }>> } & {
  /** never set: carries the table's message type, so that a mux built with a table is typed by it */
  readonly __messages?: M;
};

/** Longest request id, reload id or file id of a device-level message. */
export const MAX_MESSAGE_ID = 100;
/** Longest sentence a peer gives for a refusal or a failure. */
export const MAX_ERROR_TEXT = 1000;

export function isFields(value: unknown): value is Fields {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const text = (v: unknown, max: number): v is string => typeof v === 'string' && v.length <= max;
const optionalText = (v: unknown, max: number): v is string | undefined => v === undefined || text(v, max);
const count = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
const isId = (v: unknown): v is string => text(v, MAX_MESSAGE_ID) && v !== '';
const isSig = (v: unknown): v is BrokerSignature | undefined => v === undefined || isFields(v);
const checked = <M>(m: Fields, ok: boolean): M | undefined => (ok ? (m as M) : undefined);

/** Parses a text frame into an object with a string `t`; undefined for anything else. */
export function parseEnvelope(data: string): ({ t: string } & Fields) | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(data);
  } catch {
    return undefined;
  }
  return isFields(parsed) && typeof parsed.t === 'string' ? (parsed as { t: string } & Fields) : undefined;
}

/** Reads a message with a table: `unknown` for a type the table lacks, undefined for one that does not read. */
export function readMessage<M extends { t: string }>(table: MessageTable<M>, m: { t: string } & Fields): M | 'unknown' | undefined {
  if (m.t === '__messages' || !Object.hasOwn(table, m.t)) return 'unknown';
  return (table as Record<string, Reader<M>>)[m.t](m);
}

// ---- the handshake of an agent connection ---------------------------------------------------------

type Msg<T extends ControlMessage['t']> = Extract<ControlMessage, { t: T }>;

export const readChallenge: Reader<Msg<'challenge'>> = (m) => checked(m, m.t === 'challenge' && text(m.nonce, 200));
/** The agent's auth: device id and signature are checked by the hub (pattern, key); version and protocol are read leniently, as older agents send them. */
export const readAuth: Reader<Msg<'auth'>> = (m) => checked(m, m.t === 'auth' && text(m.device_id, 200) && text(m.signature, 1000));
export const readWelcome: Reader<Msg<'welcome'>> = (m) =>
  checked(
    m,
    m.t === 'welcome' &&
      text(m.device_id, 200) &&
      typeof m.heartbeat_ms === 'number' &&
      optionalText(m.broker_key, 4096) &&
      optionalText(m.broker_signature, 1000),
  );
export const readUnknownDevice: Reader<Msg<'unknown_device'>> = (m) => checked(m, m.t === 'unknown_device' && text(m.broker_signature, 1000));

// ---- channels (both ends, and links between brokers) ---------------------------------------------

/** The messages the mux itself handles: channel set-up, credit, end, channel-level control. */
export type ChannelMessage = Msg<'open' | 'opened' | 'credit' | 'eof' | 'close' | 'ctl'>;

const channelId = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v > 0 && v <= 0xffffffff;
const CHANNEL_KINDS: ReadonlySet<unknown> = new Set<ChannelKind>(['console', 'tunnel', 'copy', 'file']);

const readChannelControl = (c: unknown): ChannelControl | undefined => {
  if (!isFields(c)) return undefined;
  const nullableInt = (v: unknown) => v === null || (typeof v === 'number' && Number.isSafeInteger(v));
  switch (c.type) {
    case 'resize':
      return checked(c, typeof c.cols === 'number' && typeof c.rows === 'number');
    case 'exit':
      return checked(c, nullableInt(c.code) && nullableInt(c.signal));
    case 'meta':
      return checked(c, count(c.size) && count(c.mode));
    case 'result':
      return checked(c, typeof c.ok === 'boolean' && count(c.bytes) && text(c.sha256, 128) && optionalText(c.error, MAX_ERROR_TEXT));
    default:
      return undefined;
  }
};

/**
 * The channel messages. A grant's amount is checked by the channel (a bad one is fatal there:
 * MuxErrorCode.creditOverflow), so `credit` reads any `n`; the params of an open are the serving
 * end's to judge (they differ by kind, and a relayed one names its device), so they need only be an object.
 */
export const CHANNEL_MESSAGES: MessageTable<ChannelMessage> = {
  open: (m) => checked(m, channelId(m.ch) && CHANNEL_KINDS.has(m.kind) && isFields(m.params)),
  opened: (m) => checked(m, channelId(m.ch) && (m.info === undefined || isFields(m.info))),
  credit: (m) => checked(m, channelId(m.ch)),
  eof: (m) => checked(m, channelId(m.ch)),
  // A close is never dropped (a channel left open holds its relay and credit): an overlong sentence is
  // cut and a code this end does not know is left out, rather than the close refused.
  close: (m) => {
    if (!channelId(m.ch)) return undefined;
    const error = typeof m.error === 'string' ? m.error.slice(0, MAX_ERROR_TEXT) : undefined;
    return { t: 'close', ch: m.ch, ...(error !== undefined ? { error } : {}), ...(isAgentRefusalCode(m.code) ? { code: m.code } : {}) };
  },
  ctl: (m) => checked(m, channelId(m.ch) && readChannelControl(m.msg) !== undefined),
};

// ---- agent → broker, device-level -----------------------------------------------------------------

/** What a broker gets from an agent, as read: reports arrive checked (CheckedReports), the rest as sent. */
export type AgentMessage =
  | Msg<'inventory' | 'inventory_item' | 'reload_ack' | 'file_request' | 'agent_update_request' | 'metrics'>
  | { t: 'reports'; reports: CheckedReports }
  | { t: 'config_applied'; commit_id: string; reports: CheckedReports };

/** A commit id as the agent reports it applied (empty: none yet). */
export const COMMIT_ID_PATTERN = /^[A-Za-z0-9_-]{0,128}$/;

/**
 * Inventory payloads and metric samples are checked in depth by their domains (shared/inventory.ts,
 * shared/metrics.ts): here, their envelope. A `file_request`'s path is judged by the configuration
 * domain, which answers `file_refused` (the agent waits for an answer).
 */
export const FROM_AGENT: MessageTable<AgentMessage> = {
  inventory: (m) => checked(m, isFields(m.data)),
  inventory_item: (m) => checked(m, text(m.type, 64) && text(m.digest, 128) && m.data !== undefined),
  reload_ack: (m) => checked(m, isId(m.id)),
  // a path that is no string reads as '' (refused with `file_refused`, so the agent is not left waiting)
  file_request: (m) => (isId(m.id) ? { t: 'file_request', id: m.id, path: typeof m.path === 'string' ? m.path : '' } : undefined),
  agent_update_request: (m) => checked(m, isId(m.id) && (m.version === undefined || typeof m.version === 'string')),
  metrics: (m) => checked(m, Array.isArray(m.samples)),
  reports: (m) => (Array.isArray(m.reports) ? { t: 'reports', reports: checkReports(m.reports) } : undefined),
  config_applied: (m) =>
    typeof m.commit_id === 'string' && COMMIT_ID_PATTERN.test(m.commit_id) && (m.reports === undefined || Array.isArray(m.reports))
      ? { t: 'config_applied', commit_id: m.commit_id, reports: checkReports(m.reports ?? []) }
      : undefined,
};

// ---- broker → agent, device-level -----------------------------------------------------------------

/** As read: a `config`'s contents are the agent's configuration engine's to check (it reports what it refuses, and why). */
export type BrokerMessage =
  | Msg<'reload' | 'file_refused' | 'agent_update' | 'inventory'>
  | { t: 'config'; config: Fields; attributes?: unknown; defaults?: unknown; sig?: BrokerSignature };

const RELOAD_MODES: ReadonlySet<unknown> = new Set<ReloadMode>(['restart', 'run']);
/**
 * What an agent takes from its broker. A `config` is checked by the agent's configuration engine (it
 * reports a refused one to the broker, and checks bundle by bundle: one bad bundle does not stop the
 * others); an update announcement's version and size by the updater, which logs why it ignores one.
 */
export const FROM_BROKER: MessageTable<BrokerMessage> = {
  reload: (m) => checked(m, isId(m.id) && (m.mode === undefined || RELOAD_MODES.has(m.mode))),
  config: (m) => checked(m, isFields(m.config) && isSig(m.sig)),
  file_refused: (m) => checked(m, isId(m.id) && text(m.error, MAX_ERROR_TEXT)),
  agent_update: (m) => checked(m, typeof m.version === 'string' && typeof m.sha256 === 'string' && typeof m.size === 'number' && isSig(m.sig)),
  inventory: (m) => checked(m, m.data === undefined || isFields(m.data)),
};

// ---- broker ↔ broker, over a peer link ------------------------------------------------------------

/** The handshake of a peer link (broker/cluster/peer.ts) and its link-level messages. */
export type PeerHandshake =
  | { t: 'peer_challenge'; broker_id: string; nonce: string }
  | { t: 'peer_auth'; broker_id: string; nonce: string; mac: string }
  | { t: 'peer_welcome'; mac: string };

/** Link-level messages between brokers: a reload of an agent connected to the other broker, and its answer. */
export type PeerMessage = { t: 'peer_reload'; id: string; device: string; mode?: ReloadMode } | { t: 'peer_reload_done'; id: string; error?: string };

/** A broker id, a nonce or a proof of a peer handshake is at most this long. */
const PEER_FIELD_MAX = 200;

export const readPeerChallenge: Reader<Extract<PeerHandshake, { t: 'peer_challenge' }>> = (m) =>
  checked(m, m.t === 'peer_challenge' && text(m.broker_id, PEER_FIELD_MAX) && text(m.nonce, PEER_FIELD_MAX));
export const readPeerAuth: Reader<Extract<PeerHandshake, { t: 'peer_auth' }>> = (m) =>
  checked(m, m.t === 'peer_auth' && text(m.broker_id, PEER_FIELD_MAX) && text(m.nonce, PEER_FIELD_MAX) && text(m.mac, PEER_FIELD_MAX));
export const readPeerWelcome: Reader<Extract<PeerHandshake, { t: 'peer_welcome' }>> = (m) => checked(m, m.t === 'peer_welcome' && text(m.mac, PEER_FIELD_MAX));

/** The device of a reload is checked by the serving broker, which answers `peer_reload_done` with why it refuses. */
export const FROM_PEER: MessageTable<PeerMessage> = {
  peer_reload: (m) => checked(m, isId(m.id) && typeof m.device === 'string' && (m.mode === undefined || RELOAD_MODES.has(m.mode))),
  peer_reload_done: (m) => checked(m, isId(m.id) && (m.error === undefined || typeof m.error === 'string')),
};
