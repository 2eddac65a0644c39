/**
 * The agent wire protocol: one WebSocket from the agent to the broker (`/api/v2/agent/ws`), carrying
 * control messages as JSON text frames and the bytes of many channels as binary frames
 * `[uint32 channel id, big-endian][payload]`. Channels are opened by the broker, one per remote-access
 * session (console, tunnel connection, copy). Each direction of each channel is flow-controlled by
 * credit: a sender may have at most the window in flight un-granted, so a slow reader slows its own
 * sender and never fills the broker's memory or stalls other channels. Both ends use the same window
 * and enforce it on receipt: data beyond the credit granted, or a grant taking credit above
 * MAX_CHANNEL_CREDIT, closes the connection (1002). The broker proves its signing key (pinned by the
 * agent at enrolment) in the welcome and signs `config` and `agent_update` (shared/broker-signature.ts).
 */

import type { BrokerSignature } from './broker-signature.js';
import type { AgentRefusalCode } from './codes.js';
import type { MetricSample } from './metrics.js';

export const AGENT_WS_PATH = '/api/v2/agent/ws';
export const AGENT_ENROL_PATH = '/api/v2/agent/enrol';
export const PROTOCOL_VERSION = 1;
/** What the agent signs to prove it holds its key: this prefix and the broker's nonce. */
export const AUTH_SIGNING_PREFIX = 'fleet-agent-auth-v1:';

/** Close codes of the agent WebSocket. */
export const AgentClose = {
  unauthorized: 4401, // signature or device unknown
  removed: 4403, // device removed or rejected: do not come back with this key
  pending: 4409, // enrolled, waiting for approval: retry later
  replaced: 4000, // a newer connection of the same device took over
  shutdown: 1001,
  protocolError: 1002, // the peer broke the protocol (data beyond credit, too many unreadable messages)
  tooBig: 1009, // more data than allowed before authentication
  peerNotReading: 4008, // the peer left more than the bound unread: not queued further
  retryLater: 4429, // closed for a protocol error a moment ago: come back after a pause
} as const;

/** Largest credit a channel may hold in either direction: a grant above it is a protocol error. */
export const MAX_CHANNEL_CREDIT = 16 * 1024 * 1024;

/** Why the mux rejected what its peer sent; code branches on these, the message is for people. */
export const MuxErrorCode = {
  /** data beyond the credit this side granted (fatal) */
  creditExceeded: 'credit_exceeded',
  /** a grant pushing credit above MAX_CHANNEL_CREDIT, or not a positive whole number (fatal) */
  creditOverflow: 'credit_overflow',
  /** a text frame that is not a JSON control message, or a binary frame without a channel id */
  unreadable: 'unreadable',
  /** a message this side never accepts (an open sent to the broker) */
  unexpected: 'unexpected',
} as const;
export type MuxErrorCode = (typeof MuxErrorCode)[keyof typeof MuxErrorCode];

/** `file`: the broker sends a file of its file store the agent asked for (configuration's file_distribution). */
export type ChannelKind = RemoteKind | 'file';
/** The kinds of remote-access session a person opens. */
export type RemoteKind = 'console' | 'tunnel' | 'copy';

export interface ConsoleParams {
  cols: number;
  rows: number;
  /** the local user the shell runs as; absent: the agent's own user */
  user?: string;
  /**
   * argv to run in the pty instead of an interactive login shell (qbee-cli `term <device> cmd args…`):
   * run by that login shell with `exec "$@"`, so it is found on the login PATH and never parsed as
   * shell text. The agent confirms with `command: true` in its `opened` info.
   */
  command?: string[];
  /**
   * with `command`: run it with pipes instead of a pty (stdout and stderr both to the channel, the
   * end once both are read to their end), as sshd runs a command without a terminal. An agent
   * without this runs the command in a pty as before, so the command must work there too.
   */
  pipes?: boolean;
  /**
   * with `pipes`: the command as one line of shell text, run as sshd runs a command without a
   * terminal (`<the user's shell> -c <line>`, no login profile) in place of `command`. An agent that
   * does answers `commandLine: true` in its `opened` info; an older one runs `command` as before.
   */
  commandLine?: string;
}
export interface TunnelParams {
  proto: 'tcp' | 'udp';
  port: number;
  dst: string;
}
export interface CopyParams {
  /**
   * `list`: the entries of a directory (the web console's file browser), answered in the open's
   * info as a DirectoryListing; decided by the broker as a download of that directory. An agent
   * that predates it refuses with `unsupported`. `mkdir`: makes one directory (its parent must
   * exist) with `mode` (0755 without), answered `{path}` in the open's info; decided by the broker
   * as an upload of that path. An agent that predates it refuses with `unsupported`. `remove`
   * (a file or symlink), `rmdir` (an empty directory) and `rename` (to `to`, which must not exist):
   * answered `{path}`, decided as uploads of each path named; the final component is never followed.
   */
  direction: 'upload' | 'download' | 'list' | 'mkdir' | 'remove' | 'rmdir' | 'rename';
  path: string;
  /** rename: the new path */
  to?: string;
  /** upload: expected size and checksum, checked by the agent before the rename */
  size?: number;
  sha256?: string;
  /**
   * upload or download of a `file`: false when the opener never reads the result's checksum (the
   * SSH gateway's sftp): the agent then hashes nothing (unless an upload's `sha256` is to be
   * checked) and its result's `sha256` is ''. An agent that predates it hashes anyway.
   */
  checksum?: boolean;
  /** the directories the user's grant allows (already normalised); the agent re-checks with realpath */
  allowed?: string[];
  /**
   * `file` (default): the bytes of one regular file. `tar.gz`: a gzip'd tar of a file or directory
   * (qbee's file transfer): a download archives the path, an upload extracts into it.
   */
  format?: 'file' | 'tar.gz';
  /** upload of a `file`, mkdir: the permissions (0 to 0o777) of what it creates, set exactly whatever the umask */
  mode?: number;
}
/** A directory listing holds at most this many entries; more are left out and `truncated` says so. */
export const MAX_LIST_ENTRIES = 1000;
/** ...and at most this many bytes of JSON (it travels in one control message, across brokers too). */
export const MAX_LIST_BYTES = 256 * 1024;

/** One entry of a directory as the agent saw it with lstat: a symlink is never followed. */
export interface DirectoryEntry {
  name: string;
  type: 'file' | 'dir' | 'symlink' | 'other';
  /** bytes (regular files; 0 for the others) */
  size: number;
  /** last modification, ISO 8601 */
  mtime: string;
}

/** The agent's answer to a `list` copy channel (its `opened` info). */
export interface DirectoryListing {
  /** the directory listed, as the kernel names it (symlinks resolved) */
  path: string;
  entries: DirectoryEntry[];
  /** more entries than MAX_LIST_ENTRIES (or MAX_LIST_BYTES) were there: the rest are left out */
  truncated: boolean;
}

/** A file of the broker's file store, answering the agent's `file_request` of the same id. */
export interface FileParams {
  id: string;
  path: string;
  size: number;
  sha256: string;
}
export type ChannelParams = ConsoleParams | TunnelParams | CopyParams | FileParams;

/**
 * qbee's committed configuration of one device (its agent's `CommittedConfig`): the commit that last
 * changed it, the bundles in force, and each bundle's data under qbee's field names.
 */
export interface CommittedConfig {
  commit_id: string;
  bundles: string[];
  bundle_data: Record<string, unknown>;
}

/**
 * The account's defaults for what a device's configuration leaves unset (the company settings):
 * `agent_interval`, minutes (1–1440), the run interval of an agent without an enabled `settings`
 * bundle. An agent that does not know a field ignores it.
 */
export interface AgentDefaults {
  agent_interval?: number;
}

/** Severity of an agent report, as qbee writes it. */
export type ReportSeverity = 'INFO' | 'WARN' | 'ERR' | 'CRIT';

/** One report of the agent (qbee's configuration `Report`): a bundle's outcome, a watcher's alert, an agent event. */
export interface AgentReport {
  /** the bundle, or `agent_internal` for the agent's own events */
  bundle: string;
  bundle_commit_id: string;
  commit_id: string;
  labels: string;
  sev: ReportSeverity;
  text: string;
  /** base64 of the operation's log (output tail), secrets redacted */
  log?: string;
  /** Unix seconds */
  ts: number;
}

/** `restart`: the agent restarts its work loop; `run`: it runs its configuration now, connection kept. */
export type ReloadMode = 'restart' | 'run';

/** Control messages (text frames). `ch` names a channel where the message concerns one. */
export type ControlMessage =
  // connection set-up
  | { t: 'challenge'; nonce: string }
  /** `nonce`: the agent's own nonce of this connection, which the broker signs in the welcome (shared/broker-signature.ts) */
  | { t: 'auth'; device_id: string; signature: string; version: string; protocol: number; nonce?: string }
  /** `broker_key`: the broker's public key (PEM, Ed25519); `broker_signature`: its proof over the agent's nonce */
  | { t: 'welcome'; device_id: string; heartbeat_ms: number; broker_key?: string; broker_signature?: string }
  /** broker → agent, before closing with 4401 an agent that sent a nonce: the device is unknown here, proven with the broker key */
  | { t: 'unknown_device'; broker_signature: string }
  // device-level
  | { t: 'inventory'; data: Record<string, unknown> }
  /**
   * agent → broker: one typed inventory payload (shared/inventory.ts), sent on connect and then only
   * when its digest (sha256 of the JSON) changed; the broker keeps the types not sent.
   */
  | { t: 'inventory_item'; type: string; digest: string; data: unknown }
  /**
   * broker → agent: restart the work loop (the connection and every session end); with `mode: 'run'`,
   * run the configuration now instead, keeping the connection and its sessions (qbee's run-agent).
   * Both are answered `reload_ack`. An agent that predates `mode` reloads.
   */
  | { t: 'reload'; id: string; mode?: ReloadMode }
  | { t: 'reload_ack'; id: string }
  /** broker → agent: the configuration to apply, and the device's attributes for templates */
  | { t: 'config'; config: CommittedConfig; attributes: Record<string, string>; defaults?: AgentDefaults; sig?: BrokerSignature }
  /** agent → broker: a configuration run ended; `commit_id` is what it applied */
  | { t: 'config_applied'; commit_id: string; reports: AgentReport[] }
  /**
   * agent → broker: send me this file of the file store (one the device's configuration names). The
   * broker answers with a channel of kind `file` carrying `id` (bytes, then eof), or `file_refused`.
   */
  | { t: 'file_request'; id: string; path: string }
  | { t: 'file_refused'; id: string; error: string }
  /**
   * broker → agent: the agent this broker publishes (its fleet-agent.mjs), sent after the welcome and
   * again when a new build is published. The agent decides whether to update (settings, version order).
   */
  | { t: 'agent_update'; version: string; sha256: string; size: number; sig?: BrokerSignature }
  /**
   * agent → broker: send me the published agent of this version. Answered like `file_request`: a
   * `file` channel carrying `id` (path `/agent/fleet-agent-<version>.mjs`, size, sha256), or `file_refused`.
   */
  | { t: 'agent_update_request'; id: string; version: string }
  /** agent → broker: reports outside a configuration run (watchers, agent events) */
  | { t: 'reports'; reports: AgentReport[] }
  /** agent → broker: a batch of metric samples (qbee's Metric shape, at most MAX_METRICS_BATCH) */
  | { t: 'metrics'; samples: MetricSample[] }
  // channels
  | { t: 'open'; ch: number; kind: ChannelKind; params: ChannelParams }
  | { t: 'opened'; ch: number; info?: Record<string, unknown> }
  | { t: 'credit'; ch: number; n: number }
  | { t: 'eof'; ch: number }
  /** `error` says why for people; `code` says why for code (an agent refusing to open a channel). */
  | { t: 'close'; ch: number; error?: string; code?: AgentRefusalCode }
  /** channel-level control: console resize/exit, copy meta/result */
  | { t: 'ctl'; ch: number; msg: ChannelControl };

export type ChannelControl =
  | { type: 'resize'; cols: number; rows: number }
  | { type: 'exit'; code: number | null; signal: number | null }
  | { type: 'meta'; size: number; mode: number }
  | { type: 'result'; ok: boolean; bytes: number; sha256: string; error?: string };

export function encodeData(ch: number, payload: Buffer): Buffer {
  const frame = Buffer.allocUnsafe(4 + payload.length);
  frame.writeUInt32BE(ch, 0);
  payload.copy(frame, 4);
  return frame;
}

export function decodeData(frame: Buffer): { ch: number; payload: Buffer } | undefined {
  if (frame.length < 4) return undefined;
  return { ch: frame.readUInt32BE(0), payload: frame.subarray(4) };
}
