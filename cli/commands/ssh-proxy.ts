/**
 * `fleet ssh-proxy [--fdpass] <gateway host> <gateway port> <host>`: the ProxyCommand of the block
 * `fleet ssh-config` writes. It opens a plain TCP connection to the SSH gateway and sends the
 * preamble naming <host> (shared/ssh-config.ts); ssh's one connection is then bound to the device,
 * with no second SSH layer. It needs no sign-in of its own: the certificate ssh presents decides.
 *
 * With --fdpass (the block's `ProxyUseFdpass yes`) it hands ssh the connection itself and exits:
 * ssh then reads and writes the gateway's socket directly, with no process between them (this one
 * cost about as much CPU per MB as the broker, passing every byte twice through the kernel). Without
 * it, it joins stdin/stdout (ssh's end) and the connection, each way with backpressure, until both
 * ends are done (an older block, or an ssh run without ProxyUseFdpass).
 */
import childProcess from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import { sshPreamble } from '../../shared/ssh-config.js';
import { CliError } from '../errors.js';

export async function sshProxyCommand(gatewayHost: string, gatewayPort: string, host: string, options: { fdpass?: boolean } = {}): Promise<number> {
  const port = Number(gatewayPort);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new CliError(`ssh-proxy: ${gatewayPort} is not a port`, 255);
  const preamble = sshPreamble(host);
  if (!preamble) throw new CliError(`ssh-proxy: ${host.slice(0, 300)} is not a host name of a device`, 255);
  const socket = net.connect({ host: gatewayHost.replace(/^\[|\]$/g, ''), port });
  socket.setNoDelay(true);
  const unreachable = (err: Error) => new CliError(`cannot reach the SSH gateway at ${gatewayHost}:${port}: ${err.message}`, 255);
  if (options.fdpass) {
    // Never read here: every byte the gateway sends (its version line first) is ssh's to read.
    socket.pause();
    await new Promise<void>((resolve, reject) => {
      socket.once('error', (err) => reject(unreachable(err)));
      // The write's callback runs once the preamble is in the kernel's send buffer, after connect.
      socket.write(preamble, (err) => (err ? reject(unreachable(err)) : resolve()));
    });
    await passToSsh(socket);
    return 0;
  }
  // The preamble and ssh's version line leave together when ssh has written by then.
  socket.write(preamble);
  return new Promise<number>((resolve, reject) => {
    let connected = false;
    socket.once('connect', () => {
      connected = true;
      process.stdin.pipe(socket);
      socket.pipe(process.stdout);
    });
    socket.on('error', (err) => {
      if (!connected) reject(unreachable(err));
      else resolve(255);
    });
    // ssh closes its end of our stdout when it is done reading: nothing more to pass on.
    process.stdout.on('error', () => socket.destroy());
    socket.once('close', () => resolve(0));
  });
}

/**
 * Hands `socket` to ssh over stdout, as ProxyUseFdpass expects: ssh made stdout one end of a Unix
 * socket pair and reads one byte from it carrying the descriptor (SCM_RIGHTS). Node.js sends
 * descriptors only over its IPC channel, whose first message byte carries the descriptor the same
 * way: stdout is opened as that channel. Once sent, this process may exit (closing its copy of the
 * descriptor does not close ssh's connection). Fails when stdout is no Unix socket (ssh run without
 * ProxyUseFdpass).
 */
function passToSsh(socket: net.Socket): Promise<void> {
  const forkChild = (childProcess as unknown as { _forkChild?: (fd: number, serialization: string) => void })._forkChild;
  const notPassed = (why: string) =>
    new CliError(`ssh-proxy --fdpass: cannot hand the connection to ssh (${why}); it needs ssh's ProxyUseFdpass yes, as fleet ssh-config writes`, 255);
  if (typeof forkChild !== 'function') return Promise.reject(notPassed('this Node.js cannot pass descriptors'));
  // Checked first: Node.js reports a failed send of a descriptor to its callback as a success.
  if (!stdoutIsSocket()) return Promise.reject(notPassed('its standard output is not a socket'));
  if (socket.bytesRead > 0) return Promise.reject(notPassed('the gateway had been read from'));
  return new Promise<void>((resolve, reject) => {
    try {
      forkChild(1, 'json');
    } catch (err) {
      return reject(notPassed((err as Error).message));
    }
    if (!process.send) return reject(notPassed('no channel on its standard output'));
    process.send('fleet-ssh-proxy', socket, {}, (err: Error | null) => (err ? reject(notPassed(err.message)) : resolve()));
  });
}

function stdoutIsSocket(): boolean {
  try {
    return fs.fstatSync(1).isSocket();
  } catch {
    return false;
  }
}
