/**
 * How a connection attempt that never reached the welcome ends, as the reconnect loop reads it
 * (backoff.ts: Reconnect): nothing listening (refused, or a proxy whose broker is away) is `down`
 * and tried again within seconds; a broker that answered, refused for load or dropped the
 * connection is not, and its Retry-After is kept. And how long it waits: reaching the broker is
 * bounded apart from the handshake, and a broker that took the connection is waited for longer.
 */
import fs from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pino from 'pino';
import { afterEach, expect, it } from 'vitest';
import { BrokerEndpoint } from './broker-client.js';
import { runConnection, type ConnectionEnd } from './connection.js';
import { StateDir } from './identity.js';

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const c of cleanups.splice(0).reverse()) c();
});

function attempt(url: string, timeouts?: { connectMs: number; handshakeMs: number }): Promise<ConnectionEnd> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-conn-end-'));
  cleanups.push(() => fs.rmSync(dir, { recursive: true, force: true }));
  const controller = new AbortController();
  cleanups.push(() => controller.abort());
  return runConnection({
    endpoint: new BrokerEndpoint(url),
    identity: new StateDir(dir).identity(),
    version: 'test',
    log: pino({ level: 'silent' }),
    sessions: { stateDir: dir, log: () => {} },
    inventory: async () => ({}),
    inventoryIntervalMs: 3_600_000,
    signal: controller.signal,
    ...(timeouts ? { timeouts } : {}),
  });
}

/** An HTTP server answering every upgrade with `status` and these headers. */
async function answering(status: number, headers: Record<string, string> = {}): Promise<string> {
  const server = http.createServer();
  server.on('upgrade', (_req, socket) => {
    const lines = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`);
    socket.end(`HTTP/1.1 ${status} ${http.STATUS_CODES[status]}\r\n${lines.join('')}Content-Length: 0\r\nConnection: close\r\n\r\n`);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => server.close());
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A port nothing listens on (taken, then let go). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

it('is down when nothing listens (connection refused)', async () => {
  const end = await attempt(`http://127.0.0.1:${await closedPort()}`);
  expect(end).toMatchObject({ kind: 'closed', welcomed: false, down: true });
});

it('is down when a proxy answers that the broker behind it is away (502, 504, 503 without Retry-After)', async () => {
  for (const status of [502, 504, 503]) {
    const end = await attempt(await answering(status));
    expect(end, `HTTP ${status}`).toMatchObject({ kind: 'closed', down: true });
    expect(end).not.toHaveProperty('retryAfterMs');
  }
});

it('is not down when the broker refused for load: its Retry-After guides the wait', async () => {
  const end = await attempt(await answering(503, { 'Retry-After': '7' }));
  expect(end).toMatchObject({ kind: 'closed', retryAfterMs: 7000 });
  expect(end).not.toHaveProperty('down');
});

it('is not down when something listened and dropped the connection, or refused the upgrade otherwise', async () => {
  const server = net.createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => server.close());
  const dropped = await attempt(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  expect(dropped).toMatchObject({ kind: 'closed', welcomed: false });
  expect(dropped).not.toHaveProperty('down');
  for (const status of [400, 403, 500]) expect(await attempt(await answering(status)), `HTTP ${status}`).not.toHaveProperty('down');
});

it('waits past the connect bound for a broker that took the connection and answers late (its accept queue in a storm)', async () => {
  const server = http.createServer();
  server.on('upgrade', (_req, socket) => {
    // Answered well after the bound on reaching the broker (the agent would have given up before).
    setTimeout(() => socket.end('HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\nContent-Length: 0\r\nConnection: close\r\n\r\n'), 1000);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => server.close());
  const end = await attempt(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { connectMs: 100, handshakeMs: 30_000 });
  expect(end).toMatchObject({ kind: 'closed', retryAfterMs: 3000 });
  expect(end).not.toHaveProperty('error', 'the broker could not be reached in time');
});

it('still gives up on a broker that took the connection and never answers, at the handshake bound', async () => {
  const server = net.createServer(() => {});
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(() => server.close());
  const end = await attempt(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { connectMs: 100, handshakeMs: 500 });
  expect(end).toMatchObject({ kind: 'closed', welcomed: false });
  expect(end).not.toHaveProperty('down');
  expect((end as { error?: string }).error).toMatch(/in time|timed out/);
});
