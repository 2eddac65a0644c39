/**
 * The channels of a signed-in SSH connection, each mapped onto the broker's remote-access
 * machinery (RemoteSessions.authorizeAndOpen, then adopt) as the WebSocket and qbee entry points
 * do: a shell or a command is a console as the login user, the sftp subsystem a set of copy
 * sessions (sftp.ts), a forwarding a tunnel, and `ssh -J`'s hop to `<device>.<fleet host>:22` an
 * inner SSH connection bound to that device. A connection whose preamble named a device host is
 * bound to that device here (bind), as the inner connection is. Each is decided, audited (source `ssh`), recorded and
 * re-checked like any other; what is refused before a device is asked is audited here.
 */
import ssh2, { type Connection, type ServerChannel, type Session, type TcpipInfo } from 'ssh2';
import type { Logger } from 'pino';
import type { RemoteRequest } from '../../shared/resources.js';
import type { AccessService } from '../access/access.js';
import type { AuditService } from '../audit/service.js';
import type { Principal } from '../access/principal.js';
import type { Caller, RemoteSessions } from '../remote/sessions.js';
import { consoleCommandProblem, isTunnelHost } from '../remote/schemas.js';
import type { SshAuthority } from './authority.js';
import { DeviceSocket } from './device-socket.js';
import { RAW_SCRIPT, SshRelay } from './relay.js';
import { SftpBridge, type SftpStream } from './sftp.js';
import type { SshConnection } from './sign-in.js';

// ssh2 is CommonJS: under Node's own ESM loader (tsx, the built broker) only its default export is there.
const { Server } = ssh2;

/**
 * Channels one connection may hold open at once (sessions and forwardings): each may buffer up to
 * an SSH window (2 MiB) towards the device, so this bounds what one connection makes the broker hold.
 */
export const SSH_MAX_CHANNELS = 10;
const DEVICE_ID = /^[0-9a-f]{64}$/;
const MAX_DIMENSION = 1000;

export interface SshChannelDeps {
  logger: Logger;
  authority: Pick<SshAuthority, 'hostKeyFile'>;
  audit: Pick<AuditService, 'recordRefusedAttempt'>;
  sessions: Pick<RemoteSessions, 'authorizeAndOpen' | 'adopt' | 'finish'>;
  /** decides a second path of an sftp rename, beyond the one its copy session is opened for */
  access: Pick<AccessService, 'decide'>;
  /** The device a host name's first label names (its id, or the name of a device the user may reach). */
  findDevice(principal: Principal, label: string): Promise<string | undefined>;
}

/** What the gateway lends for an inner connection: its pre-auth count, and taking the connection on. */
export interface InnerConnections {
  admit(ip: string, close: () => void): (() => void) | undefined;
  accept(client: Connection, ip: string, leavePreauth: () => void, deviceId: string): void;
}

/** The channels of signed-in connections (one for the gateway). */
export class SshChannels {
  constructor(
    private readonly deps: SshChannelDeps,
    private readonly log: Logger,
    private readonly inner: InnerConnections,
  ) {}

  /**
   * A signed-in connection whose preamble named a host: bound to the device its first label names,
   * found as -J's hop finds it (the same lookup among the devices the user may reach); else refused
   * and audited as -J's hop is, and the connection opens nothing (not even as the gateway's own).
   */
  async bind(conn: SshConnection): Promise<void> {
    const host = conn.target;
    if (host === undefined || conn.deviceId) return;
    const label = host.split('.')[0];
    const deviceId = await this.device((conn.caller as Caller).principal, label);
    if (deviceId) conn.deviceId = deviceId;
    else {
      conn.unreachable = `no device named ${label} that you may reach`;
      await this.refuseAttempt(conn, 'tunnel', { host: host.slice(0, 300), port: 22 }, conn.unreachable);
    }
  }

  /** The device a host's first label names: its id, or the name of one device the user may reach. */
  private device(principal: Principal, label: string): Promise<string | undefined> {
    return DEVICE_ID.test(label) ? Promise.resolve(label) : this.deps.findDevice(principal, label);
  }

  /** Answers the connection's channel requests: sessions, forwardings, and refuses -R. */
  serve(conn: SshConnection, client: Connection): void {
    if (conn.target !== undefined && !conn.deviceId) return this.serveNothing(conn, client, conn.unreachable ?? 'no device named');
    client.on('session', (accept, reject) => this.session(conn, accept, reject));
    client.on('tcpip', (accept, reject, info) => void this.forward(conn, accept, reject, info));
    client.on('request', (_accept, reject, name) => {
      // -R: nothing on a device listens for the client.
      reject?.();
      if (name === 'tcpip-forward' || name === 'streamlocal-forward@openssh.com') void this.refuseRemoteForward(conn, name);
    });
  }

  /** A connection bound to no device (its refusal audited at bind): each session says why, nothing else opens. */
  private serveNothing(conn: SshConnection, client: Connection, why: string): void {
    client.on('session', (accept, reject) => {
      if (conn.channels >= SSH_MAX_CHANNELS) return reject();
      const session = accept();
      this.takeChannel(conn, session as unknown as { once(event: 'close', fn: () => void): unknown });
      for (const name of ['pty', 'window-change']) session.on(name, (ok: (() => void) | undefined) => ok?.());
      for (const name of ['shell', 'exec', 'subsystem']) session.on(name, (ok: () => ServerChannel) => failStream(ok(), why));
      for (const name of ['sftp', 'auth-agent', 'x11', 'env']) session.on(name, (_ok: unknown, no: (() => void) | undefined) => no?.());
    });
    client.on('tcpip', (_accept, reject) => reject());
    client.on('request', (_accept, reject) => reject?.());
  }

  /** An attempt the gateway refuses before any device is asked, audited as denied. */
  private refuseAttempt(conn: SshConnection, action: string, options: Record<string, unknown>, reason: string, deviceId = ''): Promise<void> {
    const { principal } = conn.caller as Caller;
    return this.deps.audit.recordRefusedAttempt({ principal, deviceId, action, options, reason, ip: conn.ip, source: 'ssh' });
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
        void this.refuseAttempt(conn, 'copy', { subsystem: 'sftp' }, 'no device named: connect to <device>.<fleet host> (fleet ssh-config)');
        return;
      }
      const caller = conn.caller as Caller;
      const deviceId = conn.deviceId;
      new SftpBridge(ok(), caller, deviceId, this.deps.sessions, {
        decide: (request) => this.deps.access.decide(caller.principal, 'remote-access:connect', deviceId, request),
        refuse: (options, reason) => this.refuseAttempt(conn, 'copy', options, reason, deviceId),
      }).start();
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
      await this.refuseAttempt(conn, 'console', { login: conn.login.slice(0, 64) }, 'no device named: connect to <device>.<fleet host> (fleet ssh-config)');
      failStream(
        stream,
        'This is the fleet SSH gateway: reach a device with ssh <login>@<device>.<fleet host> (fleet ssh-config writes the set-up), or ssh -J <gateway> <login>@<device>.<fleet host>.',
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
    // A command without a terminal runs with pipes where the agent can (ConsoleParams.pipes), else
    // in its pty, made raw by RAW_SCRIPT: the same argv serves both. An agent that knows
    // `commandLine` runs the line as sshd would instead (`<shell> -c <line>`), with no script around it.
    const params = { ...size, user: login, ...(argv ? { command: argv } : {}), ...(raw ? { pipes: true, commandLine: command } : {}) };
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
    // Only RAW_SCRIPT writes RAW_MARKER: an agent that ran the line itself sends none to wait for.
    const marker = raw && prepared.relayOptions.info.commandLine !== true;
    const relay = new SshRelay(stream, prepared.channel, { kind: 'console', size, raw, marker, recorder: prepared.recorder, sessionId: prepared.sessionId });
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
      deviceId = await this.device(caller.principal, label);
      if (!deviceId) {
        await this.refuseAttempt(conn, 'tunnel', target, `no device named ${label} that you may reach`);
        return reject();
      }
      if (port === 22) {
        const channel = accept();
        this.takeChannel(conn, channel);
        // The inner connection authenticates again (its own certificate check), bound to this device.
        const bound = deviceId;
        const release = this.inner.admit(conn.ip, () => channel.close());
        if (!release) return void channel.close();
        channel.once('close', release);
        const inner = new Server({ hostKeys: [this.deps.authority.hostKeyFile], ident: 'fleet' }, (client) =>
          this.inner.accept(client, conn.ip, release, bound),
        );
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
