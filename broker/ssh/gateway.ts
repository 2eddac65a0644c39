/**
 * The SSH gateway's listener (SSH_PORT): TCP connections counted against the pre-auth bounds from
 * their first byte, their preamble read (`fleet ssh-proxy`'s device name, shared/ssh-config.ts),
 * handed to ssh2, signed in (sign-in.ts), bounded per user, and their channels served (channels.ts).
 */
import net, { type AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import ssh2, { type Connection } from 'ssh2';
import type { AccessService } from '../access/access.js';
import type { AuditService } from '../audit/service.js';
import type { AuthService } from '../auth/service.js';
import type { Principal } from '../access/principal.js';
import type { RemoteSessions } from '../remote/sessions.js';
import type { SshAuthority } from './authority.js';
import { SshChannels } from './channels.js';
import { coalesceWrites } from './coalesce.js';
import { readInLargePieces } from './large-reads.js';
import { poolPacketPadding } from './packet-padding.js';
import type { SshKeys } from './keys.js';
import { readSshPreamble } from '../../shared/ssh-config.js';
import { SshSignIn, type SshConnection } from './sign-in.js';

// ssh2 is CommonJS: under Node's own ESM loader (tsx, the built broker) only its default export is there.
const { Server } = ssh2;

export { SSH_MAX_CHANNELS } from './channels.js';
export { SSH_AUTH_FAILURES_PER_ADDRESS } from './sign-in.js';

/** Connections that have not authenticated yet, at most: in all, and from one address. */
export const SSH_PREAUTH_MAX = 64;
export const SSH_PREAUTH_PER_ADDRESS = 8;
/** Connections one user may hold at once (each inner connection through -J counts too). */
export const SSH_MAX_CONNECTIONS_PER_USER = 16;

export interface SshGatewayDeps {
  /**
   * sshUserKeys (SSH_USER_KEYS): registered public keys sign in too, not only certificates;
   * sshAuthTimeoutMs (SSH_AUTH_TIMEOUT_MS): a connection that has not signed in by then is closed;
   * remoteRecheckMs (REMOTE_RECHECK_MS): how often signed-in connections are re-checked.
   */
  config: { sshPort?: number; host: string; sshUserKeys?: boolean; sshAuthTimeoutMs: number; remoteRecheckMs: number };
  logger: Logger;
  authority: Pick<SshAuthority, 'verify' | 'hostKeyFile'>;
  auth: Pick<AuthService, 'sessionCaller' | 'startSession' | 'revokeSession' | 'userRow' | 'authenticate'>;
  audit: Pick<AuditService, 'recordRefusedAttempt'>;
  sessions: Pick<RemoteSessions, 'authorizeAndOpen' | 'adopt' | 'finish'>;
  access: Pick<AccessService, 'decide'>;
  keys: Pick<SshKeys, 'byFingerprint' | 'existing'>;
  /** The device a host name's first label names (its id, or the name of a device the user may reach). */
  findDevice(principal: Principal, label: string): Promise<string | undefined>;
}

/**
 * The SSH gateway (SSH_PORT): OpenSSH clients sign in with a certificate the broker's CA signed at
 * `fleet login` (or a registered key, when SSH_USER_KEYS is on), then each channel maps onto the broker's remote-access machinery exactly as the
 * WebSocket and qbee entry points do (RemoteSessions.authorizeAndOpen, then adopt): a shell or a
 * command is a console as the login user, a forwarding is a tunnel, each decided, audited (source
 * `ssh`), recorded and re-checked like any other. The device is named by the preamble `fleet
 * ssh-proxy` sends before the SSH version line: the connection is bound to that device once signed
 * in. Without one, the connection is the gateway's own, and the host of `ssh -J`'s forwarding
 * (`<device>.<fleet host>:22`) names the device: the gateway answers that forwarding with an inner
 * SSH connection of its own, bound to that device. No sshd runs on the device.
 */
export class SshGateway {
  private server?: net.Server;
  /** TCP connections handed to ssh2, until it tells of them: what ends their pre-auth count, and the host their preamble named. */
  private readonly waiting = new Map<string, { release: () => void; host?: string }>();
  private readonly log: Logger;
  private preauth = 0;
  private readonly preauthPerAddress = new Map<string, number>();
  private readonly signIn: SshSignIn;
  private readonly channels: SshChannels;
  private readonly perUser = new Map<string, number>();
  private readonly connections = new Set<Connection>();
  port?: number;

  constructor(private readonly deps: SshGatewayDeps) {
    this.log = deps.logger.child({ module: 'ssh' });
    this.signIn = new SshSignIn(deps, this.log, (conn) => this.channels.bind(conn));
    this.channels = new SshChannels(deps, this.log, {
      admit: (ip, close) => this.admit(ip, close),
      accept: (client, ip, release, deviceId) => this.accept(client, ip, release, deviceId),
    });
  }

  async start(): Promise<void> {
    if (this.deps.config.sshPort === undefined) return;
    // ssh2 drew fresh random bytes for each packet's padding: drawn in 64 KiB instead (packet-padding.ts).
    poolPacketPadding();
    const ssh = new Server({ hostKeys: [this.deps.authority.hostKeyFile], ident: 'fleet' });
    ssh.on('connection', (client: Connection, info: { ip: string; port: number }) => {
      const key = `${info.ip}:${info.port}`;
      const waiting = this.waiting.get(key);
      this.waiting.delete(key);
      if (waiting) this.accept(client, info.ip, waiting.release, undefined, waiting.host);
      else client.end();
    });
    ssh.on('error', (err: Error) => this.log.warn({ err: err.message }, 'ssh server error'));
    // TCP is accepted here, not by ssh2: a connection counts against the pre-auth bounds from its
    // first byte (ssh2 tells of a connection only once the client sent its version line).
    const server = net.createServer((socket) => {
      // Nagle's algorithm off: with it, a small packet of ours (a WINDOW_ADJUST, an sftp WRITE's
      // status) waited whenever one sent before it was not yet acknowledged, for the client's
      // delayed ACK (40 ms on Linux) when the client had nothing to send: an scp upload's client
      // waited so for its window and its last answers (its last WRITE to its CLOSE took 43 ms).
      socket.setNoDelay(true);
      socket.on('error', () => {});
      const raw = socket.remoteAddress ?? '';
      const release = this.admit(raw.replace(/^::ffff:/, ''), () => socket.destroy());
      if (!release) return void socket.destroy();
      const key = `${raw}:${socket.remotePort}`;
      const waiting: { release: () => void; host?: string } = { release };
      this.waiting.set(key, waiting);
      socket.once('close', () => {
        this.waiting.delete(key);
        release();
      });
      this.preamble(socket, (host) => {
        if (host) waiting.host = host;
        // Read in up to 256 KiB at a time, not Node's 64 KiB (large-reads.ts).
        readInLargePieces(socket);
        // ssh2 writes packet by packet: those of one turn leave in one write (coalesce.ts).
        ssh.injectSocket(coalesceWrites(socket));
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.deps.config.sshPort as number, this.deps.config.host, () => resolve());
    });
    server.on('error', (err: Error) => this.log.warn({ err: err.message }, 'ssh listener error'));
    this.server = server;
    this.port = (server.address() as AddressInfo).port;
    this.log.info({ port: this.port }, 'ssh gateway listening');
  }

  async close(): Promise<void> {
    const server = this.server;
    if (!server) return;
    this.server = undefined;
    this.signIn.stop();
    for (const client of this.connections) client.end();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /**
   * Reads what a connection sends first, before ssh2 sees it: an SSH version line goes to ssh2 as
   * is (ssh -J, any plain client), a preamble names the device host, anything else closes the
   * connection. What is held meanwhile is at most SSH_PREAMBLE_MAX bytes and one read; the time it
   * takes counts against the pre-auth bounds (the connection was admitted at accept).
   */
  private preamble(socket: net.Socket, done: (host: string | undefined) => void): void {
    let head: Buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
      const read = readSshPreamble(head);
      if (read.kind === 'more') return;
      socket.off('data', onData);
      socket.pause();
      if (read.kind === 'refused') {
        this.log.debug({ ip: socket.remoteAddress, reason: read.reason }, 'ssh connection closed before its version line');
        return void socket.destroy();
      }
      const rest = read.kind === 'plain' ? head : read.rest;
      if (rest.length > 0) socket.unshift(rest);
      done(read.kind === 'preamble' ? read.host : undefined);
    };
    socket.on('data', onData);
  }

  /**
   * Counts a connection that has not signed in yet against the bounds (in all, per address, failed
   * sign-ins of the address) and closes it when it has not signed in in time. Returns what ends the
   * count (idempotent), or undefined when it is refused.
   */
  private admit(ip: string, close: () => void): (() => void) | undefined {
    const held = this.preauthPerAddress.get(ip) ?? 0;
    if (this.preauth >= SSH_PREAUTH_MAX || held >= SSH_PREAUTH_PER_ADDRESS || this.signIn.tooManyFailures(ip)) return undefined;
    this.preauth += 1;
    this.preauthPerAddress.set(ip, held + 1);
    const timer = setTimeout(close, this.deps.config.sshAuthTimeoutMs);
    timer.unref();
    let counted = true;
    return () => {
      if (!counted) return;
      counted = false;
      clearTimeout(timer);
      this.preauth -= 1;
      const left = (this.preauthPerAddress.get(ip) ?? 1) - 1;
      if (left > 0) this.preauthPerAddress.set(ip, left);
      else this.preauthPerAddress.delete(ip);
    };
  }

  private accept(client: Connection, rawIp: string, leavePreauth: () => void, deviceId?: string, target?: string): void {
    const ip = (rawIp ?? '').replace(/^::ffff:/, '');
    client.on('error', () => {});
    const conn: SshConnection = { ip, login: '', channels: 0, client, refusals: [], ...(deviceId ? { deviceId } : {}), ...(target ? { target } : {}) };
    this.connections.add(client);
    client.on('authentication', (ctx) => {
      this.signIn.authenticate(conn, ctx).catch((err: unknown) => {
        this.log.error({ err }, 'ssh sign-in failed');
        ctx.reject([]);
        client.end();
      });
    });
    client.on('ready', () => {
      leavePreauth();
      const user = conn.caller?.principal.user.id;
      if (!user) return void client.end();
      const count = (this.perUser.get(user) ?? 0) + 1;
      this.perUser.set(user, count);
      if (count > SSH_MAX_CONNECTIONS_PER_USER) {
        this.log.warn({ user }, 'ssh connection refused: too many for one user');
        return void client.end();
      }
      this.channels.serve(conn, client);
    });
    client.on('close', () => {
      leavePreauth();
      this.connections.delete(client);
      if (!conn.caller && conn.refusals.length > 0) void this.signIn.auditRefusedConnection(conn);
      void this.signIn.closed(conn);
      const user = conn.caller?.principal.user.id;
      if (user && this.perUser.has(user)) {
        const left = (this.perUser.get(user) ?? 1) - 1;
        if (left > 0) this.perUser.set(user, left);
        else this.perUser.delete(user);
      }
    });
  }
}
