/**
 * End to end: a real broker and a real agent process. Enrolment with a bootstrap key and approval,
 * then console, a 50 MB TCP tunnel, copies both ways and reload through the broker's WebSocket
 * endpoints; grants decided per attempt and audited; live sessions ended when access goes.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startAgent, type TestAgent, echoServer } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { connectRemote, sendThroughTunnel } from '../support/remote-ws.js';

let t: TestBroker;
let agent: TestAgent;
let device: string;
let echo: net.Server;
let echoPort: number;
let work: string;

const sha = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');

async function audit(query: string): Promise<any[]> {
  const r = await t.api('GET', `/api/v2/commitlist?${query}`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

beforeAll(async () => {
  t = await startTestBroker({ database: 'sqlite' });
  await t.addGroup({ id: 'lab', title: 'Lab', tags: ['x'] });
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { group_id: 'lab', auto_accept: false } });
  expect(key.status).toBe(200);
  agent = startAgent({ broker: t.url, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.deviceId();
  await eventually(
    async () => (await t.api('GET', '/api/v2/pendinghost', { token: t.adminToken })).body.some((h: any) => h.node_id === device),
    20_000,
    'the pending host',
  );
  const approved = await t.api('POST', '/api/v2/pendinghost', { token: t.adminToken, body: { node_id: device } });
  expect(approved.status).toBeLessThan(300);
  await agent.waitConnected(t);
  ({ server: echo, port: echoPort } = await echoServer());
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-remote-e2e-'));
});

afterAll(async () => {
  await agent?.close();
  echo?.close();
  await t?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('remote access through a real agent', () => {
  it('opens a console and reads the output of a typed command', async () => {
    const s = connectRemote(t.url, 'console', { device_id: device, cols: 120, rows: 40 }, t.adminToken);
    await s.ready;
    s.ws.send(Buffer.from('echo "e2e-$((20+22))"\n'));
    await s.output('e2e-42');
    s.ws.send(JSON.stringify({ type: 'ack', bytes: s.bytes().length }));
    s.ws.send(Buffer.from('exit 0\n'));
    expect(await s.frame('exit')).toEqual({ type: 'exit', code: 0, signal: null });
    expect((await s.closed).code).toBe(1000);
  });

  it('forwards TCP to a local echo server: 50 MB with a matching sha256', async () => {
    const s = connectRemote(t.url, 'tunnel', { device_id: device, port: echoPort, dst: '127.0.0.1' }, t.adminToken);
    await s.ready;
    const total = 50 * 1024 * 1024;
    const sent = await sendThroughTunnel(s, total);
    await s.frame('eof');
    expect((await s.closed).code).toBe(1000);
    const back = s.bytes();
    expect(back.length).toBe(total);
    expect(sha(back)).toBe(sent);
    await eventually(async () => (await audit(`device_id=${device}&action=tunnel`))[0]?.bytes_out === total, 10_000, 'the end record');
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

  it('reloads the agent, which comes back', async () => {
    const from = agent.logs.length;
    const r = await t.api('POST', `/api/v2/remote/reload/${device}`, { token: t.adminToken, body: {} });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ok: true, device_id: device });
    await agent.waitForLog((l) => l.msg.includes('reload'), 10_000, from);
    await agent.waitConnected(t);
    const [end, start] = await audit(`device_id=${device}&action=reload`);
    expect(start).toMatchObject({ event: 'remote.reload.start', result: 'allowed', ended_at: end.ts });
    expect(end).toMatchObject({ event: 'remote.reload.end', ref_id: start.id, result: 'ended', reason: 'acknowledged by the agent' });
  });

  it('a tag:x/console role gets a console on the tagged device and is refused a tunnel, audited as denied', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:x/console'] }]);
    const s = connectRemote(t.url, 'console', { device_id: device }, user.token);
    await s.ready;
    s.ws.send(Buffer.from('echo tagged-ok\n'));
    await s.output('tagged-ok');
    s.ws.close();
    await s.closed;
    const tunnel = connectRemote(t.url, 'tunnel', { device_id: device, port: echoPort, dst: '127.0.0.1' }, user.token);
    expect((await tunnel.closed).code).toBe(4403);
    const [denied] = await audit(`user_id=${user.id}&result=denied`);
    expect(denied).toMatchObject({ event: 'remote.tunnel.denied', device_id: device, action: 'tunnel' });
  });

  it('*/tunnel(proto=tcp;port=<p>) allows that port and refuses another', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`*/tunnel(proto=tcp;port=${echoPort})`] }]);
    const ok = connectRemote(t.url, 'tunnel', { device_id: device, port: echoPort, dst: '127.0.0.1' }, user.token);
    await ok.ready;
    ok.ws.send(Buffer.from('ping'));
    await ok.output('ping');
    ok.ws.close();
    const refused = connectRemote(t.url, 'tunnel', { device_id: device, port: 80, dst: '127.0.0.1' }, user.token);
    expect((await refused.closed).code).toBe(4403);
  });

  it('a copy path grant refuses ../ escapes', async () => {
    const granted = path.join(work, 'granted');
    fs.mkdirSync(granted);
    fs.writeFileSync(path.join(work, 'private.txt'), 'private');
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`*/copy(path=${granted})`] }]);
    const escape = connectRemote(t.url, 'copy', { device_id: device, direction: 'download', path: `${granted}/../private.txt` }, user.token);
    expect((await escape.closed).code).toBe(4403);
    fs.symlinkSync(path.join(work, 'private.txt'), path.join(granted, 'link'));
    const viaLink = connectRemote(t.url, 'copy', { device_id: device, direction: 'download', path: `${granted}/link` }, user.token);
    expect((await viaLink.closed).code).toBe(4403);
    expect(viaLink.bytes().length).toBe(0);
    // The device's refusal is in the audit trail as a denial of that session, not as an allowed copy.
    const entries = await audit(`user_id=${user.id}&action=copy`);
    const start = entries.find((e) => e.event === 'remote.copy.start' && e.options.path === `${granted}/link`);
    expect(start).toBeDefined();
    const end = entries.find((e) => e.ref_id === start.id);
    expect(end).toMatchObject({ event: 'remote.copy.end', result: 'denied' });
    expect(end.reason).toMatch(/^refused by the device: Not allowed/);
    // The start entry, as listed, carries that outcome too.
    await eventually(async () => (await audit(`user_id=${user.id}&action=copy`)).find((e) => e.id === start.id)?.end_result === 'denied');
    expect((await audit(`user_id=${user.id}&action=copy`)).find((e) => e.id === start.id)).toMatchObject({ end_result: 'denied', end_reason: end.reason });
  });

  // The tests run as root, as an agent installed on a device does; the user is an existing system
  // account (never create users on the test machine). nobody's shell is nologin: the grant's choice wins.
  it("*/console(user=nobody) runs the shell as nobody, with none of root's groups, and refuses root", async () => {
    expect(process.getuid?.()).toBe(0);
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['*/console(user=nobody)'] }]);
    const s = connectRemote(t.url, 'console', { device_id: device, user: 'nobody' }, user.token);
    await s.ready;
    s.ws.send(Buffer.from('echo "who=$(id -un) groups=$(id -G) home=$HOME"; exit 0\n'));
    await s.output('who=nobody groups=65534 home=/');
    expect(await s.frame('exit')).toEqual({ type: 'exit', code: 0, signal: null });
    const [start] = await audit(`user_id=${user.id}&action=console&result=allowed`);
    expect(start).toMatchObject({ event: 'remote.console.start', options: { user: 'nobody' } });

    const asRoot = connectRemote(t.url, 'console', { device_id: device, user: 'root' }, user.token);
    expect((await asRoot.closed).code).toBe(4403);
    const asAgent = connectRemote(t.url, 'console', { device_id: device }, user.token);
    expect((await asAgent.closed).code).toBe(4403);
    expect(asAgent.frames.at(-1)).toMatchObject({ type: 'error', error: 'forbidden', message: expect.stringMatching(/choose one/) });
  });

  it('a console as a user the device does not have is refused by the agent with unknown_user', async () => {
    const s = connectRemote(t.url, 'console', { device_id: device, user: 'no-such-user-e2e' }, t.adminToken);
    expect((await s.closed).code).not.toBe(1000);
    expect(s.frames.at(-1)).toMatchObject({ type: 'error', error: 'device_refused', refusal: 'unknown_user' });
  });

  it('disabling the user ends their live console within seconds', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:x/console'] }]);
    const s = connectRemote(t.url, 'console', { device_id: device }, user.token);
    await s.ready;
    expect((await t.api('PATCH', `/api/v2/user/${user.id}`, { token: t.adminToken, body: { disabled: true } })).status).toBe(200);
    expect((await s.closed).code).toBe(4403);
    expect(s.frames.at(-1)).toMatchObject({ type: 'error', error: 'access_withdrawn' });
  });
});
