/**
 * End to end with the agent as a device runs it: the bundle built by `npm run build:agent`, started
 * as a program (its shell launcher: AGENT_NODE_FLAGS, one malloc arena). It serves a console, a TCP
 * tunnel and copies both ways through a real broker, and what its launcher set for node stays out of
 * the environment its consoles get.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_MALLOC_ARENA_MAX, AGENT_MALLOC_TRIM_THRESHOLD, AGENT_NODE_FLAGS, buildAgent } from '../../agent/packaging/build.js';
import { echoServer, startAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connectRemote, sendThroughTunnel } from '../support/remote-ws.js';

let t: TestBroker;
let agent: TestAgent;
let device: string;
let echo: net.Server;
let echoPort: number;
let work: string;

const sha = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-bundle-remote-'));
  const build = await buildAgent(path.join(work, 'dist'), { packages: false });
  t = await startTestBroker({ database: 'sqlite' });
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  expect(key.status).toBe(200);
  agent = startAgent({ broker: t.url, program: build.bundle, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.waitConnected(t, 60_000);
  ({ server: echo, port: echoPort } = await echoServer());
});

afterAll(async () => {
  await agent?.close();
  echo?.close();
  await t?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('the bundled agent, started by its launcher', () => {
  it("runs node with the agent's flags, one malloc arena and a fixed trim threshold", () => {
    const pid = agent.process.pid as number;
    const argv = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    expect(argv.slice(1, 1 + AGENT_NODE_FLAGS.split(' ').length)).toEqual(AGENT_NODE_FLAGS.split(' '));
    // The environment node started with (the agent removes it from its own afterwards).
    const environ = fs.readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    expect(environ).toContain(`MALLOC_ARENA_MAX=${process.env.MALLOC_ARENA_MAX ?? AGENT_MALLOC_ARENA_MAX}`);
    expect(environ).toContain(`MALLOC_TRIM_THRESHOLD_=${process.env.MALLOC_TRIM_THRESHOLD_ ?? AGENT_MALLOC_TRIM_THRESHOLD}`);
  });

  it("opens a console whose environment has nothing of the launcher's", async () => {
    const s = connectRemote(t.url, 'console', { device_id: device, cols: 120, rows: 40 }, t.adminToken);
    await s.ready;
    s.ws.send(
      Buffer.from(
        'echo "arena=${MALLOC_ARENA_MAX-none} marker=${FLEET_AGENT_MALLOC_ARENA_MAX-none} ' +
          'trim=${MALLOC_TRIM_THRESHOLD_-none} marker=${FLEET_AGENT_MALLOC_TRIM_THRESHOLD_-none} n=$((20+22))"\n',
      ),
    );
    await s.output(`arena=${process.env.MALLOC_ARENA_MAX ?? 'none'} marker=none trim=${process.env.MALLOC_TRIM_THRESHOLD_ ?? 'none'} marker=none n=42`);
    s.ws.send(JSON.stringify({ type: 'ack', bytes: s.bytes().length }));
    s.ws.send(Buffer.from('exit 0\n'));
    expect(await s.frame('exit')).toEqual({ type: 'exit', code: 0, signal: null });
    expect((await s.closed).code).toBe(1000);
  });

  it('forwards TCP to a local echo server: 16 MB with a matching sha256', async () => {
    const s = connectRemote(t.url, 'tunnel', { device_id: device, port: echoPort, dst: '127.0.0.1' }, t.adminToken);
    await s.ready;
    const total = 16 * 1024 * 1024;
    const sent = await sendThroughTunnel(s, total);
    await s.frame('eof');
    expect((await s.closed).code).toBe(1000);
    const back = s.bytes();
    expect(back.length).toBe(total);
    expect(sha(back)).toBe(sent);
  });

  it('copies a file to the device and back', async () => {
    const content = crypto.randomBytes(3 * 1024 * 1024 + 11);
    const target = path.join(work, 'copied.bin');
    const up = connectRemote(t.url, 'copy', { device_id: device, direction: 'upload', path: target, size: content.length, sha256: sha(content) }, t.adminToken);
    await up.ready;
    for (let i = 0; i < content.length; i += 64 * 1024) up.ws.send(content.subarray(i, i + 64 * 1024));
    up.ws.send(JSON.stringify({ type: 'eof' }));
    expect(await up.frame('result')).toMatchObject({ ok: true, bytes: content.length, sha256: sha(content) });
    expect(sha(fs.readFileSync(target))).toBe(sha(content));

    const down = connectRemote(t.url, 'copy', { device_id: device, direction: 'download', path: target }, t.adminToken);
    expect(await down.frame('result')).toMatchObject({ ok: true, bytes: content.length, sha256: sha(content) });
    expect(sha(down.bytes())).toBe(sha(content));
  });
});
