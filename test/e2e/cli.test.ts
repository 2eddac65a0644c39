/**
 * The `fleet` command-line client, driven as users run it (bin/fleet.js in a child process),
 * against a real broker and a real agent process.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import crypto from 'node:crypto';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startAgent, type TestAgent, echoServer } from '../support/agent.js';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const FLEET = path.join(ROOT, 'bin', 'fleet.js');

let t: TestBroker;
let agent: TestAgent;
let device: string;
let deviceName: string;
let home: string; // XDG_CONFIG_HOME of the CLI user
let work: string;
let echo: net.Server;
let echoPort: number;

const sha = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');

/** The environment of a user without FLEET_* variables (unless given). */
function env(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const { FLEET_URL: _u, FLEET_TOKEN: _t, ...rest } = process.env;
  return { ...rest, XDG_CONFIG_HOME: home, ...extra };
}

function start(args: string[], extra: Record<string, string> = {}): ChildProcessWithoutNullStreams {
  return spawn(process.execPath, [FLEET, ...args], { cwd: work, env: env(extra) });
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function finished(child: ChildProcessWithoutNullStreams): Promise<Run> {
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

function fleet(args: string[], options: { input?: string; env?: Record<string, string> } = {}): Promise<Run> {
  const child = start(args, options.env);
  const done = finished(child);
  child.stdin.end(options.input ?? '');
  return done;
}

/** Waits for a line on the child's stderr matching `pattern`. */
function stderrLine(child: ChildProcessWithoutNullStreams, pattern: RegExp): Promise<RegExpExecArray> {
  let seen = '';
  return new Promise((resolve, reject) => {
    const onData = (d: Buffer) => {
      seen += d.toString();
      const m = pattern.exec(seen);
      if (m) {
        child.stderr.off('data', onData);
        resolve(m);
      }
    };
    child.stderr.on('data', onData);
    child.once('close', () => reject(new Error(`fleet exited before printing ${pattern}: ${seen}`)));
  });
}

beforeAll(async () => {
  t = await startTestBroker({ database: 'sqlite' });
  home = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-home-'));
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-work-'));
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  agent = startAgent({ broker: t.url, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.waitConnected(t);
  ({ server: echo, port: echoPort } = await echoServer());
});

afterAll(async () => {
  await agent?.close();
  echo?.close();
  await t?.close();
  for (const dir of [home, work]) if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

describe('fleet login', () => {
  it('refuses a wrong password with one line and a non-zero status', async () => {
    const r = await fleet(['login', '--url', t.url, '--email', ADMIN.email, '--password-stdin'], { input: 'wrong-password\n' });
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^fleet: Sign-in failed: The email or password is wrong\./);
    expect(fs.existsSync(path.join(home, 'fleet', 'credentials.json'))).toBe(false);
  });

  it('signs in with --password-stdin and stores the token readable by the user only', async () => {
    const r = await fleet(['login', '--url', t.url, '--email', ADMIN.email, '--password-stdin'], { input: `${ADMIN.password}\n` });
    expect(r.stderr).toContain(`Signed in to ${t.url}`);
    expect(r.code).toBe(0);
    const file = path.join(home, 'fleet', 'credentials.json');
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    const profiles = JSON.parse(fs.readFileSync(file, 'utf8'));
    const stored = profiles.profiles[profiles.current];
    expect(stored).toMatchObject({ url: t.url, email: ADMIN.email });
    expect(stored.token).toMatch(/^ey/);
    expect(typeof stored.refresh_token).toBe('string');
  });

  it('asks for the second factor when the broker wants one (mailed code)', async () => {
    const email = `twofa-${crypto.randomBytes(3).toString('hex')}@example.com`;
    const created = await t.api('POST', '/api/v2/user', {
      token: t.adminToken,
      body: {
        fname: 'Two',
        lname: 'Factor',
        email,
        roles: [(await t.userWith([{ permission: 'device:read' }])).roleId],
        password: 'two-factor-pass-1',
        two_factor: { enabled: true },
      },
    });
    expect(created.status).toBe(201);
    const ownHome = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-2fa-'));
    try {
      const outbox = path.join(t.dataDir, 'outbox');
      const before = new Set(fs.existsSync(outbox) ? fs.readdirSync(outbox) : []);
      const child = start(['login', '--url', t.url, '--email', email, '--password-stdin'], { XDG_CONFIG_HOME: ownHome });
      const done = finished(child);
      child.stdin.write('two-factor-pass-1\n');
      await stderrLine(child, /Code from the mail: /);
      const code = await eventually(() => {
        for (const f of fs.existsSync(outbox) ? fs.readdirSync(outbox) : []) {
          if (before.has(f)) continue;
          const mail = fs.readFileSync(path.join(outbox, f), 'utf8');
          // The welcome mail (sent once the user's creation committed) may land after `before` was taken.
          const code = mail.includes(email) ? /sign-in code is: (\d{6})/.exec(mail)?.[1] : undefined;
          if (code) return code;
        }
        return undefined;
      });
      child.stdin.end(`${code}\n`);
      const r = await done;
      expect(r.stderr).toContain(`as ${email}`);
      expect(r.code).toBe(0);
      const profiles = JSON.parse(fs.readFileSync(path.join(ownHome, 'fleet', 'credentials.json'), 'utf8'));
      expect(profiles.profiles[profiles.current].email).toBe(email);
    } finally {
      fs.rmSync(ownHome, { recursive: true, force: true });
    }
  });

  it('without --email, signs in by a code approved in the web console (device authorization)', async () => {
    const ownHome = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-device-'));
    try {
      const child = start(['login', '--url', t.url], { XDG_CONFIG_HOME: ownHome });
      const done = finished(child);
      const [, page, code] = await stderrLine(child, /open (\S+)\?code=([A-Z]{4}-[A-Z]{4})/);
      expect(page).toBe(`${t.url}/cli-login`);
      // No password prompt: the user approves the code where they are signed in.
      const approved = await t.api('POST', `/api/v2/oauth2/device-auth/${code}`, { token: t.adminToken });
      expect(approved.status).toBe(200);
      const r = await done;
      expect(r.code, r.stderr).toBe(0);
      expect(r.stderr).not.toMatch(/Password/);
      const profiles = JSON.parse(fs.readFileSync(path.join(ownHome, 'fleet', 'credentials.json'), 'utf8'));
      expect(profiles.profiles[profiles.current]).toMatchObject({ url: t.url, email: ADMIN.email });
      const devices = await fleet(['devices', '--json'], { env: { XDG_CONFIG_HOME: ownHome } });
      expect(devices.code, devices.stderr).toBe(0);
    } finally {
      fs.rmSync(ownHome, { recursive: true, force: true });
    }
  });
});

describe('fleet devices and sessions', () => {
  it('lists the devices as a table and as JSON', async () => {
    const json = await fleet(['devices', '--json']);
    expect(json.code).toBe(0);
    const rows = JSON.parse(json.stdout);
    const row = rows.find((d: any) => d.id === device);
    expect(row).toBeDefined();
    deviceName = row.name;
    const table = await fleet(['devices']);
    expect(table.code).toBe(0);
    expect(table.stdout.split('\n')[0]).toMatch(/^ID\s+NAME\s+STATUS\s+GROUP\s+TAGS/);
    // Short ids in the table (the shortest unique prefix, 8 at least), full ones with -o wide.
    expect(table.stdout).toContain(device.slice(0, 8));
    expect((await fleet(['devices', '-o', 'wide'])).stdout).toContain(device);
  });

  it('takes FLEET_URL and FLEET_TOKEN from the environment', async () => {
    const r = await fleet(['devices', '--json'], { env: { FLEET_URL: t.url, FLEET_TOKEN: t.adminToken, XDG_CONFIG_HOME: path.join(work, 'nowhere') } });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).map((d: any) => d.id)).toContain(device);
    const bad = await fleet(['devices'], { env: { FLEET_URL: t.url, FLEET_TOKEN: 'not-a-token', XDG_CONFIG_HOME: path.join(work, 'nowhere') } });
    expect(bad.code).toBe(1);
    expect(bad.stderr.trim().split('\n')).toHaveLength(1);
  });

  it('console runs typed commands and exits with the remote status', async () => {
    const r = await fleet(['console', deviceName ?? device], { input: 'echo "cli-$((2+3))"\nexit 5\n' });
    expect(r.stdout).toContain('cli-5');
    expect(r.code).toBe(5);
  });

  it('console --user runs the shell as that user; a grant naming users refuses another', async () => {
    const r = await fleet(['console', device, '--user', 'daemon'], { input: 'echo "cli-as-$(id -un)"\nexit 0\n' });
    expect(r.stdout).toContain('cli-as-daemon');
    expect(r.code).toBe(0);
    const user = await t.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console(user=daemon)'] }]);
    const env = { FLEET_URL: t.url, FLEET_TOKEN: user.token };
    const refused = await fleet(['console', device, '--user', 'nobody'], { env, input: 'exit 0\n' });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^fleet: Not allowed: no grant of remote-access:connect allows console as nobody/);
  });

  it('connect forwards a local port through a tunnel per connection (10 MB, sha256 intact)', async () => {
    const child = start(['connect', device, '-t', `0:127.0.0.1:${echoPort}`]);
    const done = finished(child);
    try {
      const [, port] = await stderrLine(child, /Forwarding 127\.0\.0\.1:(\d+) to 127\.0\.0\.1:\d+/);
      const move = async (size: number) => {
        const payload = crypto.randomBytes(size);
        const socket = net.connect(Number(port), '127.0.0.1');
        const parts: Buffer[] = [];
        socket.on('data', (d) => parts.push(d));
        const ended = new Promise((r) => socket.on('end', r));
        socket.end(payload);
        await ended;
        return sha(Buffer.concat(parts)) === sha(payload);
      };
      expect(await Promise.all([move(10 * 1024 * 1024), move(1000), move(300_000)])).toEqual([true, true, true]);
    } finally {
      child.kill('SIGINT');
    }
    expect((await done).code).toBe(0);
  });

  it('connect forwards UDP datagrams (/udp)', async () => {
    const server = dgram.createSocket('udp4');
    server.on('message', (msg, peer) => server.send(Buffer.concat([Buffer.from('echo:'), msg]), peer.port, peer.address));
    await new Promise<void>((r) => server.bind(0, '127.0.0.1', r));
    const child = start(['connect', device, '-t', `0:127.0.0.1:${server.address().port}/udp`]);
    const done = finished(child);
    const client = dgram.createSocket('udp4');
    try {
      const [, port] = await stderrLine(child, /Forwarding 127\.0\.0\.1:(\d+)\/udp/);
      const replies: string[] = [];
      client.on('message', (msg) => replies.push(msg.toString()));
      // UDP may drop the first datagram while the tunnel opens: send until answered.
      await eventually(
        () => {
          client.send('datagram', Number(port), '127.0.0.1');
          return replies.length > 0;
        },
        10_000,
        'a UDP reply',
      );
      expect(replies[0]).toBe('echo:datagram');
    } finally {
      client.close();
      server.close();
      child.kill('SIGINT');
    }
    expect((await done).code).toBe(0);
  });

  it('connect -t stdio:... bridges stdin and stdout (SSH ProxyCommand)', async () => {
    const payload = crypto.randomBytes(500_000).toString('base64');
    const r = await fleet(['connect', device, '-t', `stdio:127.0.0.1:${echoPort}`], { input: payload });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(payload);
  });

  it('cp copies to the device and back with checksums', async () => {
    const local = path.join(work, 'source.bin');
    const content = crypto.randomBytes(2 * 1024 * 1024 + 3);
    fs.writeFileSync(local, content);
    const remoteDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-remote-'));
    try {
      const up = await fleet(['cp', local, `${device}:${remoteDir}/`]);
      expect(up.stderr).toBe('');
      expect(up.code).toBe(0);
      expect(sha(fs.readFileSync(path.join(remoteDir, 'source.bin')))).toBe(sha(content));
      const back = path.join(work, 'back.bin');
      const down = await fleet(['cp', `${device}:${remoteDir}/source.bin`, back]);
      expect(down.code).toBe(0);
      expect(sha(fs.readFileSync(back))).toBe(sha(content));
      const missing = await fleet(['cp', `${device}:${remoteDir}/nope.bin`, back]);
      expect(missing.code).toBe(1);
      expect(missing.stderr.trim().split('\n')).toHaveLength(1);
      expect(missing.stderr).toMatch(/^fleet: .*No file/);
    } finally {
      fs.rmSync(remoteDir, { recursive: true, force: true });
    }
  });

  it('reload answers once the agent acknowledged', async () => {
    const r = await fleet(['reload', device]);
    expect(r.stderr).toContain('reloaded');
    expect(r.code).toBe(0);
    await agent.waitConnected(t);
  });

  it('reports an unknown device and a refused session as one line with a non-zero status', async () => {
    const unknown = await fleet(['console', 'no-such-device']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^fleet: No device "no-such-device"/);
    expect(unknown.stderr.trim().split('\n')).toHaveLength(1);
    const user = await t.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
    const refused = await fleet(['connect', device, '-t', `stdio:127.0.0.1:${echoPort}`], { env: { FLEET_URL: t.url, FLEET_TOKEN: user.token } });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^fleet: Not allowed: no grant of remote-access:connect allows tunnel tcp/);
    const usage = await fleet(['connect', device, '-t', 'nonsense']);
    expect(usage.code).toBe(1);
    expect(usage.stderr).toMatch(/^fleet: -t nonsense: expected/);
  });
});

describe('text from the broker on the terminal', () => {
  it('prints device names and error messages with control characters escaped, never raw', async () => {
    // Written to the store directly, as an older broker (or a hand edit) may have left it.
    const hostile = 'evil\u001b]0;pwned\u0007\u001b[2J\u009b31m';
    await t.addDevice({ name: hostile, tags: ['hostile'] });
    await t.addDevice({ name: hostile });
    const env = { FLEET_URL: t.url, FLEET_TOKEN: t.adminToken, XDG_CONFIG_HOME: path.join(work, 'nowhere') };
    const table = await fleet(['devices'], { env });
    expect(table.code).toBe(0);
    expect(table.stdout).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    expect(table.stdout).toContain('evil\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m');
    // An error naming them (two devices of that name) is one escaped line on stderr.
    const ambiguous = await fleet(['reload', hostile], { env });
    expect(ambiguous.code).toBe(1);
    expect(ambiguous.stderr).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/);
    expect(ambiguous.stderr.trim().split('\n')).toHaveLength(1);
    expect(ambiguous.stderr).toContain('\\x1b');
  });
});
