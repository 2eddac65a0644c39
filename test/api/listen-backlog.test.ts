/**
 * The broker's listening socket takes a reconnect storm's connections into the kernel's accept queue
 * instead of dropping their SYNs: its backlog is LISTEN_BACKLOG, as far as the kernel allows. `ss`
 * shows a listening socket's backlog in its Send-Q column.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { LISTEN_BACKLOG } from '../../broker/server.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
beforeAll(async () => {
  t = await startTestBroker();
});
afterAll(async () => {
  await t?.close();
});

it('listens with a backlog of LISTEN_BACKLOG (capped by the kernel), not Node’s default of 511', () => {
  const port = new URL(t.url).port;
  const line =
    execFileSync('ss', ['-Hltn', `sport = :${port}`], { encoding: 'utf8' })
      .trim()
      .split('\n')[0] ?? '';
  // State Recv-Q Send-Q Local Peer: for a listening socket Send-Q is its backlog.
  const backlog = Number(line.split(/\s+/)[2]);
  const somaxconn = Number(fs.readFileSync('/proc/sys/net/core/somaxconn', 'utf8'));
  expect(backlog).toBe(Math.min(LISTEN_BACKLOG, somaxconn));
});
