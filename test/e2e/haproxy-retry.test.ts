/**
 * deploy/haproxy.cfg at failover: a broker that takes a request and dies before answering (here a
 * server that passes the health check and closes every other connection without a word). A read
 * (GET) is sent again to another broker and answered; a POST, which that broker may have carried
 * out, is never sent twice (the client gets the failure and decides).
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../support/agent.js';
import { startHaproxy } from '../support/haproxy.js';

let haproxy: ChildProcess | undefined;
let log: string[] = [];
let lb: string;
let work: string;
const servers: http.Server[] = [];
/** POSTs the healthy server carried out */
let posts = 0;

async function listen(server: http.Server): Promise<number> {
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as net.AddressInfo).port;
}

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-haproxy-retry-'));
  const healthy = await listen(
    http.createServer((req, res) => {
      if (req.method === 'POST') posts += 1;
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ ok: true }));
      });
    }),
  );
  // Alive for the health check, dead for everything else: closes without answering.
  const dying = await listen(
    http.createServer((req, res) => {
      if (req.url === '/api/v2/health') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"status":"ok"}');
        return;
      }
      req.socket.destroy();
    }),
  );
  const balancer = await startHaproxy(work, [`127.0.0.1:${dying}`, `127.0.0.1:${healthy}`, `127.0.0.1:${dying}`], { FLEET_MAXCONN: '200' });
  ({ url: lb, process: haproxy } = balancer);
  log = balancer.log;
  // HAProxy answers (every server passes its health check, the dying ones too).
  await eventually(
    () =>
      fetch(`${lb}/api/v2/health`).then(
        (r) => r.status === 200,
        () => false,
      ),
    20_000,
    'HAProxy',
  );
}, 60_000);

afterAll(async () => {
  if (haproxy && haproxy.exitCode === null) {
    haproxy.kill('SIGTERM');
    await new Promise((resolve) => haproxy?.once('exit', resolve));
  }
  for (const s of servers) {
    s.closeAllConnections();
    await new Promise((resolve) => s.close(resolve));
  }
  fs.rmSync(work, { recursive: true, force: true });
});

describe('HAProxy in front of a broker that dies mid-request', () => {
  it('reads are sent again to another broker and answered', async () => {
    // Two of three servers drop every request: without retries most of these fail.
    for (let i = 0; i < 12; i++) {
      const r = await fetch(`${lb}/api/v2/devices?i=${i}`, { headers: { connection: 'close' } });
      expect(r.status, log.join('').slice(-2000)).toBe(200);
      expect(await r.json()).toEqual({ ok: true });
    }
  });

  it('a POST is not sent twice: one that reached a dying broker fails for the client', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await fetch(`${lb}/api/v2/commit?i=${i}`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json', connection: 'close' } });
      statuses.push(r.status);
      await r.arrayBuffer();
    }
    // Those that failed were not carried out elsewhere: the healthy server counted only the ones answered 200.
    expect(statuses.filter((s) => s === 200).length).toBe(posts);
    expect(statuses.some((s) => s !== 200)).toBe(true);
  });
});
