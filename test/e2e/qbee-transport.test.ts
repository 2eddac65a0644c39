/**
 * End to end: qbee's own remote-access transport (qbee-v1 upgrade, smux v2 streams) against a real
 * broker and a real agent process, with a client written from qbee's public protocol. Each stream
 * goes through the broker's decide → audit → relay path like its own endpoints.
 */
import crypto from 'node:crypto';
import dgram from 'node:dgram';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Readable } from 'node:stream';
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { QbeeMessage } from '../../shared/qbee.js';
import { QBEE_MAX_CONNECTIONS_PER_USER } from '../../broker/qbee/transport.js';
import { readTar, writeTar, type TarEntry } from '../../shared/tar.js';
import { eventually, type TestAgent, echoServer, startEnrolledAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { collect, connectQbee, QbeeRemoteError, QbeeUpgradeRefused, type QbeeClient } from '../support/qbee-client.js';
import { isMinimumAgentVersion } from '../compat/go-shape.js';

const ROOT_VERSION = (JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

let t: TestBroker;
let agent: TestAgent;
let device: string;
let echo: net.Server;
let echoPort: number;
let work: string;

async function audit(query: string): Promise<any[]> {
  const r = await t.api('GET', `/api/v2/commitlist?${query}`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

/** Waits until `stream` has sent something containing `text`. */
function output(stream: Readable, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let seen = '';
    const onData = (d: Buffer) => {
      seen += d.toString();
      if (seen.includes(text)) {
        stream.off('data', onData);
        resolve(seen);
      }
    };
    stream.on('data', onData);
    stream.resume();
    stream.once('end', () => reject(new Error(`stream ended without ${JSON.stringify(text)}; saw ${JSON.stringify(seen)}`)));
  });
}

beforeAll(async () => {
  t = await startTestBroker({ database: 'sqlite' });
  await t.addGroup({ id: 'lab', title: 'Lab', tags: ['x'] });
  ({ agent, device } = await startEnrolledAgent(t, { group_id: 'lab' }, 20_000));
  ({ server: echo, port: echoPort } = await echoServer());
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-qbee-e2e-'));
});

afterAll(async () => {
  await agent?.close();
  echo?.close();
  await t?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('qbee native transport through a real broker and agent', () => {
  it('refuses the upgrade without a valid token', async () => {
    const refused = await connectQbee(t.url, device, 'not-a-token').catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(QbeeUpgradeRefused);
    expect((refused as QbeeUpgradeRefused).status).toBe(401);
    const notADevice = await connectQbee(t.url, 'nope', t.adminToken).catch((e: unknown) => e);
    expect((notADevice as QbeeUpgradeRefused).status).toBe(404);
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request(new URL(`/device/${device}`, t.url), {
        headers: { Connection: 'upgrade', Upgrade: 'websocket', Authorization: t.adminToken },
      });
      req.on('response', (res) => resolve(res.statusCode ?? 0));
      req.on('upgrade', () => reject(new Error('upgraded without the qbee-v1 protocol')));
      req.on('error', reject);
      req.end();
    });
    expect(status).toBe(426);
  });

  it('tunnels UDP: a datagram framed with its port goes out and the answer comes back framed', async () => {
    const server = dgram.createSocket('udp4');
    server.on('message', (msg, rinfo) => server.send(Buffer.concat([Buffer.from('re:'), msg]), rinfo.port, rinfo.address));
    await new Promise<void>((r) => server.bind(0, '127.0.0.1', r));
    const port = server.address().port;
    const client = await connectQbee(t.url, device, t.adminToken);
    try {
      const { stream } = await client.open(QbeeMessage.udpTunnel, `40000:127.0.0.1:${port}`);
      const answer = new Promise<Buffer>((resolve) => stream.once('data', resolve));
      stream.resume();
      const header = Buffer.alloc(4);
      header.writeUInt16BE(port, 0);
      header.writeUInt16BE(5, 2);
      stream.write(Buffer.concat([header, Buffer.from('hello')]));
      const frame = await answer;
      expect(frame.readUInt16BE(0)).toBe(port);
      expect(frame.readUInt16BE(2)).toBe(8);
      expect(frame.subarray(4).toString()).toBe('re:hello');
    } finally {
      client.close();
      server.close();
    }
  });

  it('tunnels TCP: bytes echo through, and the session is audited start and end', async () => {
    const client = await connectQbee(t.url, device, t.adminToken);
    try {
      const stream = await client.tcpTunnel(`127.0.0.1:${echoPort}`);
      const payload = crypto.randomBytes(1024 * 1024 + 5);
      const back = collect(stream);
      let echoed = 0;
      stream.on('data', (d: Buffer) => {
        echoed += d.length;
        if (echoed >= payload.length) stream.end();
      });
      stream.write(payload);
      const received = await back;
      expect(received.length).toBe(payload.length);
      expect(received.equals(payload)).toBe(true);
    } finally {
      client.close();
    }
    const [entry] = await eventually(
      async () => {
        const items = await audit(`device_id=${device}&action=tunnel&event=remote.tunnel.start`);
        return items[0]?.event === 'remote.tunnel.start' && items[0]?.ended_at ? items : undefined;
      },
      10_000,
      'the tunnel end record',
    );
    expect(entry).toMatchObject({ result: 'allowed', source: 'qbee' });
  });

  it('opens a terminal: a typed command runs, a resize is accepted', async () => {
    const client = await connectQbee(t.url, device, t.adminToken);
    try {
      const { stream, sid } = await client.terminal(100, 30);
      expect(sid).toMatch(/^[0-9a-f-]{36}$/);
      const seen = output(stream, 'hi-qbee');
      stream.write('echo hi-$((0))qbee | tr -d 0\n');
      await seen;
      await client.resize(sid, 132, 43);
      const size = output(stream, '43 132');
      stream.write('stty size\n');
      await size;
      await expect(client.resize('no-such-terminal', 80, 24)).rejects.toThrow(QbeeRemoteError);
      stream.write('exit\n');
      await new Promise((r) => stream.once('end', r));
      stream.end(); // as qbee-cli's deferred Close, which the broker no longer waits for (next test)
      // Recorded as any console: its output and the resize, linked from its start entry. The recording
      // is whole once the session's end is in the audit (the broker closes it before writing the end).
      const start = await eventually(
        async () => (await audit(`device_id=${device}&action=console&result=allowed`)).find((e: any) => e.source === 'qbee' && e.ended_at),
        10_000,
        'the console end record',
      );
      const recording = await t.api('GET', `/api/v2/remote/recordings/${start.options.recording}`, { token: t.adminToken });
      expect(recording.status).toBe(200);
      const cast = recording.body as string;
      expect(cast).toContain('hi-qbee');
      expect(cast).toContain('"r","132x43"');
    } finally {
      client.close();
    }
  });

  it('the shell exiting ends the session for the client without its own close: FIN, the end entry, the recording', async () => {
    const qbeeConsoles = async () => (await audit(`device_id=${device}&action=console&result=allowed`)).filter((e: any) => e.source === 'qbee');
    const earlier = new Set((await qbeeConsoles()).map((e: any) => e.id));
    const client = await connectQbee(t.url, device, t.adminToken);
    try {
      const { stream } = await client.terminal(80, 24);
      const id = crypto.randomUUID();
      stream.write(`printf '%s-%s\\n' bye ${id}; exit\n`);
      // Its output, then the broker's FIN; the client never ends its side of the stream.
      const seen = (await collect(stream)).toString();
      expect(seen).toContain(`bye-${id}`);
      expect(stream.writableEnded).toBe(false);
      const entry = await eventually(async () => (await qbeeConsoles()).find((e: any) => !earlier.has(e.id) && e.ended_at), 10_000, 'the console end record');
      expect(entry.end_reason).toBe('exit 0');
      const recording = await t.api('GET', `/api/v2/remote/recordings/${entry.options.recording}`, { token: t.adminToken });
      expect(recording.status).toBe(200);
      expect(recording.body as string).toContain(`bye-${id}`);
      // What the client still sends on the closed stream is dropped; the connection stays usable.
      stream.write('late keystrokes\n');
      const again = await client.tcpTunnel(`127.0.0.1:${echoPort}`);
      const echoed = output(again, 'still-here');
      again.write('still-here');
      await echoed;
      again.destroy();
    } finally {
      client.close();
    }
  });

  it("connect to stdio: the device closing reaches the client as its bytes then one FIN, the connection kept (as qbee's device side closes)", async () => {
    const payload = crypto.randomBytes(700 * 1024);
    const sender = net.createServer((socket) => socket.end(payload));
    await new Promise<void>((resolve) => sender.listen(0, '127.0.0.1', resolve));
    const port = (sender.address() as net.AddressInfo).port;
    const client = await connectQbee(t.url, device, t.adminToken);
    // Every frame the broker sends, as smux's recvLoop reads them: VER CMD LEN(LE16) SID(LE32).
    const frames: { cmd: number; sid: number; length: number }[] = [];
    let raw: Buffer = Buffer.alloc(0);
    client.socket.on('data', (d: Buffer) => {
      raw = Buffer.concat([raw, d]);
      while (raw.length >= 8 && raw.length >= 8 + raw.readUInt16LE(2)) {
        frames.push({ cmd: raw[1], sid: raw.readUInt32LE(4), length: raw.readUInt16LE(2) });
        raw = raw.subarray(8 + raw.readUInt16LE(2));
      }
    });
    try {
      // connectStdio: OpenStream(TCPTunnel), then io.Copy(os.Stdout, stream) until the stream ends.
      const stream = await client.tcpTunnel(`127.0.0.1:${port}`);
      const got = await collect(stream);
      expect(got.equals(payload)).toBe(true);
      // Then its deferred stream.Close() sends FIN, and the session stays usable.
      stream.destroy();
      const again = await client.tcpTunnel(`127.0.0.1:${echoPort}`);
      const echoed = output(again, 'after');
      again.write('after');
      await echoed;
      again.destroy();
      const mine = frames.filter((f) => f.sid === stream.id);
      const fins = mine.filter((f) => f.cmd === 1);
      expect(fins).toHaveLength(1);
      // The FIN comes after every data frame (smux's WriteTo then returns io.EOF to io.Copy).
      expect(mine.at(-1)!.cmd).toBe(1);
      expect(mine.filter((f) => f.cmd === 2).reduce((n, f) => n + f.length, 0)).toBe(payload.length + 3);
    } finally {
      client.close();
      sender.close();
    }
  });

  it('term with a command: runs that argv in the pty, audited as a console with the command, and ends with it', async () => {
    const client = await connectQbee(t.url, device, t.adminToken);
    try {
      // json.Marshal(PTYCommand) as ConnectTerminal sends it for `qbee-cli term <dev> printf '%s-%s\n' 'a b' '$HOME'`.
      const payload = '{"sid":"","cols":100,"rows":30,"command":"printf","command_args":["%s-%s\\n","a b","$HOME"]}';
      const { stream, payload: sid } = await client.open(QbeeMessage.pty, payload);
      expect(sid.toString()).toMatch(/^[0-9a-f-]{36}$/);
      const seen = (await collect(stream)).toString();
      // argv, not shell text: "$HOME" arrives as written, "a b" stays one word.
      expect(seen).toContain('a b-$HOME');
      const start = (await audit(`device_id=${device}&action=console&event=remote.console.start`)).find(
        (e: any) => e.source === 'qbee' && Array.isArray(e.options.command),
      );
      expect(start.options.command).toEqual(['printf', '%s-%s\n', 'a b', '$HOME']);
      // Malformed commands are refused, never replaced by a shell.
      for (const bad of ['{"cols":80,"rows":24,"command":5}', '{"cols":80,"rows":24,"command_args":["x"]}', '{"cols":80,"rows":24,"command":"a\\u0000b"}']) {
        await expect(client.open(QbeeMessage.pty, bad), bad).rejects.toThrow(QbeeRemoteError);
      }
    } finally {
      client.close();
    }
  });

  it("passes qbee-cli's copy gate: the agent's cf_version is at least 2026.19 as inventory.go compares it", async () => {
    const r = await t.api('GET', `/api/v2/inventory/${device}`, { token: t.adminToken });
    expect(r.status).toBe(200);
    const version = r.body.system.cf_version as string;
    expect(version).toBe(ROOT_VERSION);
    // connect.go: UploadFileToDevice / DownloadFileFromDevice refuse below "2026.19".
    expect(isMinimumAgentVersion(version, '2026.19')).toBe(true);
    expect(isMinimumAgentVersion('0.1.0', '2026.19')).toBe(false);
  });

  it("copies with the file message type of older clients (0x16) as with qbee's (0x20)", async () => {
    const dir = path.join(work, 'legacy');
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(path.join(dir, 'l.txt'), 'legacy\n');
    const client = await connectQbee(t.url, device, t.adminToken);
    try {
      for (const type of [QbeeMessage.file, QbeeMessage.fileLegacy]) {
        const got = readTar(zlib.gunzipSync(await client.download(path.join(dir, 'l.txt'), type)));
        expect(got.map((e) => [e.name, e.data?.toString()])).toEqual([['l.txt', 'legacy\n']]);
      }
      expect(QbeeMessage.file).toBe(0x20);
    } finally {
      client.close();
    }
  });

  it('copies a file and a directory from the device as a gzip tar, and a directory to it', async () => {
    const dir = path.join(work, 'tree');
    fs.mkdirSync(path.join(dir, 'sub'), { recursive: true });
    const big = crypto.randomBytes(300 * 1024 + 3);
    fs.writeFileSync(path.join(dir, 'a.txt'), 'alpha\n');
    fs.writeFileSync(path.join(dir, 'sub', 'big.bin'), big);
    const client = await connectQbee(t.url, device, t.adminToken);
    try {
      const file = readTar(zlib.gunzipSync(await client.download(path.join(dir, 'a.txt'))));
      expect(file.map((e) => [e.name, e.type, e.data?.toString()])).toEqual([['a.txt', 'file', 'alpha\n']]);

      const tree = readTar(zlib.gunzipSync(await client.download(dir)));
      const byName = new Map(tree.map((e) => [e.name, e]));
      expect([...byName.keys()].sort()).toEqual(['tree/', 'tree/a.txt', 'tree/sub/', 'tree/sub/big.bin']);
      expect(byName.get('tree/sub/big.bin')!.data!.equals(big)).toBe(true);

      const entries: TarEntry[] = [
        { name: 'up/', type: 'directory', mode: 0o755 },
        { name: 'up/one.txt', type: 'file', mode: 0o600, data: Buffer.from('one') },
        { name: 'up/deep/', type: 'directory', mode: 0o755 },
        { name: 'up/deep/two.bin', type: 'file', mode: 0o644, data: big },
      ];
      const target = path.join(work, 'uploaded');
      await client.upload(target, zlib.gzipSync(writeTar(entries)));
      expect(fs.readFileSync(path.join(target, 'one.txt'), 'utf8')).toBe('one');
      expect(fs.readFileSync(path.join(target, 'deep', 'two.bin')).equals(big)).toBe(true);
      // Into an existing directory the tree keeps its top name, as qbee's extractTar places it
      // (`qbee-cli copy ./up <device>:/existing` gives /existing/up/…).
      const existing = path.join(work, 'existing');
      fs.mkdirSync(existing);
      await client.upload(existing, zlib.gzipSync(writeTar(entries)));
      expect(fs.readFileSync(path.join(existing, 'up', 'one.txt'), 'utf8')).toBe('one');
      expect(fs.readFileSync(path.join(existing, 'up', 'deep', 'two.bin')).equals(big)).toBe(true);
    } finally {
      client.close();
    }
  });

  it('refuses, and audits as denied, a tunnel port the role does not grant', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: [`*/tunnel(proto=tcp;port=${echoPort})`] }]);
    const client = await connectQbee(t.url, device, user.token);
    try {
      const ok = await client.tcpTunnel(`127.0.0.1:${echoPort}`);
      const pong = output(ok, 'ping');
      ok.write('ping');
      await pong;
      ok.end();
      const refused = await client.tcpTunnel('127.0.0.1:22').catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(QbeeRemoteError);
      expect((refused as Error).message).toMatch(/Not allowed/);
      await expect(client.open(QbeeMessage.pty, JSON.stringify({ cols: 80, rows: 24 }))).rejects.toThrow(QbeeRemoteError);
      await expect(client.tcpTunnel('no-port-here')).rejects.toThrow(/host:port/);
      await expect(client.open(QbeeMessage.command, '{}')).rejects.toThrow(/^commands without a terminal are not supported/);
      // Types qbee's transport has for the other direction (GoAway, edge to device) or does not have: ERROR, the connection kept.
      await expect(client.open(QbeeMessage.goAway)).rejects.toThrow(/^message type 0x03 is not supported/);
      await expect(client.open(0x7f, 'x')).rejects.toThrow(/^message type 0x7f is not supported/);
      const still = await client.tcpTunnel(`127.0.0.1:${echoPort}`);
      const pang = output(still, 'pang');
      still.write('pang');
      await pang;
      still.end();
    } finally {
      client.close();
    }
    const denied = await audit(`user_id=${user.id}&result=denied`);
    expect(denied.map((e) => [e.event, e.action, e.source])).toEqual(
      expect.arrayContaining([
        ['remote.tunnel.denied', 'tunnel', 'qbee'],
        ['remote.console.denied', 'console', 'qbee'],
        ['remote.unsupported.denied', 'unsupported', 'qbee'],
      ]),
    );
    expect(denied.find((e) => e.action === 'tunnel')).toMatchObject({ device_id: device });
    expect(denied.filter((e) => e.action === 'tunnel').map((e) => e.reason)).toEqual(expect.arrayContaining([expect.stringMatching(/host:port/)]));
  });

  it('ends a live terminal within seconds once the user is disabled', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:x/console'] }]);
    const client = await connectQbee(t.url, device, user.token);
    try {
      const { stream } = await client.terminal(80, 24);
      const ended = new Promise((r) => stream.once('end', r));
      stream.resume();
      expect((await t.api('PATCH', `/api/v2/user/${user.id}`, { token: t.adminToken, body: { disabled: true } })).status).toBe(200);
      await ended;
      const [entry] = await eventually(
        async () => {
          const items = await audit(`user_id=${user.id}&action=console&event=remote.console.start`);
          return items[0]?.ended_at ? items : undefined;
        },
        10_000,
        'the end record',
      );
      expect(JSON.stringify(entry)).toMatch(/access withdrawn/);
    } finally {
      client.close();
    }
  });

  it('holds at most the per-user number of connections, and frees a place when one closes', async () => {
    const user = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:x/console'] }]);
    const held: QbeeClient[] = [];
    for (let i = 0; i < QBEE_MAX_CONNECTIONS_PER_USER; i++) held.push(await connectQbee(t.url, device, user.token));
    const refused = await connectQbee(t.url, device, user.token).catch((e: unknown) => e);
    expect((refused as QbeeUpgradeRefused).status).toBe(429);
    const closed = new Promise((r) => held[0].session.once('close', r));
    held[0].close();
    await closed;
    const again = await eventually(() => connectQbee(t.url, device, user.token).catch(() => undefined), 10_000, 'a free place');
    again.close();
    for (const c of held.slice(1)) c.close();
  });

  it('reload (0x14) has the agent run its configuration, audited, its connection kept', async () => {
    const from = agent.logs.length;
    const connectedAt = t.broker.services.agents.connectionInfo(device)?.connected_at;
    const client = await connectQbee(t.url, device, t.adminToken);
    try {
      await client.reload();
    } finally {
      client.close();
    }
    await agent.waitForLog((l) => l.msg === 'configuration run requested by the broker', 10_000, from);
    const [entry] = await audit(`device_id=${device}&action=reload&event=remote.reload.start`);
    expect(entry).toMatchObject({ event: 'remote.reload.start', result: 'allowed', source: 'qbee', options: { mode: 'run' } });
    expect(t.broker.services.agents.connectionInfo(device)?.connected_at).toBe(connectedAt);
  });

  it('run-agent keeps the agent connected: a tunnel transfer in flight completes, and runs right after each other all answer 200', async () => {
    const payload = crypto.randomBytes(8 * 1024 * 1024);
    const sender = net.createServer((socket) => socket.end(payload));
    await new Promise<void>((resolve) => sender.listen(0, '127.0.0.1', resolve));
    const port = (sender.address() as net.AddressInfo).port;
    const connectedAt = t.broker.services.agents.connectionInfo(device)?.connected_at;
    const from = agent.logs.length;
    const client = await connectQbee(t.url, device, t.adminToken);
    try {
      const stream = await client.tcpTunnel(`127.0.0.1:${port}`);
      const parts: Buffer[] = [];
      let received = 0;
      const firstBytes = new Promise<void>((resolve) =>
        stream.on('data', (d: Buffer) => {
          parts.push(d);
          received += d.length;
          if (received > 0) resolve();
        }),
      );
      const ended = new Promise<void>((resolve, reject) => {
        stream.once('end', resolve);
        stream.once('error', reject);
      });
      // The reader holds back after the first bytes: the transfer is in flight while the agent is asked to run, three times.
      stream.resume();
      await firstBytes;
      stream.pause();
      const answers: number[] = [];
      for (let i = 0; i < 3; i++) answers.push((await t.api('GET', `/api/v2/device/${device}/run-agent`, { token: t.adminToken })).status);
      expect(answers).toEqual([200, 200, 200]);
      // A stream opened right after the run works.
      const echoStream = await client.tcpTunnel(`127.0.0.1:${echoPort}`);
      const echoed = output(echoStream, 'still-here');
      echoStream.write('still-here');
      await echoed;
      echoStream.destroy();
      stream.resume();
      await ended;
      expect(Buffer.concat(parts).equals(payload)).toBe(true);
    } finally {
      client.close();
      sender.close();
    }
    await agent.waitForLog((l) => l.msg === 'configuration run requested by the broker', 10_000, from);
    expect(agent.logs.slice(from).some((l) => l.msg.includes('reload'))).toBe(false);
    expect(t.broker.services.agents.connectionInfo(device)?.connected_at).toBe(connectedAt);
  });
});
