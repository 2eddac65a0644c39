/**
 * End to end: signing in to the SSH gateway with a registered public key (SSH_USER_KEYS) with the
 * real OpenSSH client: Ed25519, ECDSA and RSA keys log in as their owner; a key presented for
 * another user's login, an unregistered key, or any key on a broker with the setting off is
 * refused; removing the key or disabling its user ends a live session.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { knownHostsLine } from '../../shared/ssh-config.js';
import { eventually, startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

let t: TestBroker;
let off: TestBroker;
let agent: TestAgent;
let device: string;
let work: string;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** A key pair made by ssh-keygen, and an ssh config using it (no certificate) for the broker's gateway. */
interface KeyUser {
  config: string;
  publicKey: string;
  env: NodeJS.ProcessEnv;
}

function keyUser(broker: TestBroker, name: string, type: 'ed25519' | 'rsa' | 'ecdsa' = 'ed25519'): KeyUser {
  const home = fs.mkdtempSync(path.join(work, `${name}-`));
  const key = path.join(home, 'id');
  execFileSync('ssh-keygen', ['-q', '-t', type, ...(type === 'rsa' ? ['-b', '2048'] : []), '-N', '', '-C', name, '-f', key]);
  const port = broker.broker.services.ssh.gateway.port as number;
  const knownHosts = path.join(home, 'known_hosts');
  fs.writeFileSync(knownHosts, `${knownHostsLine(broker.url, port, broker.broker.services.ssh.authority.hostPublicKey)}\n`);
  const common = [`  IdentityFile ${key}`, '  IdentitiesOnly yes', `  UserKnownHostsFile ${knownHosts}`, '  StrictHostKeyChecking yes'];
  const config = path.join(home, 'ssh_config');
  fs.writeFileSync(
    config,
    ['Host gw', '  HostName 127.0.0.1', `  Port ${port}`, '  User fleet', ...common, 'Host *.127.0.0.1', '  ProxyJump gw', ...common, ''].join('\n'),
  );
  return { config, publicKey: fs.readFileSync(`${key}.pub`, 'utf8').trim(), env: { ...process.env, HOME: home } };
}

function start(user: KeyUser, args: string[]): { child: ChildProcess; done: Promise<Run>; out: () => string } {
  const child = spawn('ssh', ['-F', user.config, '-o', 'BatchMode=yes', '-o', 'ConnectTimeout=20', ...args], { env: user.env });
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d) => (stdout += d));
  child.stderr?.on('data', (d) => (stderr += d));
  child.stdin?.end();
  const done = new Promise<Run>((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
  return { child, done, out: () => stdout };
}

const ssh = (user: KeyUser, args: string[]) => start(user, args).done;
const host = () => `${device}.127.0.0.1`;
const grants = [{ permission: 'remote-access:connect' }, { permission: 'device:read' }];

async function register(broker: TestBroker, token: string, user: KeyUser): Promise<string> {
  const r = await broker.api('POST', '/api/v2/ssh/keys', { token, body: { public_key: user.publicKey } });
  expect(r.status).toBe(201);
  return r.body.key_id;
}

beforeAll(async () => {
  [t, off] = await Promise.all([
    startTestBroker({ database: 'sqlite', env: { SSH_PORT: '0', SSH_USER_KEYS: 'true' } }),
    startTestBroker({ env: { SSH_PORT: '0' } }),
  ]);
  await t.addGroup({ id: 'lab', title: 'Lab', tags: ['x'] });
  ({ agent, device } = await startEnrolledAgent(t, { group_id: 'lab' }, 20_000));
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-ssh-keys-e2e-'));
});

afterAll(async () => {
  await agent?.close();
  await Promise.all([t?.close(), off?.close()]);
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('registered SSH keys at the gateway (SSH_USER_KEYS on)', () => {
  it('logs in with registered Ed25519, ECDSA and RSA keys as their owner, audited as that user', async () => {
    const u = await t.userWith(grants);
    for (const type of ['ed25519', 'ecdsa', 'rsa'] as const) {
      const user = keyUser(t, `owner-${type}`, type);
      await register(t, u.token, user);
      const run = await ssh(user, [`root@${host()}`, `echo via-${type}`]);
      expect(run.stderr).not.toMatch(/Permission denied/);
      expect(run.stdout, `ssh exited ${String(run.code)}: ${run.stderr}`).toBe(`via-${type}\n`);
    }
    const r = await t.api('GET', `/api/v2/commitlist?device_id=${device}&action=console&user_id=${u.id}`, { token: t.adminToken });
    // One start per login (each session's end entry may land before or after this read).
    const starts = r.body.items.filter((e: { event: string }) => e.event === 'remote.console.start');
    expect(starts).toHaveLength(3);
    for (const start of starts) expect(start).toMatchObject({ result: 'allowed', source: 'ssh', user_id: u.id });
  });

  it("refuses a key presented for another user's login, and an unregistered key", async () => {
    const alice = await t.userWith(grants);
    const bob = await t.userWith(grants);
    const user = keyUser(t, 'alice');
    await register(t, alice.token, user);
    // Its owner named: signed in (the gateway itself has no shell: exit 1 with its message).
    const own = await ssh(user, ['-l', alice.email, 'gw', 'true']);
    expect(own.stderr).toMatch(/fleet SSH gateway/);
    const asBob = await ssh(user, ['-l', bob.email, 'gw', 'true']);
    expect(asBob.code).toBe(255);
    expect(asBob.stderr).toMatch(/Permission denied/);
    const stranger = keyUser(t, 'stranger');
    const unknown = await ssh(stranger, [`root@${host()}`, 'true']);
    expect(unknown.code).toBe(255);
    expect(unknown.stdout).toBe('');
    const denied = await eventually(async () => {
      const items = (await t.api('GET', '/api/v2/commitlist?event=remote.ssh.denied&items_per_page=100', { token: t.adminToken })).body.items as any[];
      return items.some((e) => JSON.stringify(e).includes(`not a key of ${bob.email}`)) ? items : undefined;
    });
    expect(denied.length).toBeGreaterThan(0);
  });

  it('ends a live session when its key is removed, and refuses the key from then on', async () => {
    const u = await t.userWith(grants);
    const user = keyUser(t, 'removed');
    const keyId = await register(t, u.token, user);
    const live = start(user, [`root@${host()}`, 'echo started; sleep 120; echo finished']);
    await eventually(async () => (live.out().includes('started') ? true : undefined), 20_000, 'the session to start');
    expect((await t.api('DELETE', `/api/v2/ssh/keys/${keyId}`, { token: u.token })).status).toBe(204);
    const ended = await live.done;
    expect(ended.stdout).not.toContain('finished');
    const again = await ssh(user, [`root@${host()}`, 'true']);
    expect(again.code).toBe(255);
  });

  it('ends a live session when its user is disabled', async () => {
    const u = await t.userWith(grants);
    const user = keyUser(t, 'disabled');
    await register(t, u.token, user);
    const live = start(user, [`root@${host()}`, 'echo started; sleep 120; echo finished']);
    await eventually(async () => (live.out().includes('started') ? true : undefined), 20_000, 'the session to start');
    expect((await t.api('PATCH', `/api/v2/user/${u.id}`, { token: t.adminToken, body: { disabled: true } })).status).toBe(200);
    const ended = await live.done;
    expect(ended.stdout).not.toContain('finished');
    const again = await ssh(user, [`root@${host()}`, 'true']);
    expect(again.code).toBe(255);
  });
});

describe('registered SSH keys with SSH_USER_KEYS off (the default)', () => {
  it('refuses a registered key: only certificates sign in', async () => {
    const u = await off.userWith(grants);
    const user = keyUser(off, 'off');
    await register(off, u.token, user);
    const r = await ssh(user, ['gw', 'true']);
    expect(r.code).toBe(255);
    expect(r.stderr).toMatch(/Permission denied/);
  });
});
