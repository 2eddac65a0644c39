import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { unauthenticated } from '../../broker/errors.js';
import { CONSOLE_UNACKED_MAX } from '../../broker/remote/relay.js';
import { AgentRefusal } from '../../shared/codes.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { FakeAgents, type FakeAgent } from '../support/fake-agent.js';
import { connectRemote } from '../support/remote-ws.js';
import { eventually } from '../support/agent.js';

let t: TestBroker;
const fakes = new FakeAgents();
let device: string; // tagged x, online
let other: string; // untagged, online
let offline: string; // never connected
let agents: FakeAgent[] = [];
let echo: net.Server;
let echoPort: number;
let share: string; // a directory on the "device" (this machine)

const sha = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');

async function audit(query: string) {
  const r = await t.api('GET', `/api/v2/commitlist?${query}`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items as any[];
}

beforeAll(async () => {
  t = await startTestBroker({ locator: fakes.locator });
  device = await t.addDevice({ tags: ['x'], name: 'tagged-one' });
  other = await t.addDevice({ name: 'plain-one' });
  offline = await t.addDevice({ name: 'offline-one' });
  agents = [await fakes.attach(device, t.dataDir), await fakes.attach(other, t.dataDir)];
  echo = net.createServer({ allowHalfOpen: true }, (s) => s.pipe(s));
  await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
  echoPort = (echo.address() as net.AddressInfo).port;
  share = fs.mkdtempSync(path.join(t.dataDir, 'share-'));
});

afterAll(async () => {
  for (const a of agents.reverse()) await a.close();
  echo?.close();
  await t?.close();
});

describe('remote tickets', () => {
  it('issues a single-use ticket that opens one console, then is spent', async () => {
    const r = await t.api('POST', '/api/v2/remote/ticket', { token: t.adminToken, body: {} });
    expect(r.status).toBe(200);
    expect(r.body.expires_in).toBe(60);
    expect(typeof r.body.ticket).toBe('string');
    const first = connectRemote(t.url, 'console', { device_id: device, cols: 100, rows: 30, ticket: r.body.ticket });
    await first.ready;
    first.ws.close();
    await first.closed;
    const again = connectRemote(t.url, 'console', { device_id: device, ticket: r.body.ticket });
    const closed = await again.closed;
    expect(closed.code).toBe(4401);
    expect(again.frames[0]).toMatchObject({ type: 'error', code: 401, error: 'invalid_ticket' });
    const entries = await audit(`device_id=${device}&action=console`);
    expect(entries.some((e) => e.source === 'web' && e.result === 'allowed')).toBe(true);
  });

  it('needs a signed-in caller and an empty body', async () => {
    expect((await t.api('POST', '/api/v2/remote/ticket', { body: {} })).status).toBe(401);
    const bad = await t.api('POST', '/api/v2/remote/ticket', { token: t.adminToken, body: { device_id: device } });
    expect(bad.status).toBe(400);
  });

  it('refuses a WebSocket without token or ticket with 4401', async () => {
    const s = connectRemote(t.url, 'console', { device_id: device });
    expect((await s.closed).code).toBe(4401);
    expect(s.frames[0]).toMatchObject({ type: 'error', code: 401 });
  });
});

describe('remote console', () => {
  it('runs a typed command, resizes, and reports the exit status after the output', async () => {
    const s = connectRemote(t.url, 'console', { device_id: device, cols: 90, rows: 20, source: 'cli' }, t.adminToken);
    await s.ready;
    s.ws.send(JSON.stringify({ type: 'resize', cols: 132, rows: 43 }));
    s.ws.send(Buffer.from('stty size; echo "answer-$((6*7))"\n'));
    await s.output('answer-42');
    expect(s.bytes().toString()).toContain('43 132');
    s.ws.send(JSON.stringify({ type: 'ack', bytes: s.bytes().length }));
    s.ws.send(Buffer.from('exit 3\n'));
    const exit = await s.frame('exit');
    expect(exit).toEqual({ type: 'exit', code: 3, signal: null });
    expect((await s.closed).code).toBe(1000);
    const [entry] = await audit(`device_id=${device}&action=console&result=allowed`);
    expect(entry).toMatchObject({ event: 'remote.console.start', source: 'cli', user_email: 'admin@example.com' });
    await expect.poll(async () => (await audit(`device_id=${device}&action=console&result=allowed`))[0].ended_at).not.toBeNull();
    const [ended] = await audit(`device_id=${device}&action=console&result=allowed`);
    expect(ended.bytes_out).toBeGreaterThan(0);
    expect(ended.bytes_in).toBeGreaterThan(0);
    expect(ended.duration_ms).toBeGreaterThanOrEqual(0);
  });

  it('stops sending output at 1 MiB un-acknowledged, and goes on once acknowledged', async () => {
    const s = connectRemote(t.url, 'console', { device_id: device }, t.adminToken);
    await s.ready;
    s.ws.send(Buffer.from('yes flood-of-output\n'));
    await expect.poll(() => s.bytes().length, { timeout: 10_000 }).toBeGreaterThanOrEqual(CONSOLE_UNACKED_MAX);
    await new Promise((r) => setTimeout(r, 500));
    const held = s.bytes().length;
    // Frames are at most 64 KiB: the server stops within one frame of the limit.
    expect(held).toBeLessThan(CONSOLE_UNACKED_MAX + 64 * 1024);
    s.ws.send(JSON.stringify({ type: 'ack', bytes: held }));
    await expect.poll(() => s.bytes().length, { timeout: 10_000 }).toBeGreaterThan(held + 512 * 1024);
    s.ws.close();
    await s.closed;
  });

  it('answers a malformed control frame with a 400 error frame naming the field, and keeps the session', async () => {
    const s = connectRemote(t.url, 'console', { device_id: device }, t.adminToken);
    await s.ready;
    s.ws.send(JSON.stringify({ type: 'resize', cols: 80, rows: 0 }));
    s.ws.send(JSON.stringify({ type: 'ack', bytes: -5 }));
    s.ws.send('not json');
    s.ws.send(JSON.stringify({ type: 'something-newer' })); // unknown types are ignored
    await expect.poll(() => s.frames.filter((f) => f.type === 'error').length).toBe(3);
    const errors = s.frames.filter((f) => f.type === 'error');
    expect(errors[0]).toMatchObject({ code: 400, error: 'invalid_request', field: 'rows' });
    expect(errors[1]).toMatchObject({ code: 400, error: 'invalid_request', field: 'bytes' });
    expect(errors[2]).toMatchObject({ code: 400, error: 'invalid_request' });
    s.ws.send(Buffer.from('echo "still-$((40+2))"\n'));
    await s.output('still-42');
    s.ws.close();
    await s.closed;
  });

  it('answers 4400 naming the field for a bad query', async () => {
    const s = connectRemote(t.url, 'console', { device_id: device, cols: 0 }, t.adminToken);
    expect((await s.closed).code).toBe(4400);
    expect(s.frames[0]).toMatchObject({ type: 'error', code: 400, error: 'invalid_request', field: 'cols' });
    const bad = connectRemote(t.url, 'console', { device_id: 'not-a-device' }, t.adminToken);
    expect((await bad.closed).code).toBe(4400);
    expect(bad.frames[0].field).toBe('device_id');
  });

  it('answers 4404 for an unknown device and for a device that is not connected (audited)', async () => {
    const unknown = connectRemote(t.url, 'console', { device_id: 'a'.repeat(64) }, t.adminToken);
    expect((await unknown.closed).code).toBe(4404);
    expect(unknown.frames[0]).toMatchObject({ code: 404, error: 'not_found' });
    const s = connectRemote(t.url, 'console', { device_id: offline }, t.adminToken);
    expect((await s.closed).code).toBe(4404);
    expect(s.frames[0]).toMatchObject({ code: 404, error: 'device_not_connected' });
    // Allowed by the grants, then ended at once: the end is an entry of its own, pointing at the start.
    const [end, start] = await audit(`device_id=${offline}`);
    expect(start).toMatchObject({ event: 'remote.console.start', action: 'console', result: 'allowed' });
    expect(end).toMatchObject({ event: 'remote.console.end', ref_id: start.id, result: 'error', reason: 'device not connected' });
  });
});

describe('remote access grants', () => {
  it('a role with only tag:x/console gets a console on tagged devices and is refused a tunnel (audited as denied)', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:x/console'] }]);
    const s = connectRemote(t.url, 'console', { device_id: device }, user.token);
    await s.ready;
    s.ws.close();
    await s.closed;

    const untagged = connectRemote(t.url, 'console', { device_id: other }, user.token);
    expect((await untagged.closed).code).toBe(4403);

    const tunnel = connectRemote(t.url, 'tunnel', { device_id: device, port: echoPort, dst: '127.0.0.1' }, user.token);
    const closed = await tunnel.closed;
    expect(closed.code).toBe(4403);
    expect(tunnel.frames[0]).toMatchObject({ type: 'error', code: 403, error: 'forbidden' });
    const denied = await audit(`device_id=${device}&user_id=${user.id}&result=denied`);
    expect(denied[0]).toMatchObject({ event: 'remote.tunnel.denied', action: 'tunnel', options: { proto: 'tcp', port: echoPort, dst: '127.0.0.1' } });
  });

  it('a role with */console(user=operator,daemon) is refused a console as another user or as the agent itself (audited as denied)', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['*/console(user=operator,daemon)'] }]);
    const asRoot = connectRemote(t.url, 'console', { device_id: device, user: 'root' }, user.token);
    expect((await asRoot.closed).code).toBe(4403);
    expect(asRoot.frames[0]).toMatchObject({ type: 'error', code: 403, error: 'forbidden', message: expect.stringMatching(/allows console as root/) });
    const asAgent = connectRemote(t.url, 'console', { device_id: device }, user.token);
    expect((await asAgent.closed).code).toBe(4403);
    expect(asAgent.frames[0].message).toMatch(/names the users a console may run as: choose one/);
    const denied = await audit(`device_id=${device}&user_id=${user.id}&result=denied`);
    expect(denied.map((e) => [e.event, e.options.user])).toEqual([
      ['remote.console.denied', undefined],
      ['remote.console.denied', 'root'],
    ]);
    // A listed user passes the broker; the device then runs the shell as that user.
    const asDaemon = connectRemote(t.url, 'console', { device_id: device, user: 'daemon' }, user.token);
    await asDaemon.ready;
    asDaemon.ws.close();
    await asDaemon.closed;
    const [allowed] = await audit(`device_id=${device}&user_id=${user.id}&result=allowed`);
    expect(allowed).toMatchObject({ event: 'remote.console.start', options: { user: 'daemon' }, reason: 'granted' });
  });

  it('answers 4400 naming the field for a console user that is not a user name', async () => {
    for (const bad of ['Root', '-root', 'a b', 'x'.repeat(33)]) {
      const s = connectRemote(t.url, 'console', { device_id: device, user: bad }, t.adminToken);
      expect((await s.closed).code).toBe(4400);
      expect(s.frames[0]).toMatchObject({ type: 'error', error: 'invalid_request', field: 'user' });
    }
  });

  it('answers 4400 for a malformed console command and for copy permissions with set-id or sticky bits', async () => {
    for (const bad of ['uptime', '[]', '[1]', '[""]', JSON.stringify(Array(300).fill('a')), '["a\\u0000b"]']) {
      const s = connectRemote(t.url, 'console', { device_id: device, command: bad }, t.adminToken);
      expect((await s.closed).code, bad).toBe(4400);
      expect(s.frames[0]).toMatchObject({ type: 'error', error: 'invalid_request', field: 'command' });
    }
    for (const mode of ['4755', '1777', '0888', 'rw-r--r--']) {
      const s = connectRemote(t.url, 'copy', { device_id: device, direction: 'upload', path: '/tmp/x', size: 0, mode }, t.adminToken);
      expect((await s.closed).code, mode).toBe(4400);
      expect(s.frames[0]).toMatchObject({ type: 'error', error: 'invalid_request', field: 'mode' });
    }
  });

  it('*/tunnel(proto=tcp;port=22) allows port 22 and refuses port 80', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['*/tunnel(proto=tcp;port=22)'] }]);
    const ssh = connectRemote(t.url, 'tunnel', { device_id: other, port: 22, dst: '127.0.0.1' }, user.token);
    const sshClosed = await ssh.closed;
    // Allowed by the grant; whether something listens on port 22 here is the device's business.
    expect(sshClosed.code).not.toBe(4403);
    const http = connectRemote(t.url, 'tunnel', { device_id: other, port: 80, dst: '127.0.0.1' }, user.token);
    expect((await http.closed).code).toBe(4403);
    const udp = connectRemote(t.url, 'tunnel', { device_id: other, port: 22, proto: 'udp', dst: '127.0.0.1' }, user.token);
    expect((await udp.closed).code).toBe(4403);
    const entries = (await audit(`device_id=${other}&user_id=${user.id}&action=tunnel`)).filter((e) => !e.event.endsWith('.end'));
    expect(entries.map((e) => [e.options.port, e.options.proto, e.result]).sort()).toEqual(
      [
        [22, 'tcp', 'allowed'],
        [22, 'udp', 'denied'],
        [80, 'tcp', 'denied'],
      ].sort(),
    );
  });

  it('says what the caller may try on a device', async () => {
    const user = await t.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['tag:x/console', '*/tunnel(port=22)'] }]);
    const r = await t.api('GET', `/api/v2/remote/access/${device}`, { token: user.token });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ device_id: device, connected: true, console: true, tunnel: true, copy: false, reload: false });
    const r2 = await t.api('GET', `/api/v2/remote/access/${other}`, { token: user.token });
    expect(r2.body).toMatchObject({ console: false, tunnel: true });
    const admin = await t.api('GET', `/api/v2/remote/access/${offline}`, { token: t.adminToken });
    expect(admin.body).toEqual({ device_id: offline, connected: false, console: true, tunnel: true, copy: true, reload: true });
    const asUsers = await t.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console(user=operator,daemon)'] }]);
    const r3 = await t.api('GET', `/api/v2/remote/access/${device}`, { token: asUsers.token });
    expect(r3.body).toEqual({
      device_id: device,
      connected: true,
      console: true,
      console_users: ['operator', 'daemon'],
      tunnel: false,
      copy: false,
      reload: false,
    });
    const noRead = await t.userWith([{ permission: 'remote-access:connect' }]);
    expect((await t.api('GET', `/api/v2/remote/access/${device}`, { token: noRead.token })).status).toBe(403);

    // One tunnel asked about: decided with its port, host and protocol, as opening it would be.
    const ask = async (token: string, query: string) => (await t.api('GET', `/api/v2/remote/access/${device}?${query}`, { token })).body;
    expect(await ask(user.token, 'port=22')).toMatchObject({ tunnel: true, tunnel_allowed: true });
    expect(await ask(user.token, 'port=8080')).toMatchObject({ tunnel: true, tunnel_allowed: false });
    expect(await ask(user.token, 'port=22&proto=tcp&dst=10.0.0.9')).toMatchObject({ tunnel_allowed: true });
    const narrow = await t.userWith([
      { permission: 'device:read' },
      { permission: 'remote-access:connect', resources: ['*/tunnel(proto=tcp;port=22;dst=localhost)'] },
    ]);
    expect(await ask(narrow.token, 'port=22')).toMatchObject({ tunnel_allowed: true });
    expect(await ask(narrow.token, 'port=22&dst=127.0.0.1')).toMatchObject({ tunnel_allowed: false });
    expect(await ask(narrow.token, 'port=22&proto=udp')).toMatchObject({ tunnel_allowed: false });
    expect(await ask(asUsers.token, 'port=22')).toMatchObject({ tunnel: false, tunnel_allowed: false });
    expect(await ask(t.adminToken, 'port=65535&proto=udp&dst=example.com')).toMatchObject({ tunnel_allowed: true });
    // Without port, nothing is asked; a bad one is a 400 that answers nothing.
    expect(await ask(user.token, 'proto=udp')).not.toHaveProperty('tunnel_allowed');
    for (const bad of ['port=0', 'port=70000', 'port=22&proto=sctp', 'port=22&dst=a;b', 'port=x'])
      expect((await t.api('GET', `/api/v2/remote/access/${device}?${bad}`, { token: user.token })).status, bad).toBe(400);
    expect((await t.api('GET', '/api/v2/remote/access/xyz', { token: t.adminToken })).status).toBe(400);
  });
});

describe('remote tunnel', () => {
  it('carries bytes both ways with half-close, sha256 intact', async () => {
    const s = connectRemote(t.url, 'tunnel', { device_id: device, port: echoPort, dst: '127.0.0.1' }, t.adminToken);
    await s.ready;
    const payload = crypto.randomBytes(3 * 1024 * 1024 + 5);
    for (let i = 0; i < payload.length; i += 60_000) s.ws.send(payload.subarray(i, i + 60_000));
    s.ws.send(JSON.stringify({ type: 'eof' }));
    await s.frame('eof');
    expect((await s.closed).code).toBe(1000);
    expect(sha(s.bytes())).toBe(sha(payload));
    await expect.poll(async () => (await audit(`device_id=${device}&action=tunnel&result=allowed`))[0].bytes_in).toBe(payload.length);
    expect((await audit(`device_id=${device}&action=tunnel&result=allowed`))[0].bytes_out).toBe(payload.length);
  });

  it('a client that stops reading stalls the source on the device instead of filling the broker', async () => {
    let written = 0;
    const flood = net.createServer((socket) => {
      const chunk = Buffer.alloc(64 * 1024, 7);
      const pump = () => {
        while (!socket.destroyed) {
          written += chunk.length;
          if (!socket.write(chunk)) return void socket.once('drain', pump);
        }
      };
      socket.on('error', () => {});
      pump();
    });
    await new Promise<void>((r) => flood.listen(0, '127.0.0.1', r));
    try {
      const s = connectRemote(t.url, 'tunnel', { device_id: device, port: (flood.address() as net.AddressInfo).port, dst: '127.0.0.1' }, t.adminToken);
      await s.ready;
      s.ws.pause(); // a slow browser: nothing is read any more
      // The source stops: credit, the relay's high-water mark and socket buffers bound the bytes in flight.
      // How long the buffers take to fill depends on the machine's load, so wait for a second with no write.
      let stalledAt = -1;
      await expect
        .poll(
          async () => {
            const before = written;
            await new Promise((r) => setTimeout(r, 1000));
            stalledAt = written;
            return written === before;
          },
          { timeout: 30_000, interval: 0 },
        )
        .toBe(true);
      expect(written).toBeLessThan(64 * 1024 * 1024);
      s.ws.resume();
      await expect.poll(() => written, { timeout: 10_000 }).toBeGreaterThan(stalledAt + 4 * 1024 * 1024);
      s.ws.close();
      await s.closed;
    } finally {
      flood.close();
    }
  });

  it('reports a refused connection on the device as 4502', async () => {
    const closedPort = await new Promise<number>((resolve) => {
      const srv = net.createServer().listen(0, '127.0.0.1', () => {
        const p = (srv.address() as net.AddressInfo).port;
        srv.close(() => resolve(p));
      });
    });
    const s = connectRemote(t.url, 'tunnel', { device_id: device, port: closedPort, dst: '127.0.0.1' }, t.adminToken);
    expect((await s.closed).code).toBe(4502);
    expect(s.frames[0]).toMatchObject({ code: 502, error: 'device_refused' });
    expect(s.frames[0].message).toMatch(/ECONNREFUSED/);
  });
});

describe('remote copy', () => {
  it('uploads atomically with size and sha256 checked, then downloads the same bytes', async () => {
    const content = crypto.randomBytes(700_000);
    const target = path.join(share, 'uploaded.bin');
    const up = connectRemote(t.url, 'copy', { device_id: device, direction: 'upload', path: target, size: content.length, sha256: sha(content) }, t.adminToken);
    await up.ready;
    for (let i = 0; i < content.length; i += 64 * 1024) up.ws.send(content.subarray(i, i + 64 * 1024));
    up.ws.send(JSON.stringify({ type: 'eof' }));
    expect(await up.frame('result')).toEqual({ type: 'result', ok: true, bytes: content.length, sha256: sha(content) });
    expect((await up.closed).code).toBe(1000);
    expect(sha(fs.readFileSync(target))).toBe(sha(content));
    expect(fs.readdirSync(share).filter((f) => f.includes('fleet-upload'))).toEqual([]);

    const down = connectRemote(t.url, 'copy', { device_id: device, direction: 'download', path: target }, t.adminToken);
    const meta = await down.frame('meta');
    expect(meta).toMatchObject({ type: 'meta', size: content.length });
    const result = await down.frame('result');
    expect(result).toEqual({ type: 'result', ok: true, bytes: content.length, sha256: sha(content) });
    expect(sha(down.bytes())).toBe(sha(content));
    expect((await down.closed).code).toBe(1000);
  });

  it('downloads an empty file', async () => {
    const empty = path.join(share, 'empty.txt');
    fs.writeFileSync(empty, '');
    const down = connectRemote(t.url, 'copy', { device_id: device, direction: 'download', path: empty }, t.adminToken);
    expect(await down.frame('result')).toMatchObject({ ok: true, bytes: 0, sha256: sha('') });
  });

  it('refuses a checksum mismatch and leaves the target untouched', async () => {
    const target = path.join(share, 'keep.txt');
    fs.writeFileSync(target, 'original');
    const up = connectRemote(t.url, 'copy', { device_id: device, direction: 'upload', path: target, sha256: sha('something else') }, t.adminToken);
    await up.ready;
    up.ws.send(Buffer.from('replacement'));
    up.ws.send(JSON.stringify({ type: 'eof' }));
    const error = await up.frame('error');
    expect(error).toMatchObject({ code: 502, error: 'copy_failed' });
    expect(error.message).toMatch(/Checksum mismatch/);
    expect(fs.readFileSync(target, 'utf8')).toBe('original');
    expect(fs.readdirSync(share).filter((f) => f.includes('fleet-upload'))).toEqual([]);
    // The attempt was allowed; the copy itself failed, and its end entry says so.
    const end = await eventually(async () =>
      (await audit(`device_id=${device}&event=remote.copy.end`)).find((e: { reason: string }) => /Checksum mismatch/.test(e.reason)),
    );
    expect(end).toMatchObject({ result: 'error' });
  });

  it("keeps checking an announced sha256 when a user asks to skip checksums (checksum=false is the broker's own sftp option, never a client's)", async () => {
    const target = path.join(share, 'keep-checked.txt');
    fs.writeFileSync(target, 'original');
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`*/copy(direction=upload;path=${share})`] }]);
    for (const checksum of ['false', '0', '']) {
      const query = { device_id: device, direction: 'upload', path: target, sha256: sha('something else'), checksum };
      const up = connectRemote(t.url, 'copy', query, user.token);
      await up.ready;
      up.ws.send(Buffer.from('replacement'));
      up.ws.send(JSON.stringify({ type: 'eof' }));
      const error = await up.frame('error');
      expect(error, checksum).toMatchObject({ code: 502, error: 'copy_failed' });
      expect(error.message).toMatch(/Checksum mismatch/);
      expect(fs.readFileSync(target, 'utf8')).toBe('original');
    }
    const starts = await audit(`user_id=${user.id}&event=remote.copy.start`);
    expect(starts).toHaveLength(3);
    for (const entry of starts) expect(entry.options).not.toHaveProperty('checksum');
  });

  it('a path grant refuses ../ escapes and symlinks leading out, and allows files inside', async () => {
    const inside = path.join(share, 'granted');
    fs.mkdirSync(inside, { recursive: true });
    fs.writeFileSync(path.join(share, 'secret.txt'), 'secret');
    fs.writeFileSync(path.join(inside, 'ok.txt'), 'fine');
    fs.symlinkSync(path.join(share, 'secret.txt'), path.join(inside, 'link.txt'));
    fs.symlinkSync(share, path.join(inside, 'up'));
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`*/copy(direction=download;path=${inside})`] }]);

    const ok = connectRemote(t.url, 'copy', { device_id: device, direction: 'download', path: `${inside}/ok.txt` }, user.token);
    expect(await ok.frame('result')).toMatchObject({ ok: true, bytes: 4 });

    const escape = connectRemote(t.url, 'copy', { device_id: device, direction: 'download', path: `${inside}/../secret.txt` }, user.token);
    expect((await escape.closed).code).toBe(4403);

    for (const p of [`${inside}/link.txt`, `${inside}/up/secret.txt`]) {
      const s = connectRemote(t.url, 'copy', { device_id: device, direction: 'download', path: p }, user.token);
      expect((await s.closed).code).toBe(4403);
      expect(s.frames[0].message).toMatch(/outside the directories your grant allows/);
      expect(s.bytes().length).toBe(0);
    }
    const upload = connectRemote(t.url, 'copy', { device_id: device, direction: 'upload', path: `${inside}/new.txt` }, user.token);
    expect((await upload.closed).code).toBe(4403);
    // Two refused by the broker's decision, two by the device (symlinks resolved there): each is a denied entry.
    const denied = await audit(`device_id=${device}&user_id=${user.id}&result=denied`);
    expect(denied.map((e) => e.event).sort()).toEqual(['remote.copy.denied', 'remote.copy.denied', 'remote.copy.end', 'remote.copy.end']);
    for (const end of denied.filter((e) => e.event === 'remote.copy.end')) expect(end.reason).toMatch(/^refused by the device: Not allowed/);
  });
});

describe('agent reload', () => {
  it('reloads with the reload action, audited; refuses without it', async () => {
    const r = await t.api('POST', `/api/v2/remote/reload/${device}`, { token: t.adminToken });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({ ok: true, device_id: device });
    expect(agents[0].reloads).toBe(1);
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['*/console'] }]);
    const denied = await t.api('POST', `/api/v2/remote/reload/${device}?source=cli`, { token: user.token, body: {} });
    expect(denied.status).toBe(403);
    expect(denied.body.error).toBe('forbidden');
    const entries = (await audit(`device_id=${device}&action=reload`)).filter((e) => !e.event.endsWith('.end'));
    expect(entries.map((e) => [e.result, e.source]).sort()).toEqual([
      ['allowed', 'api'],
      ['denied', 'cli'],
    ]);
    expect((await t.api('POST', `/api/v2/remote/reload/${offline}`, { token: t.adminToken })).body.error).toBe('device_not_connected');
    expect((await t.api('POST', `/api/v2/remote/reload/${device}`, { token: t.adminToken, body: { now: true } })).status).toBe(400);
    expect((await t.api('POST', `/api/v2/remote/reload/${device}`)).status).toBe(401);
  });
});

describe('agent refusals are told apart by their code', () => {
  it('an access refusal is 403 whatever its sentence says; a sentence alone is not a code', async () => {
    const reworded = await t.addDevice({ name: 'reworded' });
    fakes.refusing(reworded, new AgentRefusal('symlink_escape', 'Computer says no.'));
    const s = connectRemote(t.url, 'copy', { device_id: reworded, direction: 'download', path: '/srv/x' }, t.adminToken);
    expect((await s.closed).code).toBe(4403);
    expect(s.frames[0]).toMatchObject({ type: 'error', code: 403, error: 'forbidden', message: 'Computer says no.', refusal: 'symlink_escape' });

    const sentenceOnly = await t.addDevice({ name: 'sentence-only' });
    fakes.refusing(sentenceOnly, new Error('Not allowed on this device: /srv/x resolves outside the directories your grant allows.'));
    const old = connectRemote(t.url, 'copy', { device_id: sentenceOnly, direction: 'download', path: '/srv/x' }, t.adminToken);
    expect((await old.closed).code).toBe(4502);
    expect(old.frames[0]).toMatchObject({ code: 502, error: 'device_refused' });

    const missing = await t.addDevice({ name: 'missing-file' });
    fakes.refusing(missing, new AgentRefusal('not_found', 'No file /srv/x on the device.'));
    const gone = connectRemote(t.url, 'copy', { device_id: missing, direction: 'download', path: '/srv/x' }, t.adminToken);
    expect((await gone.closed).code).toBe(4502);
    expect(gone.frames[0]).toMatchObject({ code: 502, error: 'device_refused', refusal: 'not_found' });
  });
});

describe('live sessions', () => {
  it('disabling the user ends their live console within seconds (audited)', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:x/console'] }]);
    const s = connectRemote(t.url, 'console', { device_id: device }, user.token);
    await s.ready;
    const r = await t.api('PATCH', `/api/v2/user/${user.id}`, { token: t.adminToken, body: { disabled: true } });
    expect(r.status).toBe(200);
    const closed = await s.closed;
    expect(closed.code).toBe(4403);
    expect(s.frames.at(-1)).toMatchObject({ type: 'error', error: 'access_withdrawn' });
    await expect.poll(async () => (await audit(`user_id=${user.id}&action=console`))[0].reason).toMatch(/access withdrawn/);
  });

  it('a re-check the database cannot answer ends no session; a refusal still does', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:x/console'] }]);
    const s = connectRemote(t.url, 'console', { device_id: device }, user.token);
    await s.ready;
    const { sessions } = t.broker.services.remote;
    const live = () => sessions.list().filter((v) => v.user.id === user.id);
    const auth = vi.spyOn(t.broker.services.auth, 'authenticate').mockRejectedValue(new Error('connect ECONNREFUSED 127.0.0.1:5432'));
    try {
      await sessions.recheck();
      // The console still answers after the failed re-check, and was told nothing.
      s.ws.send(Buffer.from('echo "kept-$((6*7))"\n'));
      await s.output('kept-42');
      expect(live()).toHaveLength(1);
      expect(s.frames.some((f) => f.type === 'error')).toBe(false);
      auth.mockRejectedValue(unauthenticated('This user is disabled.', 'user_disabled'));
      await sessions.recheck();
      expect((await s.closed).code).toBe(4403);
      expect(s.frames.at(-1)).toMatchObject({ error: 'access_withdrawn', reason: 'This user is disabled' });
    } finally {
      auth.mockRestore();
    }
  });

  it('deleting the device ends its live sessions', async () => {
    const doomed = await t.addDevice({ name: 'doomed' });
    agents.push(await fakes.attach(doomed, t.dataDir));
    const s = connectRemote(t.url, 'console', { device_id: doomed }, t.adminToken);
    await s.ready;
    const removed = await t.api('DELETE', `/api/v2/removeapprovedhost/${doomed}`, { token: t.adminToken });
    expect(removed.status).toBeLessThan(300);
    expect((await s.closed).code).toBe(4403);
    expect(s.frames.at(-1)).toMatchObject({ error: 'access_withdrawn', message: 'Your access was withdrawn: no such device.', reason: 'no such device' });
  });

  it('a role change that withdraws the grant ends a live tunnel', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`*/tunnel(port=${echoPort})`] }]);
    const s = connectRemote(t.url, 'tunnel', { device_id: other, port: echoPort, dst: '127.0.0.1' }, user.token);
    await s.ready;
    await t.broker.services.store.db
      .updateTable('roles')
      .set({ policies: JSON.stringify([{ permission: 'remote-access:connect', resources: ['*/console'] }]), updated_at: new Date().toISOString() })
      .where('id', '=', user.roleId)
      .execute();
    expect((await s.closed).code).toBe(4403);
    expect(s.frames.at(-1)).toMatchObject({ error: 'access_withdrawn' });
  });
});

describe('port presets', () => {
  it('creates, lists per device, changes and deletes presets', async () => {
    const created = await t.api('POST', '/api/v2/service-connect/portmap', { token: t.adminToken, body: { target: 'tag:x', name: 'SSH', port: 22 } });
    expect(created.status).toBe(201);
    expect(created.body).toMatchObject({ target: 'tag:x', name: 'SSH', proto: 'tcp', port: 22, dst: 'localhost' });
    const all = await t.api('POST', '/api/v2/service-connect/portmap', {
      token: t.adminToken,
      body: { target: '*', name: 'DNS', proto: 'udp', port: 53, dst: '127.0.0.1' },
    });
    expect(all.status).toBe(201);

    const forTagged = await t.api('GET', `/api/v2/service-connect/portmap?device_id=${device}`, { token: t.adminToken });
    expect(forTagged.body.items.map((p: any) => p.name).sort()).toEqual(['DNS', 'SSH']);
    const forOther = await t.api('GET', `/api/v2/service-connect/portmap?device_id=${other}`, { token: t.adminToken });
    expect(forOther.body).toMatchObject({ total: 1, items: [{ name: 'DNS' }] });

    const changed = await t.api('PATCH', '/api/v2/service-connect/portmap', {
      token: t.adminToken,
      body: { id: created.body.id, port: 2222, name: 'SSH alt' },
    });
    expect(changed.status).toBe(200);
    expect(changed.body).toMatchObject({ id: created.body.id, port: 2222, name: 'SSH alt', target: 'tag:x' });

    expect((await t.api('DELETE', `/api/v2/service-connect/portmap/${all.body.id}`, { token: t.adminToken })).status).toBe(204);
    expect((await t.api('DELETE', `/api/v2/service-connect/portmap/${all.body.id}`, { token: t.adminToken })).status).toBe(404);
    expect((await t.api('PATCH', '/api/v2/service-connect/portmap', { token: t.adminToken, body: { id: 'nope', port: 1 } })).status).toBe(404);
  });

  it('validates presets and names the field', async () => {
    const cases: [unknown, string][] = [
      [{ target: 'tag:x/console', name: 'A', port: 22 }, 'target'],
      [{ target: 'group:x', name: 'A', port: 22 }, 'target'],
      [{ target: '*', name: '', port: 22 }, 'name'],
      [{ target: '*', name: 'A', port: 0 }, 'port'],
      [{ target: '*', name: 'A', port: 22, proto: 'icmp' }, 'proto'],
      [{ target: '*', name: 'A', port: 22, dst: 'bad host' }, 'dst'],
      [{ target: '*', name: 'A', port: 22, extra: 1 }, ''],
    ];
    for (const [body, field] of cases) {
      const r = await t.api('POST', '/api/v2/service-connect/portmap', { token: t.adminToken, body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      if (field) expect(r.body.field, JSON.stringify(body)).toBe(field);
    }
    const empty = await t.api('PATCH', '/api/v2/service-connect/portmap', { token: t.adminToken, body: { id: 'x' } });
    expect(empty.status).toBe(400);
  });

  it('needs remote-access:manage to change and connect or device:read to read', async () => {
    const reader = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:x/console'] }]);
    expect((await t.api('POST', '/api/v2/service-connect/portmap', { token: reader.token, body: { target: '*', name: 'A', port: 22 } })).status).toBe(403);
    expect((await t.api('PATCH', '/api/v2/service-connect/portmap', { token: reader.token, body: { id: 'x', port: 22 } })).status).toBe(403);
    expect((await t.api('GET', `/api/v2/service-connect/portmap?device_id=${device}`, { token: reader.token })).status).toBe(200);
    expect((await t.api('GET', `/api/v2/service-connect/portmap?device_id=${other}`, { token: reader.token })).status).toBe(403);
    const nobody = await t.userWith([{ permission: 'users:read' }]);
    const none = await t.api('GET', '/api/v2/service-connect/portmap', { token: nobody.token });
    expect(none.status).toBe(200);
    expect(none.body).toEqual({ items: [], total: 0 });
    expect((await t.api('GET', `/api/v2/service-connect/portmap?device_id=${device}`, { token: nobody.token })).status).toBe(403);
    expect((await t.api('GET', '/api/v2/service-connect/portmap')).status).toBe(401);
  });
});

describe('port presets and remote-access:manage resources', () => {
  it('lets a manager limited to tag:lab create, change and delete only presets its grant covers', async () => {
    await t.addGroup({ id: 'pm-lab', tags: ['lab'] });
    await t.addGroup({ id: 'pm-lab-sub', parent: 'pm-lab' });
    await t.addGroup({ id: 'pm-prod', title: 'Production secret' });
    const labDevice = await t.addDevice({ parent: 'pm-lab-sub' });
    const manager = await t.userWith([{ permission: 'remote-access:manage', resources: ['tag:lab'] }]);
    const post = (token: string, target: string) =>
      t.api('POST', '/api/v2/service-connect/portmap', { token, body: { target, name: `P ${target}`.slice(0, 60), port: 22 } });

    // Targets outside tag:lab are refused: every device, another tag, a group without the tag.
    for (const target of ['*', 'tag:prod', 'node:pm-prod', `node:${device}`, 'node:no-such-group']) {
      const r = await post(manager.token, target);
      expect(r.status, target).toBe(403);
      expect(r.body).toMatchObject({ code: 403, error: 'forbidden' });
    }
    // Inside: the tag itself, the group carrying it, a group and a device below it.
    for (const target of ['tag:lab', 'node:pm-lab', 'node:pm-lab-sub', `node:${labDevice}`])
      expect((await post(manager.token, target)).status, target).toBe(201);
    // A malformed target is still 400, not 403.
    expect((await post(manager.token, 'group:x')).status).toBe(400);

    const prod = await post(t.adminToken, 'node:pm-prod');
    const everywhere = await post(t.adminToken, '*');
    const lab = await post(t.adminToken, 'tag:lab');
    const patch = (token: string, body: Record<string, unknown>) => t.api('PATCH', '/api/v2/service-connect/portmap', { token, body });
    expect((await patch(manager.token, { id: prod.body.id, port: 2222 })).status).toBe(403);
    expect((await patch(manager.token, { id: everywhere.body.id, port: 2222 })).status).toBe(403);
    expect((await patch(manager.token, { id: lab.body.id, target: '*' })).status).toBe(403);
    expect((await patch(manager.token, { id: lab.body.id, port: 2200 })).status).toBe(200);
    expect((await t.api('DELETE', `/api/v2/service-connect/portmap/${prod.body.id}`, { token: manager.token })).status).toBe(403);
    expect((await t.api('DELETE', `/api/v2/service-connect/portmap/${everywhere.body.id}`, { token: manager.token })).status).toBe(403);
    const kept = await t.api('GET', `/api/v2/service-connect/portmap?items_per_page=1000`, { token: t.adminToken });
    expect(kept.body.items.find((p: any) => p.id === prod.body.id)).toMatchObject({ port: 22, target: 'node:pm-prod' });
    expect((await t.api('DELETE', `/api/v2/service-connect/portmap/${lab.body.id}`, { token: manager.token })).status).toBe(204);

    // The list shows presets for every device and those the reader's grant covers, never a hidden group's.
    const listed = await t.api('GET', '/api/v2/service-connect/portmap?items_per_page=1000', { token: manager.token });
    const targets = listed.body.items.map((p: any) => p.target);
    expect(targets).not.toContain('node:pm-prod');
    expect(targets).toContain('*');
    expect(targets).toContain('node:pm-lab-sub');
    expect(JSON.stringify(listed.body)).not.toContain('pm-prod');
    const reader = await t.userWith([{ permission: 'device:read', resources: ['node:pm-lab'] }]);
    const readerList = await t.api('GET', '/api/v2/service-connect/portmap?items_per_page=1000', { token: reader.token });
    expect(readerList.body.items.map((p: any) => p.target)).not.toContain('node:pm-prod');
    expect(readerList.body.items.map((p: any) => p.target)).toContain('node:pm-lab-sub');
  });
});

describe('OpenAPI', () => {
  it('documents the WebSocket endpoints and the REST calls', async () => {
    const r = await t.api('GET', '/api/v2/openapi.json');
    for (const kind of ['console', 'tunnel', 'copy']) expect(r.body.paths[`/api/v2/remote/${kind}`].get['x-websocket']).toBe(true);
    expect(r.body.paths['/api/v2/remote/ticket'].post).toBeDefined();
    expect(r.body.paths['/api/v2/service-connect/portmap'].patch['x-permission']).toBe('remote-access:manage');
  });
});
