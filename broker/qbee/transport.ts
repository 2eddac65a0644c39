import crypto from 'node:crypto';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import type { Channel } from '../../shared/mux.js';
import type { ChannelParams, RemoteKind } from '../../shared/protocol.js';
import {
  encodeQbeeMessage,
  FILE_DOWNLOAD,
  FILE_UPLOAD,
  PTY_RESIZE,
  QBEE_DEVICE_PATH_PREFIX,
  QBEE_PROTOCOL,
  QbeeMessage,
  readQbeeMessage,
  splitHostPort,
} from '../../shared/qbee.js';
import { normalizeDevicePath, type RemoteRequest } from '../../shared/resources.js';
import { SmuxSession, type SmuxStream } from '../../shared/smux.js';
import type { AuditService } from '../audit/service.js';
import type { Authenticated } from '../auth/credentials.js';
import { DomainError } from '../errors.js';
import type { UpgradeAttempt } from '../http/upgrade.js';
import type { ConsoleRecorder } from '../remote/recordings.js';
import type { RemoteService } from '../remote/service.js';
import type { Caller, RemoteSessions } from '../remote/sessions.js';
import { consoleCommandProblem, isTunnelHost } from '../remote/schemas.js';
import { StreamRelay } from './relay.js';

const DEVICE_ID = /^[0-9a-f]{64}$/;
/** Terminal size bounds, as for the broker's own console endpoint. */
const MAX_DIMENSION = 1000;
/**
 * Connections one user may hold at once: each may buffer up to its stream limit times the window
 * (32 × 256 KiB), so this bounds what one account can make the broker hold. qbee-cli opens one per device.
 */
export const QBEE_MAX_CONNECTIONS_PER_USER = 16;

export interface QbeeTransportDeps {
  logger: Logger;
  audit: Pick<AuditService, 'recordRefusedAttempt'>;
  sessions: Pick<RemoteSessions, 'authorizeAndOpen' | 'adopt' | 'finish' | 'clientIp'>;
  remote: Pick<RemoteService, 'reload'>;
}

function httpRefusal(socket: Duplex, status: number, error: string, message: string): void {
  const body = JSON.stringify({ code: status, error, message });
  const text = { 400: 'Bad Request', 401: 'Unauthorized', 404: 'Not Found', 426: 'Upgrade Required' }[status] ?? 'Error';
  socket.end(`HTTP/1.1 ${status} ${text}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}

function writeError(stream: SmuxStream, message: string): void {
  if (stream.destroyed || stream.writableEnded) return;
  stream.end(encodeQbeeMessage(QbeeMessage.error, Buffer.from(message).subarray(0, 0xffff)));
}

/** One upgraded connection: its caller, its device, and the terminals it opened (for resizes). */
interface Connection {
  caller: Caller;
  deviceId: string;
  terminals: Map<string, { channel: Channel; recorder?: Pick<ConsoleRecorder, 'resize'> }>;
}

/**
 * qbee's native remote-access transport (shared/qbee.ts): the `qbee-v1` upgrade at
 * `/device/<id>`, authenticated with the user's token, then one smux stream per operation. Each
 * stream is mapped onto the broker's own session machinery: decided by the access service with the
 * same request (console, tunnel(proto,port,dst), copy(direction,path), reload), audited before it
 * starts (refusals too), relayed to the agent with flow control, re-checked while it lasts.
 */
export class QbeeTransport {
  private readonly log: Logger;
  private readonly connections = new Set<SmuxSession>();
  private readonly perUser = new Map<string, number>();

  constructor(private readonly deps: QbeeTransportDeps) {
    this.log = deps.logger.child({ module: 'qbee' });
  }

  close(): void {
    for (const session of [...this.connections]) session.close('broker shut down');
  }

  private deviceOf(url: URL): string {
    try {
      return decodeURIComponent(url.pathname.slice(QBEE_DEVICE_PATH_PREFIX.length)).replace(/\/$/, '');
    } catch {
      return url.pathname.slice(QBEE_DEVICE_PATH_PREFIX.length);
    }
  }

  /** A refused upgrade is an attempt too, audited as denied like the broker's own endpoints' (never the token). */
  private async refuseUpgrade(attempt: UpgradeAttempt, status: number, error: string, message: string, user?: Caller['principal']): Promise<void> {
    await this.deps.audit.recordRefusedAttempt({
      event: 'remote.qbee',
      principal: user,
      deviceId: this.deviceOf(attempt.url),
      action: 'connect',
      options: {},
      reason: `${error}: ${message}`,
      ip: this.deps.sessions.clientIp(attempt.req),
      source: 'qbee',
    });
    httpRefusal(attempt.socket, status, error, message);
  }

  /** First step of the upgrade (broker/upgrades.ts): a qbee-v1 handshake to a device path, before the token is read. */
  admit(attempt: UpgradeAttempt): boolean {
    const { req, socket, url } = attempt;
    socket.on('error', () => {});
    const protocols = String(req.headers['sec-websocket-protocol'] ?? '')
      .split(',')
      .map((p) => p.trim());
    if (req.headers.upgrade?.toLowerCase() !== 'websocket' || !protocols.includes(QBEE_PROTOCOL)) {
      httpRefusal(socket, 426, 'upgrade_required', `Upgrade with Sec-WebSocket-Protocol: ${QBEE_PROTOCOL}.`);
      return false;
    }
    if (!DEVICE_ID.test(this.deviceOf(url))) {
      void this.refuseUpgrade(attempt, 404, 'not_found', 'No device at this path: /device/<device id>.');
      return false;
    }
    return true;
  }

  /** The token was missing or bad (unauthenticated: audited, 401), or could not be checked (logged, cut). */
  async refused(attempt: UpgradeAttempt, err: unknown): Promise<void> {
    if (err instanceof DomainError && err.kind === 'unauthenticated') return this.refuseUpgrade(attempt, 401, err.code, err.message);
    this.log.error({ err }, 'qbee upgrade failed');
    attempt.socket.destroy();
  }

  /** The caller is known: one smux session over the upgraded socket, each stream decided and audited on its own. */
  connect(attempt: UpgradeAttempt, authenticated: Authenticated): void {
    const { socket, head } = attempt;
    if (socket.destroyed) return;
    const deviceId = this.deviceOf(attempt.url);
    const caller: Caller = { principal: authenticated.principal, token: authenticated.token, source: 'qbee', ip: this.deps.sessions.clientIp(attempt.req) };
    const userId = caller.principal.user.id;
    const held = this.perUser.get(userId) ?? 0;
    if (held >= QBEE_MAX_CONNECTIONS_PER_USER) {
      void this.refuseUpgrade(
        attempt,
        429,
        'too_many_connections',
        `At most ${QBEE_MAX_CONNECTIONS_PER_USER} remote-access connections per user at once; close one first.`,
        caller.principal,
      );
      return;
    }
    this.perUser.set(userId, held + 1);
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Protocol: ${QBEE_PROTOCOL}\r\n\r\n`);
    const session = new SmuxSession(socket, { side: 'server' });
    const connection: Connection = { caller, deviceId, terminals: new Map() };
    this.connections.add(session);
    session.on('protocol-error', (err: Error) => this.log.warn({ deviceId, err: err.message }, 'qbee connection closed: protocol error'));
    session.on('close', () => {
      this.connections.delete(session);
      const left = (this.perUser.get(userId) ?? 1) - 1;
      if (left > 0) this.perUser.set(userId, left);
      else this.perUser.delete(userId);
    });
    session.on('stream', (stream: SmuxStream) => void this.serve(connection, stream));
    session.feed(head);
  }

  private async serve(connection: Connection, stream: SmuxStream): Promise<void> {
    let message: { type: number; payload: Buffer };
    try {
      message = await readQbeeMessage(stream);
    } catch {
      return void stream.destroy();
    }
    try {
      switch (message.type) {
        case QbeeMessage.tcpTunnel:
          return await this.tunnel(connection, stream, message.payload.toString());
        case QbeeMessage.udpTunnel:
          return await this.udpTunnel(connection, stream, message.payload.toString());
        case QbeeMessage.pty:
          return await this.terminal(connection, stream, message.payload);
        case QbeeMessage.ptyCommand:
          return this.terminalCommand(connection, stream, message.payload);
        case QbeeMessage.reload:
          return await this.reload(connection, stream);
        case QbeeMessage.file:
        case QbeeMessage.fileLegacy:
          return await this.file(connection, stream, message.payload);
        default:
          return await this.refuseUnsupported(connection, stream, message.type);
      }
    } catch (err) {
      this.log.error({ err, deviceId: connection.deviceId }, 'qbee stream failed');
      writeError(stream, 'The broker failed to serve this request; the error is logged.');
    }
  }

  /** A stream the broker cannot serve is refused, and audited like every refused attempt. */
  private async refuse(connection: Connection, stream: SmuxStream, action: string, options: Record<string, unknown>, reason: string): Promise<void> {
    const { caller, deviceId } = connection;
    await this.deps.audit.recordRefusedAttempt({ principal: caller.principal, deviceId, action, options, reason, ip: caller.ip, source: caller.source });
    writeError(stream, reason);
  }

  private async refuseUnsupported(connection: Connection, stream: SmuxStream, type: number): Promise<void> {
    const what = type === QbeeMessage.command ? 'commands without a terminal are' : `message type 0x${type.toString(16).padStart(2, '0')} is`;
    await this.refuse(connection, stream, 'unsupported', { message_type: type }, `${what} not supported by this broker`);
  }

  /** Decides, audits and opens through the broker's session machinery, then relays the stream. */
  private async open(
    connection: Connection,
    stream: SmuxStream,
    kind: RemoteKind,
    request: RemoteRequest,
    params: ChannelParams,
    options: Record<string, unknown>,
    okPayload: Buffer,
    relayOptions: ConstructorParameters<typeof StreamRelay>[2],
  ): Promise<{ channel: Channel; recorder?: ConsoleRecorder } | undefined> {
    const prepared = await this.deps.sessions.authorizeAndOpen(connection.caller, kind, connection.deviceId, request, params, options);
    if (!prepared.ok) {
      writeError(stream, prepared.frame.message);
      return undefined;
    }
    if (stream.destroyed || stream.writableEnded) {
      prepared.channel.destroy();
      void prepared.recorder?.close();
      await this.deps.sessions.finish(prepared.auditId, prepared.startedAt, { bytesIn: 0, bytesOut: 0, reason: 'client went away before the session started' });
      return undefined;
    }
    stream.write(encodeQbeeMessage(QbeeMessage.ok, okPayload));
    const relay = new StreamRelay(stream, prepared.channel, { ...relayOptions, recorder: prepared.recorder });
    this.deps.sessions.adopt(prepared, relay);
    relay.start();
    return { channel: prepared.channel, recorder: prepared.recorder };
  }

  private async tunnel(connection: Connection, stream: SmuxStream, payload: string): Promise<void> {
    const target = splitHostPort(payload);
    if (!target || !isTunnelHost(target.host)) {
      return this.refuse(connection, stream, 'tunnel', { target: payload.slice(0, 300) }, 'invalid request: the tunnel target must be host:port');
    }
    const request: RemoteRequest = { action: 'tunnel', proto: 'tcp', port: target.port, dst: target.host };
    const { action: _a, ...options } = request as RemoteRequest & Record<string, unknown>;
    await this.open(connection, stream, 'tunnel', request, { proto: 'tcp', port: target.port, dst: target.host }, options, Buffer.alloc(0), { kind: 'tunnel' });
  }

  /** UDP: `suggested-local-port:host:port`; the suggestion concerns the device's listener and is not used. */
  private async udpTunnel(connection: Connection, stream: SmuxStream, payload: string): Promise<void> {
    const colon = payload.indexOf(':');
    const target = colon > 0 && /^\d{1,5}$/.test(payload.slice(0, colon)) ? splitHostPort(payload.slice(colon + 1)) : undefined;
    if (!target || !isTunnelHost(target.host)) {
      return this.refuse(connection, stream, 'tunnel', { target: payload.slice(0, 300) }, 'invalid request: the tunnel target must be port:host:port');
    }
    const request: RemoteRequest = { action: 'tunnel', proto: 'udp', port: target.port, dst: target.host };
    const { action: _a, ...options } = request as RemoteRequest & Record<string, unknown>;
    await this.open(connection, stream, 'tunnel', request, { proto: 'udp', port: target.port, dst: target.host }, options, Buffer.alloc(0), {
      kind: 'tunnel',
      datagramPort: target.port,
    });
  }

  /**
   * A terminal: the login shell, or with `command` (and `command_args`) that command in the pty
   * instead (qbee-cli `term <device> cmd args…`), decided and audited as a console with the command
   * in the entry. An agent that does not confirm it ran the command has its channel closed and the
   * client is answered ERROR: a shell is never opened in place of a command.
   */
  private async terminal(connection: Connection, stream: SmuxStream, payload: Buffer): Promise<void> {
    const size = parseSize(payload);
    if (!size) return this.refuse(connection, stream, 'console', {}, `invalid request: the terminal size must be 1 to ${MAX_DIMENSION} columns and rows`);
    const command = parseCommand(payload);
    if (typeof command === 'string') return this.refuse(connection, stream, 'console', { ...size }, `invalid request: ${command}`);
    const sid = crypto.randomUUID();
    const params = command ? { ...size, command } : size;
    // An agent that cannot run the command is refused by the session machinery (never a shell instead).
    const opened = await this.open(connection, stream, 'console', { action: 'console' }, params, { ...params }, Buffer.from(sid), { kind: 'console', size });
    if (!opened) return;
    connection.terminals.set(sid, opened);
    opened.channel.once('close', () => connection.terminals.delete(sid));
  }

  /** A resize names a terminal this connection opened; it is part of that (already audited) session. */
  private terminalCommand(connection: Connection, stream: SmuxStream, payload: Buffer): void {
    let command: { sid?: unknown; type?: unknown };
    try {
      command = JSON.parse(payload.toString()) as typeof command;
    } catch {
      return writeError(stream, 'invalid terminal command: not JSON');
    }
    const terminal = typeof command.sid === 'string' ? connection.terminals.get(command.sid) : undefined;
    const channel = terminal?.channel;
    if (!channel || channel.destroyed) return writeError(stream, 'no such terminal session on this connection');
    if ((command.type ?? PTY_RESIZE) !== PTY_RESIZE) return writeError(stream, `unsupported terminal command ${String(command.type)}`);
    const size = parseSize(payload);
    if (!size) return writeError(stream, `invalid resize: 1 to ${MAX_DIMENSION} columns and rows`);
    channel.control({ type: 'resize', ...size });
    terminal.recorder?.resize(size.cols, size.rows);
    stream.end(encodeQbeeMessage(QbeeMessage.ok));
  }

  private async reload(connection: Connection, stream: SmuxStream): Promise<void> {
    const { caller, deviceId } = connection;
    try {
      // qbee's MessageTypeReload: a configuration run, not a restart that would cut this connection's sessions.
      await this.deps.remote.reload(caller.principal, deviceId, caller.ip, caller.source, 'run');
    } catch (err) {
      if (err instanceof DomainError) return writeError(stream, err.message);
      throw err;
    }
    stream.end(encodeQbeeMessage(QbeeMessage.ok));
  }

  private async file(connection: Connection, stream: SmuxStream, payload: Buffer): Promise<void> {
    let asked: { direction?: unknown; path?: unknown };
    try {
      asked = JSON.parse(payload.toString()) as typeof asked;
    } catch {
      asked = {};
    }
    const direction = asked.direction === FILE_DOWNLOAD ? 'download' : asked.direction === FILE_UPLOAD ? 'upload' : undefined;
    const rawPath = typeof asked.path === 'string' ? asked.path : '';
    const path = normalizeDevicePath(rawPath);
    if (!direction || !path || rawPath.length > 4096 || rawPath.includes('\0')) {
      return this.refuse(connection, stream, 'copy', { path: rawPath.slice(0, 300) }, 'invalid request: direction 0 or 1 and an absolute path');
    }
    const request: RemoteRequest = { action: 'copy', direction, path: rawPath };
    const options = { direction, path: rawPath, ...(path !== rawPath ? { normalized_path: path } : {}), format: 'tar.gz' };
    await this.open(connection, stream, 'copy', request, { direction, path, format: 'tar.gz' }, options, Buffer.alloc(0), {
      kind: 'copy',
      direction,
    });
  }
}

/**
 * The command of a terminal request as argv (`command` then `command_args`); undefined without one,
 * a sentence when it is malformed.
 */
function parseCommand(payload: Buffer): string[] | undefined | string {
  let asked: { command?: unknown; command_args?: unknown };
  try {
    asked = JSON.parse(payload.toString()) as typeof asked;
  } catch {
    return 'not JSON';
  }
  const args = asked.command_args ?? [];
  if (asked.command === undefined || asked.command === '') {
    return Array.isArray(args) && args.length === 0 ? undefined : 'command_args without a command';
  }
  if (typeof asked.command !== 'string') return 'the command must be a string';
  if (!Array.isArray(args)) return 'command_args must be a list of strings';
  // qbee-cli sends `command` and `command_args` as typed: the console's own rule decides the argv.
  const argv: unknown[] = [asked.command, ...(args as unknown[])];
  const problem = consoleCommandProblem(argv);
  return problem ? `the command (with its arguments) ${problem}` : (argv as string[]);
}

function parseSize(payload: Buffer): { cols: number; rows: number } | undefined {
  let asked: { cols?: unknown; rows?: unknown };
  try {
    asked = JSON.parse(payload.toString()) as typeof asked;
  } catch {
    return undefined;
  }
  // qbee omits zero sizes; a terminal without a size gets the usual 80x24.
  const cols = asked.cols === undefined || asked.cols === 0 ? 80 : Number(asked.cols);
  const rows = asked.rows === undefined || asked.rows === 0 ? 24 : Number(asked.rows);
  const ok = (n: number) => Number.isInteger(n) && n >= 1 && n <= MAX_DIMENSION;
  return ok(cols) && ok(rows) ? { cols, rows } : undefined;
}
