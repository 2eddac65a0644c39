import net, { type AddressInfo } from 'node:net';
import { expect, it } from 'vitest';
import { CONNECT_TIMEOUT_MS, dialer, HANDSHAKE_TIMEOUT_MS } from './dial.js';

it('gives a broker that took the connection far longer than reaching it takes', () => {
  expect(CONNECT_TIMEOUT_MS).toBeLessThanOrEqual(20_000);
  expect(HANDSHAKE_TIMEOUT_MS).toBeGreaterThanOrEqual(3 * CONNECT_TIMEOUT_MS);
});

it('tells when the connection is established, and not when it is refused', async () => {
  const server = net.createServer((s) => s.destroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  let connected = 0;
  const dial = dialer(false, () => connected++) as unknown as (o: net.NetConnectOpts) => net.Socket;
  const socket = dial({ host: '127.0.0.1', port });
  await new Promise((resolve) => socket.once('close', resolve));
  expect(connected).toBe(1);
  await new Promise((resolve) => server.close(resolve));
  const refused = dial({ host: '127.0.0.1', port });
  refused.on('error', () => {});
  await new Promise((resolve) => refused.once('close', resolve));
  expect(connected).toBe(1);
});
