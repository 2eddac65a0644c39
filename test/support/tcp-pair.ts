import net from 'node:net';

/**
 * A connected TCP pair on loopback: what `client` writes is read at `server` into `received`, and
 * every write the client hands to the kernel is counted in `calls` (1 for a single write, n for a
 * writev of n pieces).
 */
export async function tcpPair() {
  const listener = net.createServer();
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  const accepted = new Promise<net.Socket>((resolve) => listener.once('connection', resolve));
  const client = net.connect((listener.address() as net.AddressInfo).port, '127.0.0.1');
  await new Promise((resolve) => client.once('connect', resolve));
  const server = await accepted;
  const received: Buffer[] = [];
  server.on('data', (d: Buffer) => received.push(d));
  const calls: number[] = [];
  const raw = client as unknown as { _write: (...a: unknown[]) => void; _writev: (chunks: unknown[], cb: unknown) => void };
  const write = raw._write.bind(client);
  const writev = raw._writev.bind(client);
  raw._write = (...a: unknown[]) => (calls.push(1), write(...a));
  raw._writev = (chunks: unknown[], cb: unknown) => (calls.push(chunks.length), writev(chunks, cb));
  /** Resolves once `n` bytes in all have arrived at `server`. */
  const receivedBytes = async (n: number) => {
    while (received.reduce((sum, b) => sum + b.length, 0) < n) await new Promise((resolve) => server.once('data', resolve));
  };
  const close = () => {
    client.destroy();
    server.destroy();
    listener.close();
  };
  return { client, server, received, receivedBytes, calls, close };
}
