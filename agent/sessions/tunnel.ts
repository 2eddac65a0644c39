import dgram from 'node:dgram';
import dns from 'node:dns/promises';
import net from 'node:net';
import { AgentRefusal } from '../../shared/codes.js';
import { handOver, type Channel } from '../../shared/mux.js';
import type { TunnelParams } from '../../shared/protocol.js';
import { ReadBuffers } from '../../shared/read-buffers.js';
import { corkForTurn } from '../../shared/turn-cork.js';
import type { SessionContext } from './context.js';

const CONNECT_TIMEOUT_MS = 10_000;
/** Datagrams waiting for channel credit beyond this are dropped, as a congested UDP path would. */
const UDP_BACKLOG_BYTES = 1024 * 1024;

function validTarget(params: TunnelParams): void {
  if (!Number.isInteger(params.port) || params.port < 1 || params.port > 65535)
    throw new AgentRefusal('invalid_request', `Port ${String(params.port)} is not a valid port.`);
  if (typeof params.dst !== 'string' || params.dst.length === 0 || params.dst.length > 253)
    throw new AgentRefusal('invalid_request', 'The destination host is missing or too long.');
}

/** Host names in brackets are IPv6 literals; the socket wants them bare. */
function bareHost(dst: string): string {
  return dst.replace(/^\[(.*)\]$/, '$1');
}

/**
 * One TCP connection to dst:port as seen from the device, both ways. Each direction carries the
 * backpressure (a slow reader on either side slows the other) and the half-close: the end of one
 * direction ends that direction only. From the target, reads go into reused buffers (ReadBuffers)
 * and reading pauses while the channel is above its high-water mark; towards it, each chunk is
 * written as it comes, the channel paused while the socket is above its own (as `pipe` does).
 */
export async function openTcpTunnel(channel: Channel, params: TunnelParams, ctx: SessionContext): Promise<Record<string, unknown>> {
  validTarget(params);
  const host = bareHost(params.dst);
  const buffers = new ReadBuffers();
  const fromTarget = (n: number, buf: Buffer): boolean => {
    if (channel.destroyed || channel.writableEnded) return false;
    buffers.read(n, buf);
    // Handed over: the frames may be masked in the buffer itself, which is read into again only once the write is done.
    if (channel.write(handOver(buf.subarray(0, n)), () => buffers.give(buf))) return true;
    channel.once('drain', () => socket.resume());
    return false; // pauses the socket
  };
  const socket = net.connect({
    host,
    port: params.port,
    allowHalfOpen: true,
    noDelay: true,
    onread: { buffer: buffers.next, callback: fromTarget },
  });
  // Its handle reads no more: the buffer it held for its next read goes to the next tunnels' first reads.
  buffers.closeWith(socket);
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('timed out')), CONNECT_TIMEOUT_MS);
      socket.once('connect', () => {
        clearTimeout(timer);
        resolve();
      });
      socket.once('error', (err: NodeJS.ErrnoException) => {
        clearTimeout(timer);
        reject(err);
      });
    });
  } catch (err) {
    socket.destroy();
    const e = err as NodeJS.ErrnoException;
    throw new AgentRefusal('io_error', `Cannot connect to ${params.dst}:${params.port} from the device: ${e.code ?? e.message}.`);
  }
  ctx.log('tunnel opened', { ch: channel.id, dst: params.dst, port: params.port });

  socket.on('error', (err) => channel.destroy(err));
  socket.on('end', () => {
    if (!channel.destroyed) channel.end();
  });
  // What arrives in one turn (the pieces of one frame, several small frames) leaves in one write.
  // Each chunk may be a view of the link's reused read (Channel takeLeases): given back once written.
  const holdTurn = corkForTurn(socket);
  channel.takeLeases();
  channel.on('data', (chunk: Buffer) => {
    holdTurn();
    if (!socket.write(chunk, channel.leaseOf(chunk))) channel.pause();
  });
  socket.on('drain', () => channel.resume());
  channel.on('end', () => socket.end());
  channel.on('close', () => {
    // A normal end of both directions lets the socket finish writing; an abort cuts it.
    if (!channel.readableEnded || channel.errored) socket.destroy();
  });
  return { local: `${socket.localAddress}:${socket.localPort}` };
}

/**
 * A connected UDP socket: one channel chunk is one datagram each way. Datagrams arriving faster
 * than the broker takes them are dropped past a bounded backlog.
 */
export async function openUdpTunnel(channel: Channel, params: TunnelParams, ctx: SessionContext): Promise<Record<string, unknown>> {
  validTarget(params);
  let address: { address: string; family: number };
  try {
    address = await dns.lookup(bareHost(params.dst));
  } catch (err) {
    throw new AgentRefusal('io_error', `Cannot resolve ${params.dst} on the device: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}.`);
  }
  const socket = dgram.createSocket(address.family === 6 ? 'udp6' : 'udp4');
  try {
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.connect(params.port, address.address, () => {
        socket.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    socket.close();
    throw new AgentRefusal(
      'io_error',
      `Cannot reach ${params.dst}:${params.port} (udp) from the device: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}.`,
    );
  }
  ctx.log('udp tunnel opened', { ch: channel.id, dst: params.dst, port: params.port });

  let closed = false;
  const close = () => {
    if (closed) return;
    closed = true;
    socket.close();
  };
  // ICMP "port unreachable" and the like surface as errors; UDP carries on regardless.
  socket.on('error', () => {});
  socket.on('message', (datagram) => {
    if (channel.destroyed || channel.writableEnded) return;
    if (channel.writableLength > UDP_BACKLOG_BYTES) return;
    channel.write(datagram);
  });
  channel.on('data', (datagram: Buffer) => {
    if (!closed) socket.send(datagram, () => {});
  });
  channel.on('end', () => {
    close();
    channel.end();
  });
  channel.on('close', close);
  return {};
}
