/**
 * How long an agent waits for the broker while connecting, in two parts. Reaching it (TCP, and TLS
 * over https) is bounded by CONNECT_TIMEOUT_MS: a broker that is gone does not answer that far. Once
 * connected, the handshake (upgrade, challenge, welcome) may take up to HANDSHAKE_TIMEOUT_MS: the
 * broker's kernel took the connection, and in a reconnect storm it waits in the broker's accept
 * queue until the broker comes to it. An agent that gave up there would cost the broker that
 * connection anyway (accepted and answered later, to nobody) and its next attempt besides.
 */
import net from 'node:net';
import tls from 'node:tls';

/** The connection to the broker (TCP, TLS) must be established within this time. */
export const CONNECT_TIMEOUT_MS = 20_000;
/** The whole handshake, the connection included, must finish within this time. */
export const HANDSHAKE_TIMEOUT_MS = 90_000;

type ConnectOptions = net.NetConnectOpts & tls.ConnectionOptions & { socketPath?: string };

/**
 * The socket of a WebSocket client (ws's `createConnection`), opened as ws opens it, calling
 * `connected` once it is established (after TLS for `wss:`).
 */
export function dialer(secure: boolean, connected: () => void): typeof net.createConnection {
  // ws calls it with one options object (its own netConnect and tlsConnect take no other form).
  const dial = (options: ConnectOptions): net.Socket => {
    let socket: net.Socket;
    if (secure) {
      const servername = options.servername || options.servername === '' ? options.servername : net.isIP(options.host ?? '') ? '' : options.host;
      socket = tls.connect({ ...options, path: undefined, servername } as tls.ConnectionOptions);
    } else {
      socket = net.connect({ ...options, path: options.socketPath } as net.NetConnectOpts);
    }
    socket.once(secure ? 'secureConnect' : 'connect', connected);
    return socket;
  };
  return dial as typeof net.createConnection;
}
