/**
 * `fleet ssh-proxy <gateway host> <gateway port> <host>`: the ProxyCommand of the block `fleet
 * ssh-config` writes. It opens a plain TCP connection to the SSH gateway, sends the preamble naming
 * <host> (shared/ssh-config.ts), then joins stdin/stdout (ssh's end) and the connection, each way
 * with backpressure, until both ends are done: ssh's one connection is bound to the device, with no
 * second SSH layer. It needs no sign-in of its own: the certificate ssh presents decides.
 */
import net from 'node:net';
import { sshPreamble } from '../../shared/ssh-config.js';
import { CliError } from '../errors.js';

export async function sshProxyCommand(gatewayHost: string, gatewayPort: string, host: string): Promise<number> {
  const port = Number(gatewayPort);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new CliError(`ssh-proxy: ${gatewayPort} is not a port`, 255);
  const preamble = sshPreamble(host);
  if (!preamble) throw new CliError(`ssh-proxy: ${host.slice(0, 300)} is not a host name of a device`, 255);
  const socket = net.connect({ host: gatewayHost.replace(/^\[|\]$/g, ''), port });
  socket.setNoDelay(true);
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
      if (!connected) reject(new CliError(`cannot reach the SSH gateway at ${gatewayHost}:${port}: ${err.message}`, 255));
      else resolve(255);
    });
    // ssh closes its end of our stdout when it is done reading: nothing more to pass on.
    process.stdout.on('error', () => socket.destroy());
    socket.once('close', () => resolve(0));
  });
}
