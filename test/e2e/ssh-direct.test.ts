/**
 * End to end: the single-layer device connection. The block `fleet ssh-config` writes runs `fleet
 * ssh-proxy` as ssh's ProxyCommand, which sends a preamble naming the device host and then carries
 * one SSH connection to the gateway, bound to that device once signed in. The real OpenSSH client
 * where it is the user's path, raw sockets for the preamble; `ssh -J` keeps working beside it.
 */
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SSH_PREAUTH_PER_ADDRESS } from '../../broker/ssh/gateway.js';
import { SSH_PREAMBLE_MAX, SSH_PREAMBLE_WORD, gatewayAlias } from '../../shared/ssh-config.js';
import { echoServer, eventually, startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';
import { commandLine, descendantPids, processTable } from '../support/proc.js';
import { echoThroughForward, runSsh, sshUser, type SshUser } from '../support/ssh-client.js';

let t: TestBroker;
let agent: TestAgent;
let device: string;
let name: string;
let work: string;
let echo: net.Server;
let echoPort: number;
let admin: SshUser;
const host = () => `${device}.127.0.0.1`;
const gatewayPort = () => t.broker.services.ssh.gateway.port as number;

async function audit(query: string): Promise<any[]> {
  const r = await t.api('GET', `/api/v2/commitlist?${query}`, { token: t.adminToken });
  expect(r.status).toBe(200);
  return r.body.items;
}

/** A free local port (for ssh -L). */
function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}

/** The command lines of a process's live descendants (Linux /proc). */
function descendants(root: number): string[] {
  return [...descendantPids(processTable(), root)].map(commandLine);
}

/** A raw connection to the gateway: what it wrote back, and whether (and when) it closed. */
function raw(port = gatewayPort()): { socket: net.Socket; got: () => string; closed: Promise<string> } {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => {});
  let seen = '';
  socket.on('data', (d) => (seen += d.toString('latin1')));
  return { socket, got: () => seen, closed: new Promise((resolve) => socket.once('close', () => resolve(seen))) };
}

beforeAll(async () => {
  t = await startTestBroker({ database: 'sqlite', env: { SSH_PORT: '0' } });
  await t.addGroup({ id: 'lab', title: 'Lab', tags: ['x'] });
  ({ agent, device } = await startEnrolledAgent(t, { group_id: 'lab' }, 20_000));
  ({ server: echo, port: echoPort } = await echoServer());
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-ssh-direct-'));
  admin = await sshUser(t, work, t.adminToken, 'admin');
  const row = await t.broker.services.store.db.selectFrom('nodes').select('title').where('node_id', '=', device).executeTakeFirstOrThrow();
  name = row.title;
});

afterAll(async () => {
  await agent?.close();
  echo?.close();
  await t?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('one SSH connection to the device through fleet ssh-proxy', () => {
  it('the block runs fleet ssh-proxy, not a jump: ssh root@<name>.<host> runs a command, audited and recorded as ssh', async () => {
    const block = fs.readFileSync(admin.config, 'utf8');
    expect(block).toContain(`ProxyCommand fleet ssh-proxy --fdpass 127.0.0.1 ${gatewayPort()} %h\n  ProxyUseFdpass yes\n`);
    expect(block).not.toMatch(/ProxyJump/);
    const run = await runSsh('ssh', admin, ['-v', `root@${name}.127.0.0.1`, 'echo direct-$((6*7)); exit 4']);
    expect(run.stdout).toBe('direct-42\n');
    expect(run.code).toBe(4);
    // ssh's dialer: fleet ssh-proxy hands ssh the connection (ssh fails without one) instead of passing its bytes.
    expect(run.stderr).toMatch(/Executing proxy dialer command: exec fleet ssh-proxy --fdpass/);
    const [entry] = await eventually(
      async () => {
        const items = await audit(`device_id=${device}&action=console&event=remote.console.start`);
        const found = items.filter((e) => JSON.stringify(e).includes('direct-'));
        return found[0]?.ended_at ? found : undefined;
      },
      15_000,
      'the console end record',
    );
    expect(entry).toMatchObject({ result: 'allowed', source: 'ssh' });
    expect(JSON.stringify(entry)).toMatch(/"recording":"[0-9a-f-]{36}"/);
  });

  it('leaves no process between ssh and the gateway: fleet ssh-proxy has exited while the session runs', async () => {
    const child = spawn('ssh', ['-F', admin.config, '-o', 'BatchMode=yes', `root@${host()}`, 'echo started; read line; echo "got $line"'], { env: admin.env });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.resume();
    const closed = new Promise<number | null>((resolve) => child.on('close', resolve));
    await eventually(() => out.includes('started'), 30_000, 'the session to start');
    // The session is up and waits for our line: ssh's descendants are what carries it now.
    expect(descendants(child.pid as number).filter((cmd) => cmd.includes('ssh-proxy'))).toEqual([]);
    child.stdin.end('over-the-socket\n');
    expect(await closed).toBe(0);
    expect(out).toBe('started\ngot over-the-socket\n');
  });

  it('fleet ssh-proxy --fdpass refuses a standard output that is a pipe (ssh without ProxyUseFdpass), exit 255', async () => {
    // A shell's pipe, as ssh makes for a ProxyCommand without ProxyUseFdpass (Node.js would give a socket pair).
    const cmd = `fleet ssh-proxy --fdpass 127.0.0.1 ${gatewayPort()} ${host()} | od -c; exit \${PIPESTATUS[0]}`;
    const run = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn('bash', ['-c', cmd], { env: admin.env, stdio: ['ignore', 'pipe', 'pipe'] });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    expect(run.code).toBe(255);
    expect(run.stderr).toMatch(/ProxyUseFdpass/);
    // Nothing was written to the pipe (od prints only its end offset).
    expect(run.stdout.trim()).toBe('0000000');
  });

  it('copies with scp up and down, byte for byte', async () => {
    const dir = fs.mkdtempSync(path.join(work, 'device-side-'));
    const local = path.join(work, 'up.bin');
    const payload = crypto.randomBytes(3 * 1024 * 1024 + 17);
    fs.writeFileSync(local, payload);
    const up = await runSsh('scp', admin, [local, `root@${host()}:${dir}/`]);
    expect(up.code, up.stderr).toBe(0);
    expect(fs.readFileSync(path.join(dir, 'up.bin')).equals(payload)).toBe(true);
    const back = path.join(work, 'down.bin');
    const down = await runSsh('scp', admin, [`root@${host()}:${dir}/up.bin`, back]);
    expect(down.code, down.stderr).toBe(0);
    expect(fs.readFileSync(back).equals(payload)).toBe(true);
  });

  it('forwards a local port (ssh -L) as a tunnel on the device, decided and audited', async () => {
    const local = await freePort();
    const child = spawn(
      'ssh',
      ['-F', admin.config, '-o', 'BatchMode=yes', '-o', 'ExitOnForwardFailure=yes', '-N', '-L', `${local}:127.0.0.1:${echoPort}`, `root@${host()}`],
      { env: admin.env },
    );
    try {
      const echoed = await eventually(() => echoThroughForward(local, 'ping-direct'), 30_000, 'the forwarded port');
      expect(echoed).toBe('ping-direct');
    } finally {
      child.kill();
    }
    const items = await eventually(async () => {
      const found = await audit(`device_id=${device}&action=tunnel`);
      return found.some((e) => e.source === 'ssh' && e.event === 'remote.tunnel.start' && e.options?.port === echoPort) ? found : undefined;
    });
    expect(items.find((e) => e.source === 'ssh' && e.event === 'remote.tunnel.start')).toMatchObject({ result: 'allowed' });
  });

  it('decides -W on a bound connection as tunnel(...) grants: the granted port passes, another is refused and audited', async () => {
    const u = await t.userWith([
      { permission: 'device:read' },
      { permission: 'remote-access:connect', resources: [`*/tunnel(proto=tcp;port=${echoPort};dst=127.0.0.1)`] },
    ]);
    const user = await sshUser(t, work, u.token, 'tunneller');
    const ok = await runSsh('ssh', user, ['-W', `127.0.0.1:${echoPort}`, `root@${host()}`], 'through-w');
    expect(ok.stdout).toBe('through-w');
    const other = await freePort();
    const refused = await runSsh('ssh', user, ['-W', `127.0.0.1:${other}`, `root@${host()}`], 'never');
    expect(refused.stdout).toBe('');
    expect(refused.code).not.toBe(0);
    // A console is no tunnel: the same connection path refuses it.
    const shell = await runSsh('ssh', user, [`root@${host()}`, 'echo no']);
    expect(shell.stdout).toBe('');
    expect(shell.code).toBe(1);
    const entries = await eventually(async () => {
      const found = await audit(`device_id=${device}&user_id=${u.id}`);
      return found.some((e) => e.action === 'tunnel' && e.result === 'denied') && found.some((e) => e.action === 'console' && e.result === 'denied')
        ? found
        : undefined;
    });
    expect(entries.find((e) => e.action === 'tunnel' && e.result === 'allowed')).toMatchObject({ source: 'ssh' });
    expect(entries.find((e) => e.action === 'tunnel' && e.result === 'denied')?.options).toMatchObject({ port: other });
  });

  it('refuses a device the user may not reach, by name or by id, as -J refuses it, and opens nothing else on that connection', async () => {
    // Grants for devices tagged y only: the lab device (tag x) is another user's / tenant's to this one.
    const u = await t.userWith([{ permission: 'remote-access:connect', resources: ['tag:y:*'] }, { permission: 'device:read' }]);
    const user = await sshUser(t, work, u.token, 'outsider');
    const byName = await runSsh('ssh', user, [`root@${name}.127.0.0.1`, 'echo in']);
    expect(byName.stdout).toBe('');
    expect(byName.code).toBe(1);
    expect(byName.stderr).toContain(`no device named ${name} that you may reach`);
    const byId = await runSsh('ssh', user, [`root@${host()}`, 'echo in']);
    expect(byId.stdout).toBe('');
    expect(byId.code).toBe(1);
    // The refused connection is not the gateway's own either: its -W to the device's inner hop is refused.
    const hop = await runSsh('ssh', user, ['-W', `${host()}:22`, `root@nothing-here.127.0.0.1`], '');
    expect(hop.code).not.toBe(0);
    const hopAdmin = await runSsh('ssh', admin, ['-W', `${host()}:22`, `root@nothing-here.127.0.0.1`], '');
    expect(hopAdmin.stdout).toBe('');
    expect(hopAdmin.code).not.toBe(0);
    const entries = await eventually(async () => {
      const found = await audit(`user_id=${u.id}`);
      return found.some((e) => e.action === 'tunnel' && /no device named nothing-here/.test(e.reason ?? '')) &&
        found.some((e) => e.action === 'console' && e.device_id === device)
        ? found
        : undefined;
    });
    expect(entries.find((e) => e.action === 'tunnel' && new RegExp(`no device named ${name}`).test(e.reason ?? ''))).toMatchObject({
      result: 'denied',
      source: 'ssh',
      options: expect.objectContaining({ port: 22 }),
    });
    expect(entries.find((e) => e.action === 'console' && e.device_id === device)).toMatchObject({ result: 'denied', source: 'ssh' });
    expect(entries.some((e) => e.result === 'allowed')).toBe(false);
  });

  it('keeps ssh -J working beside it: the gateway connection hops to the device', async () => {
    const run = await runSsh('ssh', admin, ['-J', gatewayAlias(t.url), `root@${host()}`, 'echo via-jump']);
    expect(run.stdout).toBe('via-jump\n');
    expect(run.code).toBe(0);
  });
});

describe('the preamble, from a hostile client', () => {
  it('closes a connection whose first bytes are neither a version line nor a preamble: binary, malformed, oversized', async () => {
    const cases: Buffer[] = [
      Buffer.from([0x00, 0xff, 0x13, 0x37, 0x0a]),
      Buffer.from(`${SSH_PREAMBLE_WORD}bad host!\r\n`),
      Buffer.from(`${SSH_PREAMBLE_WORD}\r\n`),
      Buffer.from(`${SSH_PREAMBLE_WORD.toLowerCase()}${device}.127.0.0.1\r\n`),
      Buffer.from(`${SSH_PREAMBLE_WORD}${'a'.repeat(SSH_PREAMBLE_MAX)}\r\n`),
      Buffer.from(`GET / HTTP/1.1\r\nhost: x\r\n\r\n`),
    ];
    for (const bytes of cases) {
      const c = raw();
      c.socket.write(bytes);
      // Nothing from the gateway: not even its version line.
      expect(await c.closed).toBe('');
    }
  });

  it('closes a preamble that never ends once it passes its bound, holding no more than that meanwhile', async () => {
    const c = raw();
    const chunk = Buffer.from(`${SSH_PREAMBLE_WORD}${'x'.repeat(1000)}`);
    let written = 0;
    // Written until the gateway closes: it does so at its bound, long before this much is sent.
    const pump = async () => {
      while (!c.socket.destroyed && written < 64 * 1024 * 1024) {
        written += chunk.length;
        if (!c.socket.write(chunk)) await new Promise((r) => c.socket.once('drain', r).once('close', r));
      }
    };
    await Promise.all([pump(), c.closed]);
    expect(c.got()).toBe('');
    expect(written).toBeLessThan(64 * 1024 * 1024);
  });

  it('reads a preamble sent byte by byte, then speaks SSH', async () => {
    const c = raw();
    for (const byte of Buffer.from(`${SSH_PREAMBLE_WORD}${host()}\r\nSSH-2.0-probe\r\n`)) {
      c.socket.write(Buffer.from([byte]));
      await new Promise((r) => setTimeout(r, 2));
    }
    await eventually(() => c.got().startsWith('SSH-2.0-'), 20_000, "the gateway's version line");
    c.socket.destroy();
  });

  it('counts unfinished preambles against the pre-auth bounds: past them the next connection is closed at once', async () => {
    const idle: ReturnType<typeof raw>[] = [];
    try {
      for (let i = 0; i < SSH_PREAUTH_PER_ADDRESS; i++) {
        const c = raw();
        c.socket.write(SSH_PREAMBLE_WORD.slice(0, 5));
        idle.push(c);
      }
      // Each was admitted (counted) at accept; wait until all are connected.
      await Promise.all(idle.map((c) => (c.socket.connecting ? new Promise((r) => c.socket.once('connect', r)) : undefined)));
      await eventually(
        async () => {
          const extra = raw();
          extra.socket.write(`${SSH_PREAMBLE_WORD}${host()}\r\nSSH-2.0-probe\r\n`);
          return (await extra.closed) === '';
        },
        20_000,
        'a connection past the bound closed',
      );
    } finally {
      for (const c of idle) c.socket.destroy();
    }
    // Once they are gone, a client reaches the device again.
    await eventually(async () => (await runSsh('ssh', admin, [`root@${host()}`, 'echo back'])).stdout === 'back\n', 30_000, 'a sign-in after they left');
  });
});

describe('the sign-in timeout', () => {
  let short: TestBroker;

  // A broker of its own with a short SSH_AUTH_TIMEOUT_MS (the default is 20 s): the file's broker
  // keeps the default, so the connections its other tests hold open or sign in slowly are not cut.
  beforeAll(async () => {
    short = await startTestBroker({ database: 'sqlite', env: { SSH_PORT: '0', SSH_AUTH_TIMEOUT_MS: '2000' } });
  });
  afterAll(async () => {
    await short?.close();
  });

  it('closes a preamble trickled byte by byte that never ends, at SSH_AUTH_TIMEOUT_MS', async () => {
    const c = raw(short.broker.services.ssh.gateway.port as number);
    const bytes = Buffer.from(`${SSH_PREAMBLE_WORD}${'z'.repeat(100)}`);
    let i = 0;
    const timer = setInterval(() => {
      if (i < bytes.length && !c.socket.destroyed) c.socket.write(bytes.subarray(i, ++i));
    }, 500);
    try {
      // Well under the bound of bytes when it closes: the time did it, not the size.
      expect(await c.closed).toBe('');
      expect(i).toBeLessThan(bytes.length);
    } finally {
      clearInterval(timer);
    }
  });
});
