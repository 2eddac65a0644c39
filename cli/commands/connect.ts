import dgram from 'node:dgram';
import net from 'node:net';
import type { Writable } from 'node:stream';
import type { ListPage, Portmap, RemoteCapabilities } from '../../shared/api-types.js';
import type { ApiClient } from '../api.js';
import { resolveDevice } from '../devices.js';
import { CliError } from '../errors.js';
import { RemoteSession, type ServerFrame } from '../remote.js';
import { escapeForTerminal } from '../../shared/text.js';
import { ReadBuffers } from '../../shared/read-buffers.js';
import { corkForTurn } from '../../shared/turn-cork.js';
import { prompt } from '../prompt.js';

export interface ForwardSpec {
  /** undefined for stdio */
  localHost?: string;
  localPort: number | 'stdio';
  remoteHost: string;
  remotePort: number;
  proto: 'tcp' | 'udp';
}

const UDP_IDLE_MS = 60_000;
/**
 * The accepted connection in a socket that reads into reused buffers (`onread`), which `net.Server`
 * does not offer: the connection's handle moves to a new socket before anything was read (the
 * server pauses new connections), and the accepted socket, left without it, is destroyed, so the
 * server stops counting it. Answers undefined (the accepted socket is then read as usual) if the
 * handle is not where this expects it.
 */
function readIntoBuffers(accepted: net.Socket, buffers: ReadBuffers, onRead: (n: number, buf: Buffer) => boolean): net.Socket | undefined {
  const internals = accepted as unknown as { _handle?: { readStart?: unknown } | null };
  const handle = internals._handle;
  if (!handle || typeof handle.readStart !== 'function' || accepted.readableFlowing !== false) return undefined;
  internals._handle = null;
  accepted.destroy();
  return new net.Socket({
    handle: handle as never,
    allowHalfOpen: true,
    readable: true,
    writable: true,
    pauseOnCreate: true,
    onread: { buffer: buffers.next, callback: onRead },
  } as net.SocketConstructorOpts);
}

/** Local port 0 picks a free port (printed at start). */
function portOf(text: string, what: 'local port' | 'remote port', spec: string): number {
  const lowest = what === 'local port' ? 0 : 1;
  if (!/^\d{1,5}$/.test(text) || Number(text) < lowest || Number(text) > 65535)
    throw new CliError(`-t ${spec}: ${what} "${text}" is not a port (${lowest}-65535).`);
  return Number(text);
}

/** `[lhost:]lport:rhost:rport[/udp]`; `stdio` as lport; IPv6 hosts in brackets. */
export function parseForward(spec: string): ForwardSpec {
  let body = spec;
  let proto: 'tcp' | 'udp' = 'tcp';
  const slash = /\/(tcp|udp)$/i.exec(body);
  if (slash) {
    proto = slash[1].toLowerCase() as 'tcp' | 'udp';
    body = body.slice(0, -slash[0].length);
  }
  const parts = body.match(/\[[^\]]*\]|[^:]+/g) ?? [];
  if (body.includes('::') && !body.includes('[')) throw new CliError(`-t ${spec}: put IPv6 addresses in brackets, e.g. [::1]:8080:localhost:80.`);
  if (parts.length !== 3 && parts.length !== 4) throw new CliError(`-t ${spec}: expected [lhost:]lport:rhost:rport[/udp], e.g. 8080:localhost:80.`);
  const [localHost, localPortText, remoteHost, remotePortText] = parts.length === 4 ? parts : [undefined, ...parts];
  const unbracket = (h: string) => h.replace(/^\[(.*)\]$/, '$1');
  const localPort = localPortText === 'stdio' ? 'stdio' : portOf(localPortText as string, 'local port', spec);
  if (localPort === 'stdio' && localHost !== undefined) throw new CliError(`-t ${spec}: stdio takes no local host.`);
  if (localPort === 'stdio' && proto === 'udp') throw new CliError(`-t ${spec}: stdio forwards TCP only.`);
  return {
    localHost: localHost === undefined ? (localPort === 'stdio' ? undefined : '127.0.0.1') : unbracket(localHost),
    localPort,
    remoteHost: unbracket(remoteHost as string),
    remotePort: portOf(remotePortText as string, 'remote port', spec),
    proto,
  };
}

/** What of a session a bridge uses. */
export type BridgedSession = Pick<RemoteSession, 'sendOwned' | 'control' | 'on' | 'once' | 'pause' | 'resume' | 'readPieces'>;

/**
 * What pauses `source` until `sink` says 'drain', once however many writes find `sink` full
 * meanwhile: one read from the broker may bring many pieces after the output said it is full, and
 * each would otherwise add its own 'drain' listener.
 */
function pauseUntilDrain(source: { pause(): unknown; resume(): unknown }, sink: { once(event: 'drain', listener: () => void): unknown }): () => void {
  let waiting = false;
  return () => {
    if (waiting) return;
    waiting = true;
    source.pause();
    sink.once('drain', () => {
      waiting = false;
      source.resume();
    });
  };
}

/** Sends one read of the input; false when the session is full (the input is then held until it drains). */
export type SendInput = (data: Buffer, done?: () => void) => boolean;

/**
 * @internal exported for its tests: both directions of one TCP stream between a local socket-like
 * pair and a tunnel session. Answers what sends the input's reads: an input that `readsItself`
 * calls it from its `onread`, the others' 'data' are sent through it here.
 */
export function bridge(
  session: BridgedSession,
  input: NodeJS.ReadableStream & { pause(): void; resume(): void },
  output: Writable,
  onDone: (error?: string) => void,
  /** The input's reads are sent by its own `onread` (readIntoBuffers), not through 'data'. */
  readsItself = false,
): SendInput {
  // The pieces that one read from the broker brings (the ends and starts of frames) leave in one write.
  const holdTurn = corkForTurn(output);
  let inputEnded = false;
  let remoteEnded = false;
  const holdInput = pauseUntilDrain(input, session);
  const holdSession = pauseUntilDrain(session, output);
  // Each read is a buffer used once (fresh, or reused only once `done`): masked in place, with no copy.
  const send: SendInput = (data, done) => {
    if (session.sendOwned(data, done)) return true;
    holdInput();
    return false;
  };
  if (!readsItself) input.on('data', (data: Buffer) => void send(data));
  input.on('end', () => {
    inputEnded = true;
    session.control({ type: 'eof' });
  });
  // `done` (a view of a reused read buffer): the buffer may be read into again once this write is flushed.
  session.on('data', (data: Buffer, done?: () => void) => {
    holdTurn();
    if (!output.write(data, done)) holdSession();
  });
  session.on('frame', (frame: ServerFrame) => {
    if (frame.type === 'eof') {
      remoteEnded = true;
      output.end();
    }
  });
  session.on('close', (code: number, reason: string, error?: { message: string }) => {
    if (error) return onDone(error.message);
    if (code !== 1000 && !(inputEnded && remoteEnded)) return onDone(reason || `tunnel closed (${code})`);
    onDone();
  });
  // The device's bytes are handed on as they arrive, not re-assembled per frame.
  session.readPieces().start();
  return send;
}

async function openTunnel(client: Pick<ApiClient, 'url' | 'token'>, deviceId: string, f: ForwardSpec): Promise<RemoteSession> {
  return RemoteSession.open(client, 'tunnel', { device_id: deviceId, proto: f.proto, port: f.remotePort, dst: f.remoteHost });
}

function describe(f: ForwardSpec): string {
  return `${f.remoteHost}:${f.remotePort}${f.proto === 'udp' ? '/udp' : ''}`;
}

/** @internal exported for its tests */
export function listenTcp(client: Pick<ApiClient, 'url' | 'token'>, deviceId: string, deviceName: string, f: ForwardSpec): Promise<net.Server> {
  const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (accepted) => {
    const buffers = new ReadBuffers();
    let send: SendInput | undefined;
    // Each read is masked where it lies and sent; its buffer is read into again once the socket is done with it.
    // A full session pauses the socket until it drains (the bridge's hold), and false stops this read loop.
    const fromLocal = (n: number, buf: Buffer): boolean => {
      if (!send) return false;
      buffers.read(n, buf);
      return send(buf.subarray(0, n), () => buffers.give(buf));
    };
    const reading = readIntoBuffers(accepted, buffers, fromLocal);
    const socket = reading ?? accepted;
    socket.setNoDelay(true);
    socket.on('error', () => {});
    // Its first read buffer goes to the next local connection (a browser through the tunnel opens many).
    buffers.closeWith(socket);
    openTunnel(client, deviceId, f).then(
      (opened) => {
        send = bridge(
          opened,
          socket,
          socket,
          (error) => {
            if (error) {
              process.stderr.write(`fleet: tunnel to ${describe(f)}: ${escapeForTerminal(String(error))}\n`);
              socket.destroy();
            }
          },
          reading !== undefined,
        );
        socket.on('close', () => opened.close());
        socket.resume();
      },
      (err: Error) => {
        process.stderr.write(`fleet: tunnel to ${describe(f)}: ${escapeForTerminal(err.message)}\n`);
        socket.destroy();
      },
    );
  });
  return new Promise((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(new CliError(`Cannot listen on ${f.localHost}:${f.localPort}: ${err.code ?? err.message}.`)));
    server.listen(f.localPort as number, f.localHost, () => {
      const address = server.address() as net.AddressInfo;
      process.stderr.write(`Forwarding ${f.localHost}:${address.port} to ${describe(f)} on ${deviceName}\n`);
      resolve(server);
    });
  });
}

/** One tunnel session per local peer address; idle peers are let go after a minute. */
function listenUdp(client: ApiClient, deviceId: string, deviceName: string, f: ForwardSpec): Promise<dgram.Socket> {
  const socket = dgram.createSocket(net.isIPv6(f.localHost ?? '') ? 'udp6' : 'udp4');
  const peers = new Map<string, { session: Promise<RemoteSession | undefined>; timer: NodeJS.Timeout }>();
  socket.on('message', (datagram, rinfo) => {
    const key = `${rinfo.address}:${rinfo.port}`;
    let peer = peers.get(key);
    if (!peer) {
      const session = openTunnel(client, deviceId, f).then(
        (s) => {
          s.on('data', (reply: Buffer) => socket.send(reply, rinfo.port, rinfo.address));
          s.on('close', () => peers.delete(key));
          s.start();
          return s;
        },
        (err: Error) => {
          process.stderr.write(`fleet: udp tunnel to ${describe(f)}: ${escapeForTerminal(err.message)}\n`);
          peers.delete(key);
          return undefined;
        },
      );
      peer = { session, timer: setTimeout(() => {}, 0) };
      peers.set(key, peer);
    }
    clearTimeout(peer.timer);
    const current = peer;
    current.timer = setTimeout(() => {
      peers.delete(key);
      void current.session.then((s) => s?.close());
    }, UDP_IDLE_MS);
    void current.session.then((s) => s?.send(datagram));
  });
  return new Promise((resolve, reject) => {
    socket.once('error', (err: NodeJS.ErrnoException) =>
      reject(new CliError(`Cannot listen on ${f.localHost}:${f.localPort}/udp: ${err.code ?? err.message}.`)),
    );
    socket.bind(f.localPort as number, f.localHost, () => {
      process.stderr.write(`Forwarding ${f.localHost}:${socket.address().port}/udp to ${describe(f)} on ${deviceName}\n`);
      resolve(socket);
    });
  });
}

/** What a port preset is picked and forwarded by (the API's Portmap: a change of its shape breaks this). */
type Preset = Pick<Portmap, 'name' | 'proto' | 'port' | 'dst'>;

/** The device's port presets: picked by --preset NAME, or by number from a list (a line of stdin when it is not a terminal). */
async function presetForward(client: ApiClient, device: { id: string; name: string }, wanted?: string): Promise<ForwardSpec> {
  const { items } = await client.call<ListPage<Portmap>>('GET', `/service-connect/portmap?device_id=${device.id}&items_per_page=1000`);
  const show = (p: Preset) => `${escapeForTerminal(p.name)} (${p.dst}:${p.port}${p.proto === 'udp' ? '/udp' : ''})`;
  const forward = (p: Preset): ForwardSpec => ({ localHost: '127.0.0.1', localPort: 0, remoteHost: p.dst, remotePort: p.port, proto: p.proto });
  if (wanted !== undefined) {
    const found = items.filter((p) => p.name.toLowerCase() === wanted.toLowerCase());
    if (found.length === 1) return forward(found[0]);
    throw new CliError(
      `No port preset "${wanted}" for ${device.name}${items.length ? `; there are: ${items.map((p) => p.name).join(', ')}` : ''}. Give -t [lhost:]lport:rhost:rport instead.`,
    );
  }
  if (items.length === 0) throw new CliError(`${device.name} has no port presets: give -t [lhost:]lport:rhost:rport[/udp], e.g. -t 8080:localhost:80.`);
  process.stderr.write(`Port presets of ${escapeForTerminal(device.name)}:\n${items.map((p, i) => `  ${i + 1}) ${show(p)}\n`).join('')}`);
  const answer = await prompt(`Forward which (1-${items.length})? `, { echo: true, what: 'preset number' });
  const chosen = /^\d+$/.test(answer) ? items[Number(answer) - 1] : items.find((p) => p.name.toLowerCase() === answer.toLowerCase());
  if (!chosen) throw new CliError(`"${answer}" is not one of the presets (1-${items.length}).`);
  return forward(chosen);
}

/** The grant a forward needs, as a resource of remote-access:connect names it. */
function grantFor(f: ForwardSpec): string {
  return `tunnel(proto=${f.proto};port=${f.remotePort};dst=${f.remoteHost})`;
}

/**
 * Refused before any local port opens: no tunnel grant on the device, a forward no grant allows
 * (its port, host or protocol outside every tunnel grant; the broker decides), or an offline device.
 */
async function tunnelsPossible(client: ApiClient, device: { id: string; name: string }, forwards: ForwardSpec[]): Promise<void> {
  const name = device.name; // fail() escapes the message
  for (const f of forwards) {
    const query = new URLSearchParams({ proto: f.proto, port: String(f.remotePort), dst: f.remoteHost });
    const access = await client.call<RemoteCapabilities>('GET', `/remote/access/${device.id}?${query}`);
    if (!access.tunnel) throw new CliError(`Not allowed: no grant of remote-access:connect allows tunnels on ${name}.`);
    // A broker that does not answer the question (older) leaves it to the session, as before.
    if (access.tunnel_allowed === false)
      throw new CliError(
        `Not allowed: no grant of remote-access:connect on ${name} allows ${grantFor(f)}; ask an administrator for it, or forward a port and host your grants allow.`,
      );
    if (!access.connected) throw new CliError(`${name} is not connected to the broker; try again when it is online.`);
  }
}

/**
 * `fleet connect <device> -t spec...`: local listeners, one tunnel session per accepted TCP
 * connection (or UDP peer); `stdio` bridges stdin/stdout to one connection, for
 * `ssh -o ProxyCommand="fleet connect <device> -t stdio:localhost:22"`.
 */
export async function connectCommand(client: ApiClient, deviceArg: string, specs: string[], options: { preset?: string } = {}): Promise<number> {
  if (specs.length > 0 && options.preset !== undefined) throw new CliError('Give either -t or --preset, not both.');
  const given = specs.map(parseForward);
  const device = await resolveDevice(client, deviceArg);
  const forwards = given.length > 0 ? given : [await presetForward(client, device, options.preset)];
  const stdio = forwards.filter((f) => f.localPort === 'stdio');
  if (stdio.length > 0 && forwards.length > 1) throw new CliError('-t stdio:... cannot be combined with other forwards.');
  // Refused before any local port opens: an offline device, or no grant for one of the forwards.
  if (stdio.length === 0) await tunnelsPossible(client, device, forwards);

  if (stdio.length === 1) {
    const session = await openTunnel(client, device.id, stdio[0]);
    return new Promise<number>((resolve, reject) => {
      bridge(session, process.stdin, process.stdout, (error) => (error ? reject(new CliError(error)) : resolve(0)));
    });
  }

  const servers: (net.Server | dgram.Socket)[] = [];
  try {
    for (const f of forwards)
      servers.push(
        f.proto === 'udp'
          ? await listenUdp(client, device.id, escapeForTerminal(device.name), f)
          : await listenTcp(client, device.id, escapeForTerminal(device.name), f),
      );
  } catch (err) {
    for (const s of servers) s.close();
    throw err;
  }
  process.stderr.write('Press Ctrl-C to stop.\n');
  return new Promise<number>((resolve) => {
    const stop = () => {
      for (const s of servers) s.close();
      resolve(0);
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
  });
}
