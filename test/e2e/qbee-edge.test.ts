/**
 * End to end: qbee-cli's way to a device (connect.go) against the default start — no PUBLIC_URL, no
 * TLS configured — and against a broker serving TLS itself: GetDeviceStatus names the edge,
 * qbee-cli dials `https://<edge>/device/<uuid>` (checking the certificate unless the edge is
 * `localhost:…`), then tunnels, a terminal and a copy run over it.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import tls from 'node:tls';
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../broker/environment.js';
import { createLogger } from '../../broker/logger.js';
import { startBroker, type RunningBroker } from '../../broker/server.js';
import { QbeeMessage } from '../../shared/qbee.js';
import { readTar, writeTar } from '../../shared/tar.js';
import { echoServer, startAgent, startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { collect, connectQbeeEdge, type QbeeClient } from '../support/qbee-client.js';
import { selfSignedCertificate } from '../support/tls.js';

let echo: net.Server;
let echoPort: number;
let work: string;

beforeAll(async () => {
  ({ server: echo, port: echoPort } = await echoServer());
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-qbee-edge-'));
});

afterAll(() => {
  echo?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

async function echoes(client: QbeeClient, text: string): Promise<string> {
  const { stream } = await client.open(QbeeMessage.tcpTunnel, `127.0.0.1:${echoPort}`);
  const seen = new Promise<string>((resolve) => {
    let got = '';
    stream.on('data', (d: Buffer) => {
      got += d.toString();
      if (got.length >= text.length) resolve(got);
    });
    stream.resume();
  });
  stream.write(text);
  const got = await seen;
  stream.destroy();
  return got;
}

describe('the default start (no PUBLIC_URL, no TLS configured)', () => {
  let t: TestBroker;
  let agent: TestAgent;
  let device: string;
  let local: string;

  beforeAll(async () => {
    t = await startTestBroker({ database: 'sqlite' });
    expect(t.broker.url).toMatch(/^http:/);
    ({ agent, device } = await startEnrolledAgent(t, {}, 20_000));
    local = `http://localhost:${t.broker.port}`;
  });

  afterAll(async () => {
    await agent?.close();
    await t?.close();
  });

  it('names the edge from the request host, loopback written localhost; edge_version 1', async () => {
    for (const base of [local, `http://127.0.0.1:${t.broker.port}`]) {
      const r = await fetch(`${base}/api/v2/device/${device}/status`, { headers: { authorization: `Bearer ${t.adminToken}` } });
      expect(await r.json()).toMatchObject({ uuid: device, remote_access: true, edge: `localhost:${t.broker.port}`, edge_version: 1 });
    }
  });

  it('answers TLS on the same port with a certificate of its own, kept in DATA_DIR', async () => {
    const socket = tls.connect({ host: '127.0.0.1', port: t.broker.port, servername: 'localhost', rejectUnauthorized: false });
    const cert = await new Promise<tls.PeerCertificate>((resolve, reject) => {
      socket.once('secureConnect', () => resolve(socket.getPeerCertificate()));
      socket.once('error', reject);
    });
    socket.destroy();
    expect(cert.subjectaltname).toContain('DNS:localhost');
    const kept = new crypto.X509Certificate(fs.readFileSync(path.join(t.dataDir, 'edge-tls', 'cert.pem')));
    expect(kept.fingerprint256).toBe(cert.fingerprint256);
    expect(fs.statSync(path.join(t.dataDir, 'edge-tls', 'key.pem')).mode & 0o077).toBe(0);
    // Plain HTTP on the port is untouched.
    expect((await fetch(`${local}/api/v2/health`)).status).toBe(200);
  });

  it('connect, term and copy as qbee-cli does them: status, then https://<edge>/device/<uuid>', async () => {
    const client = await connectQbeeEdge(local, device, t.adminToken);
    try {
      expect(await echoes(client, 'over-the-edge')).toBe('over-the-edge');
      const { stream } = await client.open(QbeeMessage.pty, '{"sid":"","cols":80,"rows":24,"command":"echo","command_args":["edge-term"]}');
      expect((await collect(stream)).toString()).toContain('edge-term');
      const dir = path.join(work, 'edge-tree');
      fs.mkdirSync(path.join(dir, 'sub'), { recursive: true });
      fs.writeFileSync(path.join(dir, 'sub', 'f.txt'), 'edge-file');
      const tree = readTar(zlib.gunzipSync(await client.download(dir)));
      expect(tree.map((e) => e.name).sort()).toEqual(['edge-tree/', 'edge-tree/sub/', 'edge-tree/sub/f.txt']);
      const into = path.join(work, 'edge-up');
      fs.mkdirSync(into);
      await client.upload(into, zlib.gzipSync(writeTar(tree)));
      expect(fs.readFileSync(path.join(into, 'edge-tree', 'sub', 'f.txt'), 'utf8')).toBe('edge-file');
    } finally {
      client.close();
    }
  });
});

describe('a broker serving TLS itself (TLS_CERT_FILE)', () => {
  let dir: string;
  let certs: { cert: string; key: string };
  let broker: RunningBroker;
  let agent: TestAgent;
  let token: string;
  let device: string;

  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-qbee-edge-tls-'));
    certs = selfSignedCertificate(dir, 'broker');
    const config = loadConfig({
      DATA_DIR: path.join(dir, 'data'),
      PORT: '0',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'silent',
      ADMIN_EMAIL: 'edge-admin@example.com',
      ADMIN_PASSWORD: 'edge-admin-password-1',
      TLS_CERT_FILE: certs.cert,
      TLS_KEY_FILE: certs.key,
    });
    broker = await startBroker(config, createLogger('silent'));
    const { key } = await broker.services.enrol.createKey({ auto_accept: true }, null);
    agent = startAgent({ broker: broker.url, bootstrapKey: key, caFile: certs.cert });
    device = await agent.deviceId();
    await agent.waitForLog((l) => l.msg === 'connected to the broker');
    const login = await new Promise<string>((resolve, reject) => {
      const req = https.request(
        `https://localhost:${broker.port}/api/v2/login`,
        { method: 'POST', ca: fs.readFileSync(certs.cert), headers: { 'content-type': 'application/json' } },
        (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve(body));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify({ email: 'edge-admin@example.com', password: 'edge-admin-password-1' }));
    });
    token = (JSON.parse(login) as { token: string }).token;
  });

  afterAll(async () => {
    await agent?.close();
    await broker?.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('serves the edge with the configured certificate, and qbee-cli connects through it', async () => {
    const client = await connectQbeeEdge(`https://localhost:${broker.port}`, device, token, { ca: fs.readFileSync(certs.cert) });
    try {
      expect(await echoes(client, 'tls-edge')).toBe('tls-edge');
    } finally {
      client.close();
    }
    // No certificate of its own was made: the configured one is the edge's.
    expect(fs.existsSync(path.join(dir, 'data', 'edge-tls'))).toBe(false);
  });
});
