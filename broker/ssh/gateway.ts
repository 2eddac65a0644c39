import { Duplex } from 'node:stream';
import net, { type AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import ssh2, { type AuthContext, type Connection, type ServerChannel, type Session, type TcpipInfo } from 'ssh2';

// ssh2 is CommonJS: under Node's own ESM loader (tsx, the built broker) only its default export is there.
const { Server } = ssh2;
import type { RemoteRequest } from '../../shared/resources.js';
import type { AuditService } from '../audit/service.js';
import type { AuthService } from '../auth/service.js';
import type { Principal } from '../access/principal.js';
import type { Caller, RemoteSessions } from '../remote/sessions.js';
import { consoleCommandProblem, isTunnelHost } from '../remote/schemas.js';
import { fingerprintOf } from '../../shared/ssh-keys.js';
import { verifyUserSignature, type SshAuthority } from './authority.js';
import { RAW_SCRIPT, SshRelay } from './relay.js';
import { SftpBridge, type SftpStream } from './sftp.js';

/** Connections that have not authenticated yet, at most: in all, and from one address. */
export const SSH_PREAUTH_MAX = 64;
export const SSH_PREAUTH_PER_ADDRESS = 8;
/** A connection that has not authenticated by then is closed. */
export const SSH_AUTH_TIMEOUT_MS = 20_000;
/** Failed authentications one address may make in SSH_AUTH_WINDOW_MS; more close at once. */
export const SSH_AUTH_FAILURES_PER_ADDRESS = 20;
const SSH_AUTH_WINDOW_MS = 10 * 60_000;
/**
 * Channels one connection may hold open at once (sessions and forwardings): each may buffer up to
 * an SSH window (2 MiB) towards the device, so this bounds what one connection makes the broker hold.
 */
export const SSH_MAX_CHANNELS = 10;
/** Connections one user may hold at once (each inner connection through -J counts too). */
export const SSH_MAX_CONNECTIONS_PER_USER = 16;
const DEVICE_ID = /^[0-9a-f]{64}$/;
const MAX_DIMENSION = 1000;

export interface SshGatewayDeps {
  config: { sshPort?: number; host: string };
  logger: Logger;
  authority: Pick<SshAuthority, 'verify' | 'hostKeyFile'>;
  auth: Pick<AuthService, 'sessionCaller'>;
  audit: Pick<AuditService, 'recordRemoteStart'>;
  sessions: Pick<RemoteSessions, 'authorizeAndOpen' | 'adopt' | 'finish'>;
  /** The device a host name's first label names (its id, or the name of a device the user may reach). */
  findDevice(principal: Principal, label: string): Promise<string | undefined>;
}

/** An inner connection's socket: a forwarded channel of the gateway (ssh -J's hop to a device). */
class DeviceSocket extends Duplex {
  readonly remotePort = 0;

  constructor(
    private readonly channel: ServerChannel,
    readonly remoteAddress: string,
  ) {
    super();
    channel.on('data', (chunk: Buffer) => {
      if (!this.push(chunk)) channel.pause();
    });
    channel.on('end', () => this.push(null));
    channel.on('close', () => this.destroy());
    channel.on('error', () => this.destroy());
  }

  override _read(): void {
    this.channel.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    if (this.channel.write(chunk)) done();
    else this.channel.once('drain', () => done());
  }

  override _final(done: () => void): void {
    this.channel.end();
    done();
  }

  override _destroy(err: Error | null, done: (err: Error | null) => void): void {
    if (!this.channel.destroyed) this.channel.close();
    done(err);
  }
}

/** One SSH connection: who signed in, and for inner connections (through -J) the device. */
interface SshConnection {
  ip: string;
  login: string;
  deviceId?: string;
  caller?: Caller;
  channels: number;
  client: Connection;
  /** why sign-ins were refused (for the audit entry of a connection that never signed in) */
  refusals: string[];
  refusedAs?: Principal;
}

/**
 * The SSH gateway (SSH_PORT): OpenSSH clients sign in with a certificate the broker's CA signed at
 * `fleet login`, then each channel maps onto the broker's remote-access machinery exactly as the
 * WebSocket and qbee entry points do (RemoteSessions.authorizeAndOpen, then adopt): a shell or a
 * command is a console as the login user, a forwarding is a tunnel, each decided, audited (source
 * `ssh`), recorded and re-checked like any other. The device is named by the host of `ssh -J`'s
 * forwarding (`<device>.<fleet host>:22`): the gateway answers that forwarding with an inner SSH
 * connection of its own, bound to that device, so no sshd runs on the device.
 */
export class SshGateway {
  private server?: net.Server;
  /** TCP connections handed to ssh2, until it tells of them: what ends their pre-auth count. */
  private readonly waiting = new Map<string, () => void>();
  private readonly log: Logger;
  private preauth = 0;
  private readonly preauthPerAddress = new Map<string, number>();
  private readonly failures = new Map<string, { count: number; since: number }>();
  private readonly perUser = new Map<string, number>();
  private readonly connections = new Set<Connection>();
  port?: number;

  constructor(private readonly deps: SshGatewayDeps) {
    this.log = deps.logger.child({ module: 'ssh' });
  }

  async start(): Promise<void> {
    if (this.deps.config.sshPort === undefined) return;
    const ssh = new Server({ hostKeys: [this.deps.authority.hostKeyFile], ident: 'fleet' });
    ssh.on('connection', (client: Connection, info: { ip: string; port: number }) => {
      const key = `${info.ip}:${info.port}`;
      const release = this.waiting.get(key);
      this.waiting.delete(key);
      if (release) this.accept(client, info.ip, release);
      else client.end();
    });
    ssh.on('error', (err: Error) => this.log.warn({ err: err.message }, 'ssh server error'));
    // TCP is accepted here, not by ssh2: a connection counts against the pre-auth bounds from its
    // first byte (ssh2 tells of a connection only once the client sent its version line).
    const server = net.createServer((socket) => {
      socket.on('error', () => {});
      const raw = socket.remoteAddress ?? '';
      const release = this.admit(raw.replace(/^::ffff:/, ''), () => socket.destroy());
      if (!release) return void socket.destroy();
      const key = `${raw}:${socket.remotePort}`;
      this.waiting.set(key, release);
      socket.once('close', () => {
        this.waiting.delete(key);
        release();
      });
      ssh.injectSocket(socket);
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
    for (const client of this.connections) client.end();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /**
   * Counts a connection that has not signed in yet against the bounds (in all, per address, failed
   * sign-ins of the address) and closes it when it has not signed in in time. Returns what ends the
   * count (idempotent), or undefined when it is refused.
   */
  private admit(ip: string, close: () => void): (() => void) | undefined {
    const held = this.preauthPerAddress.get(ip) ?? 0;
    if (this.preauth >= SSH_PREAUTH_MAX || held >= SSH_PREAUTH_PER_ADDRESS || this.tooManyFailures(ip)) return undefined;
    this.preauth += 1;
    this.preauthPerAddress.set(ip, held + 1);
    const timer = setTimeout(close, SSH_AUTH_TIMEOUT_MS);
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

  private accept(client: Connection, rawIp: string, leavePreauth: () => void, deviceId?: string): void {
    const ip = (rawIp ?? '').replace(/^::ffff:/, '');
    client.on('error', () => {});
    const conn: SshConnection = { ip, login: '', channels: 0, client, refusals: [], ...(deviceId ? { deviceId } : {}) };
    this.connections.add(client);
    client.on('authentication', (ctx) => void this.authenticate(conn, ctx));
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
      client.on('session', (accept, reject) => this.session(conn, accept, reject));
      client.on('tcpip', (accept, reject, info) => void this.forward(conn, accept, reject, info));
      client.on('request', (_accept, reject, name) => {
        // -R: nothing on a device listens for the client.
        reject?.();
        if (name === 'tcpip-forward' || name === 'streamlocal-forward@openssh.com') void this.refuseRemoteForward(conn, name);
      });
    });
    client.on('close', () => {
      leavePreauth();
      this.connections.delete(client);
      if (!conn.caller && conn.refusals.length > 0) void this.auditRefusedConnection(conn);
      const user = conn.caller?.principal.user.id;
      if (user && this.perUser.has(user)) {
        const left = (this.perUser.get(user) ?? 1) - 1;
        if (left > 0) this.perUser.set(user, left);
        else this.perUser.delete(user);
      }
    });
  }

  private tooManyFailures(ip: string): boolean {
    const entry = this.failures.get(ip);
    if (!entry) return false;
    if (Date.now() - entry.since > SSH_AUTH_WINDOW_MS) {
      this.failures.delete(ip);
      return false;
    }
    return entry.count >= SSH_AUTH_FAILURES_PER_ADDRESS;
  }

  private failed(ip: string): void {
    const now = Date.now();
    const entry = this.failures.get(ip);
    if (!entry || now - entry.since > SSH_AUTH_WINDOW_MS) {
      // Bounded: forgotten addresses are swept when the table grows.
      if (this.failures.size > 10_000) for (const [key, e] of this.failures) if (now - e.since > SSH_AUTH_WINDOW_MS) this.failures.delete(key);
      this.failures.set(ip, { count: 1, since: now });
    } else entry.count += 1;
  }

  /**
   * A refused sign-in: counted against the address, and kept for the connection's one audit entry
   * (a client offers each of its keys in turn: one entry per connection, not per key).
   */
  private refuseAuth(conn: SshConnection, ctx: AuthContext, reason: string, principal?: Principal): void {
    this.failed(conn.ip);
    if (conn.refusals.length < 5) conn.refusals.push(reason);
    if (principal) conn.refusedAs = principal;
    if (this.tooManyFailures(conn.ip)) {
      ctx.reject([]);
      conn.client.end();
    } else ctx.reject(['publickey']);
  }

  /** A connection that never signed in is an attempt too: audited as denied, with why. */
  private async auditRefusedConnection(conn: SshConnection): Promise<void> {
    const principal = conn.refusedAs;
    await this.deps.audit
      .recordRemoteStart({
        event: 'remote.ssh',
        user: principal?.user,
        deviceId: conn.deviceId ?? '',
        action: 'connect',
        options: { login: conn.login.slice(0, 64) },
        allowed: false,
        reason: `sign-in refused: ${conn.refusals.join('; ')}`,
        ip: conn.ip,
        source: 'ssh',
        sessionId: principal?.sessionId,
      })
      .catch((err: unknown) => this.log.error({ err }, 'refused ssh sign-in not audited'));
  }

  private async authenticate(conn: SshConnection, ctx: AuthContext): Promise<void> {
    conn.login = ctx.username;
    if (ctx.method === 'none') return ctx.reject(['publickey']);
    if (conn.caller) return ctx.reject(['publickey']);
    if (ctx.method !== 'publickey' || !ctx.key) {
      return this.refuseAuth(conn, ctx, `${ctx.method} authentication is not accepted: sign in with a certificate from fleet login`);
    }
    const cert = this.deps.authority.verify(ctx.key.algo, ctx.key.data);
    if ('refused' in cert) {
      // A probe without a signature is answered without an audit entry (ssh offers every key it has).
      return this.refuseAuth(conn, ctx, `${ctx.key.algo} key ${fingerprintOf(ctx.key.data)} refused: ${cert.reason}`);
    }
    // A certificate of this CA, still valid: the client may go on and sign with its key.
    if (!ctx.signature || !ctx.blob) return ctx.accept();
    if (!verifyUserSignature(cert.key, ctx.blob, ctx.signature)) {
      return this.refuseAuth(conn, ctx, `the signature does not match the certificate's key (${cert.keyId})`);
    }
    let caller: { principal: Principal; token: string };
    try {
      caller = await this.deps.auth.sessionCaller(cert.sessionId);
    } catch (err) {
      return this.refuseAuth(conn, ctx, `certificate of ${cert.keyId} refused: ${(err as Error).message}`);
    }
    const { user } = caller.principal;
    if (user.email !== cert.keyId || !cert.principals.includes(user.email)) {
      return this.refuseAuth(conn, ctx, `the certificate names ${cert.keyId}, not the user of its session`, caller.principal);
    }
    conn.caller = { principal: caller.principal, token: caller.token, source: 'ssh', ip: conn.ip };
    ctx.accept();
  }

  /** An attempt the gateway refuses before any device is asked, audited as denied. */
  private async refuseAttempt(conn: SshConnection, action: string, options: Record<string, unknown>, reason: string, deviceId = ''): Promise<void> {
    const caller = conn.caller as Caller;
    await this.deps.audit
      .recordRemoteStart({
        event: `remote.${action}`,
        user: caller.principal.user,
        deviceId,
        action,
        options,
        allowed: false,
        reason,
        ip: conn.ip,
        source: 'ssh',
        sessionId: caller.principal.sessionId,
      })
      .catch((err: unknown) => this.log.error({ err }, 'refused ssh request not audited'));
  }

  private async refuseRemoteForward(conn: SshConnection, name: string): Promise<void> {
    await this.refuseAttempt(conn, 'tunnel', { request: name }, 'remote forwarding (ssh -R) is not supported: devices do not listen for the client');
  }

  /** Counts a channel against the connection's limit; false when the limit is reached. */
  private takeChannel(conn: SshConnection, channel: { once(event: 'close', fn: () => void): unknown }): void {
    conn.channels += 1;
    channel.once('close', () => (conn.channels -= 1));
  }

  private session(conn: SshConnection, accept: () => Session, reject: () => void): void {
    if (conn.channels >= SSH_MAX_CHANNELS) return reject();
    const session = accept();
    this.takeChannel(conn, session as unknown as { once(event: 'close', fn: () => void): unknown });
    let pty: { cols: number; rows: number } | undefined;
    let relay: SshRelay | undefined;
    let started = false;
    const dims = (info: { cols: number; rows: number }) => ({
      cols: Math.min(MAX_DIMENSION, Math.max(1, Math.floor(info.cols) || 80)),
      rows: Math.min(MAX_DIMENSION, Math.max(1, Math.floor(info.rows) || 24)),
    });
    session.on('pty', (ok, _no, info) => {
      pty = dims(info);
      ok?.();
    });
    session.on('window-change', (ok, _no, info) => {
      const size = dims(info);
      if (pty) pty = size;
      relay?.resize(size.cols, size.rows);
      ok?.();
    });
    const once = (open: (stream: ServerChannel) => Promise<void>, acceptStream: () => ServerChannel, rejectStream: () => void) => {
      if (started) return rejectStream();
      started = true;
      const stream = acceptStream();
      stream.on('error', () => {});
      void open(stream).catch((err: unknown) => {
        this.log.error({ err }, 'ssh session failed');
        failStream(stream, 'The broker failed to open this session; the error is logged.');
      });
    };
    session.on('shell', (ok, no) =>
      once(
        async (stream) => {
          relay = await this.console(conn, stream, pty, undefined);
        },
        ok,
        no,
      ),
    );
    session.on('exec', (ok, no, info) =>
      once(
        async (stream) => {
          relay = await this.console(conn, stream, pty, info.command);
        },
        ok,
        no,
      ),
    );
    // ssh2 answers the sftp subsystem with its SFTP server: the bridge maps it onto copy sessions.
    session.on('sftp', (ok: () => SftpStream, no: () => void) => {
      if (started) return no();
      started = true;
      if (!conn.deviceId) {
        no();
        void this.refuseAttempt(conn, 'copy', { subsystem: 'sftp' }, 'no device named: connect through the gateway with ssh -J');
        return;
      }
      new SftpBridge(ok(), conn.caller as Caller, conn.deviceId, this.deps.sessions).start();
    });
    session.on('subsystem', (ok, no, info) =>
      once(
        async (stream) => {
          const name = String(info.name).slice(0, 64);
          await this.refuseAttempt(conn, 'copy', { subsystem: name }, `the subsystem ${name} is not supported by this gateway`, conn.deviceId);
          failStream(stream, `the subsystem ${name} is not supported by this gateway.`);
        },
        ok,
        no,
      ),
    );
    // Agent and X11 forwarding, environment: not offered.
    for (const name of ['auth-agent', 'x11', 'env']) session.on(name, (_ok: unknown, no: (() => void) | undefined) => no?.());
  }

  /** A shell, or `ssh host command`: a console on the device as the login user, decided as a console is. */
  private async console(
    conn: SshConnection,
    stream: ServerChannel,
    pty: { cols: number; rows: number } | undefined,
    command: string | undefined,
  ): Promise<SshRelay | undefined> {
    const caller = conn.caller as Caller;
    if (!conn.deviceId) {
      await this.refuseAttempt(conn, 'console', { login: conn.login.slice(0, 64) }, 'no device named: connect through the gateway with ssh -J');
      failStream(
        stream,
        'This is the fleet SSH gateway: reach a device with ssh -J <gateway> <login>@<device>.<fleet host> (fleet ssh-config writes this for you).',
      );
      return undefined;
    }
    const size = pty ?? { cols: 80, rows: 24 };
    const raw = command !== undefined && !pty;
    const argv = command === undefined ? undefined : raw ? ['/bin/sh', '-c', RAW_SCRIPT, 'sh', command] : ['/bin/sh', '-c', command];
    const login = conn.login;
    const request: RemoteRequest = { action: 'console', user: login };
    const options: Record<string, unknown> = { ...size, user: login, ...(command !== undefined ? { command: [command.slice(0, 1000)] } : {}), terminal: !!pty };
    const problem = argv ? consoleCommandProblem(argv) : undefined;
    if (problem || !/^[a-z_][a-z0-9_.-]{0,31}$/i.test(login)) {
      const reason = problem ? `invalid request: the command ${problem}` : 'invalid request: the login is not a user name';
      await this.refuseAttempt(conn, 'console', options, reason, conn.deviceId);
      failStream(stream, reason);
      return undefined;
    }
    const params = { ...size, user: login, ...(argv ? { command: argv } : {}) };
    const prepared = await this.deps.sessions.authorizeAndOpen(caller, 'console', conn.deviceId, request, params, options);
    if (!prepared.ok) {
      failStream(stream, prepared.frame.message);
      return undefined;
    }
    if (stream.destroyed) {
      prepared.channel.destroy();
      void prepared.recorder?.close();
      await this.deps.sessions.finish(prepared.auditId, prepared.startedAt, { bytesIn: 0, bytesOut: 0, reason: 'client went away before the session started' });
      return undefined;
    }
    const relay = new SshRelay(stream, prepared.channel, { kind: 'console', size, raw, recorder: prepared.recorder, sessionId: prepared.sessionId });
    this.deps.sessions.adopt(prepared, relay);
    relay.start();
    return relay;
  }

  /**
   * direct-tcpip (ssh -L, -D, -W, and -J's hop): on a device's inner connection, a tunnel to
   * host:port as seen from the device; on the gateway itself, `<device>[.<fleet host>]:22` is an
   * inner SSH connection to that device, and another port a tunnel to that port on the device.
   */
  private async forward(conn: SshConnection, accept: () => ServerChannel, reject: () => void, info: TcpipInfo): Promise<void> {
    if (conn.channels >= SSH_MAX_CHANNELS) return reject();
    const caller = conn.caller as Caller;
    const port = Number(info.destPort);
    const host = String(info.destIP ?? '');
    const target = { host: host.slice(0, 300), port };
    if (!Number.isInteger(port) || port < 1 || port > 65535 || !isTunnelHost(host)) {
      await this.refuseAttempt(conn, 'tunnel', target, 'invalid request: the forwarding target must be host:port', conn.deviceId);
      return reject();
    }
    let deviceId = conn.deviceId;
    let dst = host;
    if (!deviceId) {
      const label = host.split('.')[0];
      deviceId = DEVICE_ID.test(label) ? label : await this.deps.findDevice(caller.principal, label);
      if (!deviceId) {
        await this.refuseAttempt(conn, 'tunnel', target, `no device named ${label} that you may reach`);
        return reject();
      }
      if (port === 22) {
        const channel = accept();
        this.takeChannel(conn, channel);
        // The inner connection authenticates again (its own certificate check), bound to this device.
        const bound = deviceId;
        const release = this.admit(conn.ip, () => channel.close());
        if (!release) return void channel.close();
        channel.once('close', release);
        const inner = new Server({ hostKeys: [this.deps.authority.hostKeyFile], ident: 'fleet' }, (client) => this.accept(client, conn.ip, release, bound));
        inner.on('error', () => {});
        inner.injectSocket(new DeviceSocket(channel, conn.ip));
        return;
      }
      dst = 'localhost';
    }
    const request: RemoteRequest = { action: 'tunnel', proto: 'tcp', port, dst };
    const options = { proto: 'tcp', port, dst };
    const prepared = await this.deps.sessions.authorizeAndOpen(caller, 'tunnel', deviceId, request, { proto: 'tcp', port, dst }, options);
    if (!prepared.ok) return reject();
    const stream = accept();
    this.takeChannel(conn, stream);
    const relay = new SshRelay(stream, prepared.channel, { kind: 'tunnel' });
    this.deps.sessions.adopt(prepared, relay);
    relay.start();
  }
}

/** Tells the client why on stderr, with exit status 1, and closes the channel. */
function failStream(stream: ServerChannel, message: string): void {
  if (stream.destroyed) return;
  stream.stderr.write(`fleet: ${message}\r\n`);
  stream.exit(1);
  stream.end();
  stream.close();
}
