/**
 * The `fleet` CLI as users get it: installed from a test broker with
 * `curl -fsSL <broker>/install-cli.sh | sh -s -- --prefix <temp>` (the broker builds it on demand
 * into a temporary CLI_ARTIFACTS_DIR), then run as `<prefix>/bin/fleet` — profiles on two brokers,
 * `use`, `status`, FLEET_URL per call, the URL forms, and the expired-token and second-factor messages.
 */
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import jwt from 'jsonwebtoken';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';

let a: TestBroker;
let b: TestBroker;
let work: string;
let prefix: string;
let home: string; // XDG_CONFIG_HOME of the CLI user
let artifacts: string;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(cmd: string, args: string[], options: { input?: string; env?: Record<string, string | undefined> } = {}): Promise<Run> {
  const { FLEET_URL: _u, FLEET_TOKEN: _t, PREFIX: _p, ...rest } = process.env;
  const env = { ...rest, HOME: work, XDG_CONFIG_HOME: home, ...options.env };
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { cwd: work, env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
    // A command that exits before reading its input (a refused install) closes the pipe: EPIPE is no failure of ours.
    child.stdin.on('error', () => {});
    child.stdin.end(options.input ?? '');
  });
}

const fleet = (args: string[], options: { input?: string; env?: Record<string, string | undefined> } = {}) =>
  run(path.join(prefix, 'bin', 'fleet'), args, options);

const hostPort = (t: TestBroker) => new URL(t.url).host;

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-install-'));
  prefix = path.join(work, 'prefix');
  home = path.join(work, 'config');
  artifacts = path.join(work, 'artifacts');
  [a, b] = await Promise.all([
    startTestBroker({ database: 'sqlite', env: { CLI_ARTIFACTS_DIR: artifacts } }),
    startTestBroker({ database: 'sqlite', env: { CLI_ARTIFACTS_DIR: artifacts } }),
  ]);
}, 120_000);

afterAll(async () => {
  await Promise.all([a?.close(), b?.close()]);
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('install-cli.sh', () => {
  it('installs bin/fleet into the prefix with curl | sh, and it runs with node alone', async () => {
    const r = await run('sh', ['-c', `curl -fsSL ${a.url}/install-cli.sh | sh -s -- --prefix "$1"`, 'sh', prefix]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toContain(`Installed fleet into ${prefix}/bin/fleet`);
    expect(fs.statSync(path.join(prefix, 'bin', 'fleet')).mode & 0o111).toBeTruthy();
    expect(fs.existsSync(path.join(prefix, 'lib', 'fleet-cli', 'fleet.mjs'))).toBe(true);
    const help = await fleet(['--help']);
    expect(help.code, help.stderr).toBe(0);
    expect(help.stdout).toMatch(/Usage: fleet/);
    expect(help.stdout).toMatch(/status/);
    // Nothing of the repository's node_modules is needed: the bundle names no package import.
    const lib = path.join(prefix, 'lib', 'fleet-cli');
    const files = ['fleet.mjs', ...fs.readdirSync(path.join(lib, 'chunks')).map((c) => path.join('chunks', c))];
    for (const file of files) {
      const code = fs.readFileSync(path.join(lib, file), 'utf8');
      expect(code, file).not.toMatch(/from\s*["'](?!node:)[a-z@][^"']*["']/);
      expect(code, file).not.toContain('node-pty');
    }
    // What every command loads is the parser alone: ws and cli-progress come with the commands that use them.
    const bundle = fs.readFileSync(path.join(lib, 'fleet.mjs'), 'utf8');
    expect(bundle).not.toMatch(/node_modules\/(ws|cli-progress)\//);
    expect(bundle).toMatch(/import\("\.\/chunks\/devices-[A-Z0-9]+\.mjs"\)/);
    const devices = await fleet(['devices']);
    expect(devices.stderr).toMatch(/fleet: .*(sign in|login)/i);
  });

  it('takes the prefix from PREFIX too', async () => {
    const other = path.join(work, 'prefix-env');
    const r = await run('sh', ['-c', `curl -fsSL ${a.url}/install-cli.sh | sh`], { env: { PREFIX: other } });
    expect(r.code, r.stderr).toBe(0);
    expect(fs.existsSync(path.join(other, 'bin', 'fleet'))).toBe(true);
  });

  it('refuses a tarball altered after the broker announced its SHA-256, and installs nothing', async () => {
    const script = path.join(work, 'install-cli.sh');
    const got = await run('curl', ['-fsSL', '-o', script, `${a.url}/install-cli.sh`]);
    expect(got.code, got.stderr).toBe(0);
    const tarball = fs.readdirSync(artifacts).find((n) => /^fleet-cli-.*\.tar\.gz$/.test(n)) as string;
    const original = fs.readFileSync(path.join(artifacts, tarball));
    // A tarball of the same shape whose CLI does something else.
    const evil = path.join(work, 'evil');
    fs.mkdirSync(path.join(evil, 'bin'), { recursive: true });
    fs.mkdirSync(path.join(evil, 'lib', 'fleet-cli'), { recursive: true });
    fs.writeFileSync(path.join(evil, 'bin', 'fleet'), '#!/bin/sh\necho owned\n', { mode: 0o755 });
    fs.writeFileSync(path.join(evil, 'lib', 'fleet-cli', 'fleet.mjs'), 'console.log("owned")\n');
    const packed = await run('tar', ['-czf', path.join(artifacts, tarball), '-C', evil, 'bin', 'lib']);
    expect(packed.code, packed.stderr).toBe(0);
    try {
      const target = path.join(work, 'prefix-tampered');
      const r = await run('sh', [script, '--prefix', target]);
      expect(r.code).not.toBe(0);
      expect(r.stderr).toMatch(/refused fleet-cli-.*\.tar\.gz: its SHA-256 is [0-9a-f]{64}, the broker announced [0-9a-f]{64}/);
      expect(fs.existsSync(path.join(target, 'bin', 'fleet'))).toBe(false);
      expect(fs.existsSync(path.join(target, 'lib', 'fleet-cli'))).toBe(false);
    } finally {
      fs.writeFileSync(path.join(artifacts, tarball), original);
    }
  });

  it('serves the tarball under /install/ and refuses other names', async () => {
    const tarball = fs.readdirSync(artifacts).find((n) => /^fleet-cli-.*\.tar\.gz$/.test(n)) as string;
    const ok = await fetch(`${a.url}/install/${tarball}`);
    expect(ok.status).toBe(200);
    expect(
      crypto
        .createHash('sha256')
        .update(Buffer.from(await ok.arrayBuffer()))
        .digest('hex'),
    ).toBe(
      crypto
        .createHash('sha256')
        .update(fs.readFileSync(path.join(artifacts, tarball)))
        .digest('hex'),
    );
    for (const name of ['fleet-cli-..%2F..%2Fetc.tar.gz', 'fleet-cli-1.0.tar.gz', 'fleet.mjs']) {
      const r = await fetch(`${a.url}/install/${name}`);
      expect([400, 404], name).toContain(r.status);
      expect(await r.json(), name).toMatchObject({ code: r.status, error: expect.any(String), message: expect.any(String) });
    }
  });
});

describe('start of fleet devices', () => {
  it('lists the devices without loading commander (child_process) or another command', async () => {
    const name = `start-${crypto.randomBytes(3).toString('hex')}`;
    await a.addDevice({ name });
    // Node's own record of the built-in modules it loaded, written as the process exits.
    const hook = path.join(work, 'loaded.cjs');
    const out = path.join(work, 'loaded.txt');
    fs.writeFileSync(hook, `process.on('exit', () => require('node:fs').writeFileSync(${JSON.stringify(out)}, process.moduleLoadList.join('\\n')));\n`);
    const env = { FLEET_URL: a.url, FLEET_TOKEN: a.adminToken, NODE_OPTIONS: `--require ${hook}` };
    const loaded = () => fs.readFileSync(out, 'utf8').split('\n');

    const list = await fleet(['devices', '--name', name], { env });
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(new RegExp(`^[0-9a-f]{8}\\s+${name}\\s`, 'm'));
    expect(loaded()).toContain('NativeModule http');
    expect(loaded()).not.toContain('NativeModule child_process');

    // Anything else goes through commander, which loads child_process: the check above means something.
    const help = await fleet(['devices', '--help'], { env });
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/Usage: fleet devices/);
    expect(loaded()).toContain('NativeModule child_process');
  });
});

describe('profiles', () => {
  it('signs in to two brokers, switches with use, and picks one per call with FLEET_URL', async () => {
    const inA = await fleet(['login', '--url', a.url, '--email', ADMIN.email, '--password-stdin'], { input: `${ADMIN.password}\n` });
    expect(inA.code, inA.stderr).toBe(0);
    const nameA = new URL(a.url).hostname;
    expect(inA.stderr).toContain(`profile ${nameA}`);
    // host:port of a local broker is http; a pasted /api/v2/ suffix goes.
    const inB = await fleet(['login', '--url', `${hostPort(b)}/api/v2/`, '--name', 'second', '--email', ADMIN.email, '--password-stdin'], {
      input: `${ADMIN.password}\n`,
    });
    expect(inB.code, inB.stderr).toBe(0);
    expect(inB.stderr).toContain(`Signed in to ${b.url} as ${ADMIN.email} (profile second`);

    const devA = await a.addDevice({ name: 'only-on-a' });
    const devB = await b.addDevice({ name: 'only-on-b' });

    let status = await fleet(['status']);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain(`${ADMIN.email} at ${b.url} (profile second)`);
    expect(status.stdout).toMatch(/session ends \d{4}-\d\d-\d\d \d\d:\d\d UTC/);
    expect(status.stdout).toContain(`* second`);
    expect((await fleet(['devices', '--json'])).stdout).toContain(devB);

    const used = await fleet(['use', nameA]);
    expect(used.code, used.stderr).toBe(0);
    status = await fleet(['status']);
    expect(status.stdout).toContain(`${ADMIN.email} at ${a.url} (profile ${nameA})`);
    const onA = await fleet(['devices', '--json']);
    expect(onA.stdout).toContain(devA);
    expect(onA.stdout).not.toContain(devB);

    // One call elsewhere, by profile name or URL; the profile in use stays.
    for (const pick of ['second', b.url]) {
      const onB = await fleet(['devices', '--json'], { env: { FLEET_URL: pick } });
      expect(onB.code, onB.stderr).toBe(0);
      expect(onB.stdout).toContain(devB);
      expect(onB.stdout).not.toContain(devA);
    }
    expect((await fleet(['status'])).stdout).toContain(`at ${a.url}`);

    const unknown = await fleet(['use', 'nowhere']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^fleet: No profile "nowhere" \(profiles: .*second.*\)/);
  });

  it('reads the single sign-in file of earlier versions as a profile, and rewrites it', async () => {
    const own = fs.mkdtempSync(path.join(work, 'old-'));
    fs.mkdirSync(path.join(own, 'fleet'));
    const file = path.join(own, 'fleet', 'credentials.json');
    fs.writeFileSync(file, JSON.stringify({ url: a.url, token: a.adminToken, email: ADMIN.email }), { mode: 0o600 });
    const status = await fleet(['status'], { env: { XDG_CONFIG_HOME: own } });
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain(`${ADMIN.email} at ${a.url}`);
    const stored = JSON.parse(fs.readFileSync(file, 'utf8'));
    expect(stored.current).toBe(new URL(a.url).hostname);
    expect(stored.profiles[stored.current]).toMatchObject({ url: a.url, token: a.adminToken });
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
  });
});

describe('messages', () => {
  it('says to use http:// when https meets a plain-HTTP broker', async () => {
    // A broker behind a plain-HTTP port (no TLS at all on it).
    const plain = http.createServer((_req, res) => res.writeHead(404).end());
    await new Promise<void>((resolve) => plain.listen(0, '127.0.0.1', resolve));
    const port = (plain.address() as AddressInfo).port;
    try {
      const r = await fleet(['login', '--url', `https://127.0.0.1:${port}`, '--email', ADMIN.email, '--password-stdin'], { input: 'x\n' });
      expect(r.code).toBe(1);
      expect(r.stderr.trim()).toBe(`fleet: This broker speaks http, not https — use http://127.0.0.1:${port}.`);
    } finally {
      plain.close();
    }
  });

  it('takes host:port (https assumed away from this machine) and refuses what is not a broker URL', async () => {
    const r = await fleet(['login', '--url', 'ftp://fleet.example.com', '--email', ADMIN.email, '--password-stdin'], { input: 'x\n' });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('must start with http:// or https://');
    // An unresolvable name under the reserved .invalid TLD: the message names the https URL it tried.
    const far = await fleet(['login', '--url', 'fleet.invalid:8443/api/v2/', '--email', ADMIN.email, '--password-stdin'], { input: 'x\n' });
    expect(far.code).toBe(1);
    expect(far.stderr).toContain('https://fleet.invalid:8443:');
  });

  it('says to run fleet login when FLEET_TOKEN has expired', async () => {
    const claims = jwt.decode(a.adminToken) as { sub: string; sid: string };
    const secret = await a.broker.services.settings.get<string>('jwt_secret');
    const old = jwt.sign(
      { sub: claims.sub, sid: claims.sid, typ: 'access', exp: Math.floor(Date.now() / 1000) - 3600 },
      crypto.createSecretKey(Buffer.from(secret as string, 'utf8')),
      { algorithm: 'HS256', issuer: 'fleet-broker' },
    );
    const r = await fleet(['devices'], { env: { FLEET_URL: a.url, FLEET_TOKEN: old } });
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/^fleet: FLEET_TOKEN has expired: run "fleet login/);
  });

  it('names --code and --provider when a second factor is asked of --password-stdin without --code', async () => {
    const email = `twofa-${crypto.randomBytes(3).toString('hex')}@example.com`;
    const created = await a.api('POST', '/api/v2/user', {
      token: a.adminToken,
      body: {
        fname: 'Two',
        lname: 'Factor',
        email,
        roles: [(await a.userWith([{ permission: 'device:read' }])).roleId],
        password: 'two-factor-pass-1',
        two_factor: { enabled: true },
      },
    });
    expect(created.status).toBe(201);
    const own = fs.mkdtempSync(path.join(work, '2fa-'));
    const r = await fleet(['login', '--url', a.url, '--email', email, '--password-stdin'], { input: 'two-factor-pass-1\n', env: { XDG_CONFIG_HOME: own } });
    expect(r.code).toBe(1);
    const last = r.stderr.trim().split('\n').pop() as string;
    expect(last).toMatch(/^fleet: The account has a second factor \(email\): give --provider <email> and --code <code>/);
    expect(fs.existsSync(path.join(own, 'fleet', 'credentials.json'))).toBe(false);
  });
});
