/**
 * The SSH gateway with several brokers on one database: a certificate signed by one broker and its
 * known_hosts line work on another (the CA and host key are shared), and the gateway of a broker
 * reaches an agent connected to another through the peer link, as consoles do.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema } from '../../broker/db/database.js';
import { withFleetOnPath } from '../support/fleet-path.js';
import { ensureKeyPair, saveCertificate, sshConfigBlock, sshFiles, type IssuedCertificate } from '../../cli/ssh.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { PG_URL, startTestBroker, type TestBroker } from '../support/broker.js';
import { clusterEnv } from '../support/cluster.js';

const { schema, env: common } = clusterEnv(300);

let a: TestBroker;
let b: TestBroker;
let agent: TestAgent;
let device: string;
let work: string;

beforeAll(async () => {
  a = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-a', SSH_PORT: '0' } });
  b = await startTestBroker({ database: 'postgres', env: { ...common, BROKER_ID: 'broker-b', SSH_PORT: '0' } });
  const created = await a.api('POST', '/api/v2/bootstrapkey', { token: a.adminToken, body: { auto_accept: true } });
  agent = startAgent({ broker: a.url, bootstrapKey: Object.keys(created.body as object)[0] });
  device = await agent.waitConnected(a, 60_000);
  await eventually(() => b.broker.services.locator.isConnected(device), 10_000, 'broker B to see the agent on A');
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-ssh-cluster-'));
});

afterAll(async () => {
  await agent?.close();
  await b?.close();
  await a?.close();
  await dropSchema(PG_URL, schema);
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('SSH gateway across brokers', () => {
  it("a certificate from broker A opens a console through broker B's gateway on the device connected to A", async () => {
    const env = await withFleetOnPath({ ...process.env, HOME: work, XDG_CONFIG_HOME: path.join(work, '.config') });
    const issued = await a.api<IssuedCertificate>('POST', '/api/v2/ssh/certificate', { token: a.adminToken, body: { public_key: ensureKeyPair('lab', env) } });
    expect(issued.status).toBe(200);
    const portB = b.broker.services.ssh.gateway.port as number;
    expect(portB).not.toBe(issued.body.ssh_port);
    // What fleet login would have written had it signed in through B: same host key, B's port.
    saveCertificate('lab', a.url, { ...issued.body, ssh_port: portB }, env);
    const config = path.join(work, 'ssh_config');
    fs.writeFileSync(config, sshConfigBlock('lab', a.url, portB, env));
    expect(fs.readFileSync(sshFiles('lab', env).knownHosts, 'utf8')).toContain(issued.body.host_key);
    const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn('ssh', ['-F', config, '-o', 'BatchMode=yes', `root@${device}.127.0.0.1`, 'echo across-$((40+2))'], { env });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.stdin.end();
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    expect(run.stderr).not.toMatch(/Host key verification failed/);
    expect(run.stdout, run.stderr).toBe('across-42\n');
    expect(run.code).toBe(0);
    const audit = await a.api('GET', `/api/v2/commitlist?device_id=${device}&event=remote.console.start`, { token: a.adminToken });
    expect(audit.body.items[0]).toMatchObject({ source: 'ssh', result: 'allowed' });
  });
});
