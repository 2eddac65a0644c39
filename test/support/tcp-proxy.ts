/**
 * A TCP proxy a test controls, put between a broker and PostgreSQL to make database faults:
 * `refuse()` cuts every connection and refuses new ones (the database is down or unreachable),
 * `hang()` stops moving bytes both ways while keeping connections open (a partition: packets are
 * lost, nothing says so), `heal()` moves them again (held bytes included) and accepts again;
 * `heal({ lose: true })` accepts again but leaves the connections of the partition silent for good
 * (their state was lost on the way: what they send is dropped, nothing comes back, nothing closes
 * them), so only a timeout of the client's own gets it out of them.
 */
import net from 'node:net';

export type ProxyMode = 'open' | 'refuse' | 'hang';

export interface TcpProxy {
  port: number;
  /** The target URL with its host and port replaced by the proxy's. */
  url(target: string): string;
  readonly mode: ProxyMode;
  /** Connections refused so far. */
  readonly refused: number;
  /** Chunks sent by clients (queries, connection starts) held since the last `hang()`. */
  readonly held: number;
  refuse(): void;
  hang(): void;
  heal(options?: { lose?: boolean }): void;
  close(): Promise<void>;
}

interface Pair {
  client: net.Socket;
  upstream?: net.Socket;
  /** bytes held while hanging, per direction */
  toUpstream: Buffer[];
  toClient: Buffer[];
  /** lost in a partition: silent for good */
  lost?: boolean;
}

export async function startTcpProxy(targetHost: string, targetPort: number): Promise<TcpProxy> {
  let mode: ProxyMode = 'open';
  let refused = 0;
  let held = 0;
  const pairs = new Set<Pair>();

  const cut = (pair: Pair) => {
    pairs.delete(pair);
    pair.client.destroy();
    pair.upstream?.destroy();
  };

  const connectUpstream = (pair: Pair) => {
    const upstream = net.connect(targetPort, targetHost);
    pair.upstream = upstream;
    upstream.on('data', (d: Buffer) => {
      if (pair.lost) return;
      if (mode === 'hang') pair.toClient.push(d);
      else pair.client.write(d);
    });
    upstream.on('error', () => cut(pair));
    upstream.on('close', () => cut(pair));
    for (const d of pair.toUpstream.splice(0)) upstream.write(d);
  };

  const server = net.createServer((client) => {
    if (mode === 'refuse') {
      refused += 1;
      return void client.destroy();
    }
    const pair: Pair = { client, toUpstream: [], toClient: [] };
    pairs.add(pair);
    client.on('data', (d: Buffer) => {
      if (pair.lost) return;
      if (mode === 'hang' || !pair.upstream) {
        pair.toUpstream.push(d);
        if (mode === 'hang') held += 1;
      } else pair.upstream.write(d);
    });
    client.on('error', () => cut(pair));
    client.on('close', () => cut(pair));
    // A connection made while hanging gets no answer until healed (a SYN lost in the partition is
    // seen here as an accepted connection that stays silent).
    if (mode === 'open') connectUpstream(pair);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as net.AddressInfo).port;

  return {
    port,
    url(target: string) {
      const u = new URL(target);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    get mode() {
      return mode;
    },
    get refused() {
      return refused;
    },
    get held() {
      return held;
    },
    refuse() {
      mode = 'refuse';
      for (const pair of [...pairs]) cut(pair);
    },
    hang() {
      mode = 'hang';
      held = 0;
    },
    heal(options: { lose?: boolean } = {}) {
      mode = 'open';
      for (const pair of [...pairs]) {
        if (options.lose || pair.lost) {
          // The database side is gone (closed there); the client is never told.
          pair.lost = true;
          pair.toUpstream.length = 0;
          pair.toClient.length = 0;
          pair.upstream
            ?.removeAllListeners('close')
            .removeAllListeners('error')
            .on('error', () => {});
          pair.upstream?.destroy();
          continue;
        }
        if (!pair.upstream) connectUpstream(pair);
        else for (const d of pair.toUpstream.splice(0)) pair.upstream.write(d);
        for (const d of pair.toClient.splice(0)) pair.client.write(d);
      }
    },
    async close() {
      for (const pair of [...pairs]) cut(pair);
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
