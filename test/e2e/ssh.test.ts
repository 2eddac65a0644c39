/**
 * End to end: the SSH gateway with the real OpenSSH client (ssh, in BatchMode, with a temporary
 * HOME and known_hosts) against a real broker and a real agent process. Certificates come from
 * POST /ssh/certificate with a key made as `fleet login` makes it (cli/ssh.ts).
 */
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureKeyPair, saveCertificate, sshConfigBlock, sshFiles, type IssuedCertificate } from '../../cli/ssh.js';
import { openSshPrivateKey, publicKeyLine } from '../../shared/ssh-keys.js';
import { SSH_MAX_CHANNELS } from '../../broker/ssh/gateway.js';
import { echoServer, eventually, startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';

const FLEET = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'bin', 'fleet.js');

let t: TestBroker;
let agent: TestAgent;
let device: string;
let work: string;
let echo: net.Server;
let echoPort: number;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A user's client set-up: its own config dir (key, certificate, known_hosts) and ssh config file. */
interface SshUser {
  env: NodeJS.ProcessEnv;
  config: string;
  token: string;
}

async function sshUser(token: string, name: string): Promise<SshUser> {
  const home = fs.mkdtempSync(path.join(work, `${name}-`));
  const env = { ...process.env, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config') };
  const publicKey = ensureKeyPair('lab', env);
  const r = await t.api<IssuedCertificate>('POST', '/api/v2/ssh/certificate', { token, body: { public_key: publicKey } });
  expect(r.status).toBe(200);
  saveCertificate('lab', t.url, r.body, env);
  const config = path.join(home, 'ssh_config');
  fs.writeFileSync(config, sshConfigBlock('lab', t.url, r.body.ssh_port, env));
  return { env, config, token };
}

function ssh(user: SshUser, args: string[], input = ''): Promise<Run> {
  const child = spawn('ssh', ['-F', user.config, '-o', 'BatchMode=yes', '-o', 'ConnectTimeout=20', ...args], { env: user.env });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  child.stdin.end(input);
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

async function audit(query: string): Promise<any[]> {
  const r = await t.api('GET', `/api/v2/commitlist?${query}`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

let admin: SshUser;
const host = () => `${device}.127.0.0.1`;

beforeAll(async () => {
  t = await startTestBroker({ database: 'sqlite', env: { SSH_PORT: '0' } });
  await t.addGroup({ id: 'lab', title: 'Lab', tags: ['x'] });
  ({ agent, device } = await startEnrolledAgent(t, { group_id: 'lab' }, 20_000));
  ({ server: echo, port: echoPort } = await echoServer());
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-ssh-e2e-'));
  admin = await sshUser(t.adminToken, 'admin');
});

afterAll(async () => {
  await agent?.close();
  echo?.close();
  await t?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('SSH gateway with the OpenSSH client', () => {
  it('fleet login writes the key and certificate, fleet ssh-config the block: ssh root@<device name>.<host> works as is', async () => {
    const home = fs.mkdtempSync(path.join(work, 'cli-'));
    const { FLEET_URL: _u, FLEET_TOKEN: _t, ...rest } = process.env;
    const env: NodeJS.ProcessEnv = { ...rest, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config') };
    const fleet = (args: string[], input = '') =>
      new Promise<Run>((resolve) => {
        const child = spawn(process.execPath, [FLEET, ...args], { env });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d) => (stdout += d));
        child.stderr.on('data', (d) => (stderr += d));
        child.stdin.end(input);
        child.on('close', (code) => resolve({ code, stdout, stderr }));
      });
    const login = await fleet(['login', '--url', t.url, '--email', ADMIN.email, '--password-stdin'], `${ADMIN.password}\n`);
    expect(login.code).toBe(0);
    expect(login.stderr).toMatch(/SSH certificate valid until/);
    const files = sshFiles('127.0.0.1', env);
    // The private key never left this machine: readable by the user only, and not in what the broker keeps.
    expect(fs.statSync(files.key).mode & 0o077).toBe(0);
    const config = await fleet(['ssh-config']);
    expect(config.code).toBe(0);
    const file = path.join(home, 'ssh_config');
    fs.writeFileSync(file, config.stdout);
    const row = await t.broker.services.store.db.selectFrom('nodes').select('title').where('node_id', '=', device).executeTakeFirstOrThrow();
    const run = await ssh({ env, config: file, token: '' }, [`root@${row.title}.127.0.0.1`, 'echo by-name']);
    expect(run.stderr).not.toMatch(/Host key verification failed|authenticity/);
    expect(run.stdout).toBe('by-name\n');
  });

  it('runs a command on the device as a console: output, exit status, audit (source ssh) and recording', async () => {
    const run = await ssh(admin, [`root@${host()}`, 'echo hello-$((6*7)); exit 3']);
    expect(run.stdout).toBe('hello-42\n');
    expect(run.code).toBe(3);
    const [entry] = await eventually(
      async () => {
        const items = await audit(`device_id=${device}&action=console&event=remote.console.start`);
        return items[0]?.ended_at ? items : undefined;
      },
      15_000,
      'the console end record',
    );
    expect(entry).toMatchObject({ result: 'allowed', source: 'ssh', user_id: expect.any(String) });
    expect(JSON.stringify(entry)).toContain('echo hello');
    const recording = JSON.stringify(entry).match(/"recording":"([0-9a-f-]{36})"/)?.[1];
    expect(recording).toBeTruthy();
    const cast = await t.api('GET', `/api/v2/remote/recordings/${recording}`, { token: t.adminToken });
    expect(cast.status).toBe(200);
    expect(String(cast.body)).toContain('hello-42');
  });

  it('passes binary input and output through a command without a terminal, 8-bit clean', async () => {
    const payload = crypto.randomBytes(200_000).toString('base64');
    const run = await ssh(admin, [`root@${host()}`, `head -c ${payload.length} | sha256sum`], payload);
    expect(run.stdout.split(' ')[0]).toBe(crypto.createHash('sha256').update(payload).digest('hex'));
    expect(run.code).toBe(0);
  });

  it('forwards a local port to the device (ssh -L): a tunnel decided and audited as one', async () => {
    const local = await new Promise<number>((resolve) => {
      const s = net.createServer();
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(port));
      });
    });
    const child = spawn(
      'ssh',
      ['-F', admin.config, '-o', 'BatchMode=yes', '-o', 'ExitOnForwardFailure=yes', '-N', '-L', `${local}:127.0.0.1:${echoPort}`, `root@${host()}`],
      { env: admin.env },
    );
    try {
      const echoed = await eventually(
        () =>
          new Promise<string | undefined>((resolve) => {
            const socket = net.connect(local, '127.0.0.1');
            let got = '';
            socket.on('data', (d) => {
              got += d;
              if (got.includes('ping-through')) {
                socket.end();
                resolve(got);
              }
            });
            socket.on('error', () => resolve(undefined));
            socket.on('close', () => resolve(undefined));
            socket.write('ping-through');
          }),
        20_000,
        'the forwarded port',
      );
      expect(echoed).toContain('ping-through');
    } finally {
      child.kill();
    }
    const items = await eventually(async () => {
      const found = await audit(`device_id=${device}&action=tunnel`);
      return found.some((e) => e.source === 'ssh' && e.event === 'remote.tunnel.start') ? found : undefined;
    });
    expect(items.find((e) => e.source === 'ssh' && e.event === 'remote.tunnel.start')).toMatchObject({
      result: 'allowed',
      options: expect.objectContaining({ port: echoPort }),
    });
  });

  it('refuses remote forwarding (ssh -R) and the sftp subsystem with a message', async () => {
    const r = await ssh(admin, ['-o', 'ExitOnForwardFailure=yes', '-R', '0:127.0.0.1:1', `root@${host()}`, 'true']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/remote port forwarding failed/i);
    const sftp = await ssh(admin, ['-s', `root@${host()}`, 'sftp']);
    expect(sftp.code).toBe(1);
    expect(sftp.stderr).toContain('not supported by this gateway yet');
  });

  it('refuses a certificate the broker did not sign, a plain key, and a signature by another key', async () => {
    // A CA of the attacker's own, issuing for the admin's email.
    const mallory = await sshUser(t.adminToken, 'mallory');
    const { dir } = sshFiles('lab', mallory.env);
    const forged = crypto.generateKeyPairSync('ed25519');
    const { SshAuthority } = await import('../../broker/ssh/authority.js');
    const store = new Map<string, unknown>();
    const rogue = await SshAuthority.load({
      getOrCreate: async <T>(k: string, make: () => T) => (store.has(k) ? store.get(k) : (store.set(k, make()), store.get(k))) as T,
    });
    fs.writeFileSync(path.join(dir, 'lab'), openSshPrivateKey(forged.privateKey), { mode: 0o600 });
    fs.writeFileSync(path.join(dir, 'lab.pub'), `${publicKeyLine(forged.publicKey)}\n`);
    const sessionId = (JSON.parse(Buffer.from(t.adminToken.split('.')[1], 'base64url').toString()) as { sid: string }).sid;
    fs.writeFileSync(
      path.join(dir, 'lab-cert.pub'),
      `${rogue.issue(forged.publicKey, { keyId: 'admin@example.com', principals: ['admin@example.com'], sessionId, validBefore: Math.floor(Date.now() / 1000) + 600 })}\n`,
    );
    const r = await ssh(mallory, [`root@${host()}`, 'true']);
    expect(r.code).toBe(255);
    expect(r.stderr).toMatch(/Permission denied/);
    // The admin's certificate with another private key: the signature does not match.
    fs.copyFileSync(sshFiles('lab', admin.env).cert, path.join(dir, 'lab-cert.pub'));
    const wrongKey = await ssh(mallory, [`root@${host()}`, 'true']);
    expect(wrongKey.code).toBe(255);
    // Passwords are never asked for.
    const password = await ssh(mallory, ['-o', 'PreferredAuthentications=password,keyboard-interactive', `root@${host()}`, 'true']);
    expect(password.code).toBe(255);
    const denied = await eventually(async () => {
      const items = await audit('event=remote.ssh.denied');
      return items.length >= 2 ? items : undefined;
    });
    expect(denied.every((e) => e.result === 'denied' && e.source === 'ssh')).toBe(true);
  });

  it("denies a login the user's grant does not allow, audited", async () => {
    const u = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:x:console(user=nobody)'] }, { permission: 'device:read' }]);
    const user = await sshUser(u.token, 'limited');
    const r = await ssh(user, [`root@${host()}`, 'id -un']);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/Not allowed/);
    const items = await audit(`device_id=${device}&action=console&user_id=${u.id}`);
    expect(items[0]).toMatchObject({ result: 'denied', source: 'ssh' });
  });

  it('ends the certificate with its sign-in session: signed out, the next connection is refused', async () => {
    const u = await t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const user = await sshUser(u.token, 'leaver');
    const ok = await ssh(user, [`root@${host()}`, 'echo in']);
    expect(ok.stdout).toBe('in\n');
    expect((await t.api('POST', '/api/v2/logout', { token: u.token })).status).toBeLessThan(300);
    const after = await ssh(user, [`root@${host()}`, 'echo in']);
    expect(after.code).toBe(255);
    expect(after.stdout).toBe('');
  });

  it('ends a live shell within seconds once the grant is withdrawn', async () => {
    const u = await t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const user = await sshUser(u.token, 'withdrawn');
    const child = spawn('ssh', ['-F', user.config, '-o', 'BatchMode=yes', `root@${host()}`, 'echo started; sleep 60'], { env: user.env });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const closed = new Promise<number | null>((resolve) => child.on('close', resolve));
    await eventually(() => out.includes('started'), 20_000, 'the command to start');
    await t.api('PUT', `/api/v2/role/${u.roleId}`, { token: t.adminToken, body: { name: `r-${u.roleId}`, policies: [{ permission: 'device:read' }] } });
    expect(await closed).toBe(255);
    expect(err).toMatch(/Access withdrawn/);
  });

  it('bounds the channels of one connection: sessions past the limit are refused, the others run', async () => {
    const socket = path.join(work, 'master.sock');
    const master = spawn('ssh', ['-F', admin.config, '-o', 'BatchMode=yes', '-M', '-S', socket, '-N', `root@${host()}`], { env: admin.env });
    try {
      await eventually(() => fs.existsSync(socket), 20_000, 'the master connection');
      const runs = await Promise.all(Array.from({ length: SSH_MAX_CHANNELS + 3 }, () => ssh(admin, ['-S', socket, `root@${host()}`, 'sleep 4; echo done'])));
      const done = runs.filter((r) => r.stdout === 'done\n').length;
      // The ssh client falls back to a connection of its own for a session its master was refused.
      const refused = runs.filter((r) => /open refused by peer/i.test(r.stderr));
      expect(refused.length).toBeGreaterThan(0);
      expect(refused.length).toBeLessThanOrEqual(3);
      expect(done).toBe(runs.length);
    } finally {
      master.kill();
    }
  });
});
