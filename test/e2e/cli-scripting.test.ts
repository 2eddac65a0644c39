/**
 * The `fleet` CLI in scripts: filters and output formats, id prefixes, one-shot console commands,
 * recordings, shell completion and recursive copies, driven as users run it (bin/fleet.js in a
 * child process) against a real broker and a real agent process.
 */
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const FLEET = path.join(ROOT, 'bin', 'fleet.js');

let t: TestBroker;
let agent: TestAgent;
let device: string;
let work: string;
let env: Record<string, string>;

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function fleet(args: string[], options: { input?: string; env?: Record<string, string> } = {}): Promise<Run> {
  const { FLEET_URL: _u, FLEET_TOKEN: _t, ...rest } = process.env;
  const child = spawn(process.execPath, [FLEET, ...args], { cwd: work, env: { ...rest, XDG_CONFIG_HOME: path.join(work, 'config'), ...env, ...options.env } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  child.stdin.end(options.input ?? '');
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

const hex = (prefix: string) => (prefix + crypto.randomBytes(32).toString('hex')).slice(0, 64);

beforeAll(async () => {
  t = await startTestBroker({ database: 'sqlite' });
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-scripts-'));
  env = { FLEET_URL: t.url, FLEET_TOKEN: t.adminToken };
  const key = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
  agent = startAgent({ broker: t.url, bootstrapKey: Object.keys(key.body)[0] });
  device = await agent.waitConnected(t);
});

afterAll(async () => {
  await agent?.close();
  await t?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('fleet devices in scripts', () => {
  it('filters by name, tag, group and status; -o json|wide|table; short ids keep a table within 80 columns', async () => {
    const group = await t.addGroup({ id: `grp-${crypto.randomBytes(3).toString('hex')}`, title: 'lab' });
    const inLab = await t.addDevice({ parent: group, tags: ['sensor', 'north'], name: 'lab-sensor-1' });
    const other = await t.addDevice({ tags: ['sensor'], name: 'yard-sensor-2' });

    const json = await fleet(['devices', '-o', 'json', '--tag', 'sensor']);
    expect(json.code, json.stderr).toBe(0);
    expect(
      JSON.parse(json.stdout)
        .map((d: any) => d.id)
        .sort(),
    ).toEqual([inLab, other].sort());
    // --json stays the same as -o json.
    const alias = await fleet(['devices', '--json', '--tag', 'sensor', '--tag', 'north']);
    expect(JSON.parse(alias.stdout).map((d: any) => d.id)).toEqual([inLab]);
    const byGroup = await fleet(['devices', '-o', 'json', '--group', 'lab']);
    expect(JSON.parse(byGroup.stdout).map((d: any) => d.id)).toEqual([inLab]);
    const byName = await fleet(['devices', '-o', 'json', '--name', 'YARD']);
    expect(JSON.parse(byName.stdout).map((d: any) => d.id)).toEqual([other]);
    const online = await fleet(['devices', '-o', 'json', '--online']);
    expect(JSON.parse(online.stdout).map((d: any) => d.id)).toEqual([device]);
    const offline = await fleet(['devices', '-o', 'json', '--offline']);
    expect(JSON.parse(offline.stdout).map((d: any) => d.id)).toEqual(expect.arrayContaining([inLab, other]));
    expect(JSON.parse(offline.stdout).map((d: any) => d.id)).not.toContain(device);

    const table = await fleet(['devices']);
    expect(table.code).toBe(0);
    for (const line of table.stdout.trimEnd().split('\n')) expect(line.length).toBeLessThanOrEqual(80);
    expect(table.stdout).not.toContain(device);
    expect(table.stdout).toMatch(new RegExp(`^${device.slice(0, 8)}[0-9a-f]*\\s`, 'm'));
    const wide = await fleet(['devices', '-o', 'wide']);
    expect(wide.stdout).toContain(device);
    const bad = await fleet(['devices', '-o', 'yaml']);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/^fleet: -o yaml: the output is table, wide or json\./);
  });

  it('names a device by a unique id prefix of 4 or more; an ambiguous one lists the matching short ids', async () => {
    const r = await fleet(['reload', device.slice(0, 4)]);
    expect(r.stderr, r.stderr).toContain('reloaded');
    expect(r.code).toBe(0);
    await agent.waitConnected(t);

    const stem = crypto.randomBytes(2).toString('hex').replace(/^./, 'f');
    const a = await t.addDevice({ id: hex(`${stem}0a`) });
    const b = await t.addDevice({ id: hex(`${stem}0b`) });
    const ambiguous = await fleet(['reload', stem]);
    expect(ambiguous.code).toBe(1);
    expect(ambiguous.stderr.trim().split('\n')).toHaveLength(1);
    expect(ambiguous.stderr).toContain(`"${stem}" is the start of 2 device ids (${a.slice(0, 8)}, ${b.slice(0, 8)})`);
    const tooShort = await fleet(['reload', device.slice(0, 3)]);
    expect(tooShort.code).toBe(1);
    expect(tooShort.stderr).toMatch(/at least 4 characters/);
    const help = await fleet(['console', '--help']);
    expect(help.stdout.replace(/\s+/g, ' ')).toMatch(/unique prefix of its id \(4 or more characters\)/);
  });
});

describe('fleet console <device> <command…>', () => {
  it('runs one command, exits with its status, and writes plain text to a pipe (no escape codes, no echo)', async () => {
    const r = await fleet(
      ['console', device.slice(0, 6), '--', 'sh', '-c', 'printf "\\033[1;31mred\\033[0m \\033]0;title\\007line\\n"; echo "second $((6*7))"; exit 7'],
      {
        input: 'typed-but-not-sent\n',
      },
    );
    expect(r.stderr).toBe('');
    expect(r.code).toBe(7);
    expect(r.stdout).toContain('red line\nsecond 42\n');
    expect(r.stdout).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f]/);
    expect(r.stdout).not.toContain('typed-but-not-sent');
    // A command reading its input sees the end of it at once, rather than waiting forever.
    const cat = await fleet(['console', device, 'cat']);
    expect(cat.code).toBe(0);
    // The command is in the session's audit entry.
    const audit = await t.api('GET', `/api/v2/commitlist?device_id=${device}&action=console`, { token: t.adminToken });
    expect((audit.body.items as any[]).some((e) => JSON.stringify(e.options?.command) === JSON.stringify(['cat']))).toBe(true);
  });
});

describe('fleet recordings and play', () => {
  it('lists the recordings one may play, and plays one by the session id shown there, its audit entry, or its sign-in session', async () => {
    const user = await t.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
    const asUser = { env: { FLEET_TOKEN: user.token } };
    const ran = await fleet(['console', device, '--', 'sh', '-c', 'echo "recorded-$((20+3))"'], asUser);
    expect(ran.code, ran.stderr).toBe(0);

    const mine = await fleet(['recordings', '-o', 'json'], asUser);
    expect(mine.code, mine.stderr).toBe(0);
    const items = JSON.parse(mine.stdout);
    expect(items).toHaveLength(1); // the admin's consoles are not theirs to play
    const [rec] = items;
    expect(rec).toMatchObject({ device: { id: device }, user: { email: user.email }, command: ['sh', '-c', 'echo "recorded-$((20+3))"'] });
    expect(rec.id).toMatch(/^[0-9a-f-]{36}$/);
    expect(typeof rec.duration_ms).toBe('number');

    // The administrator (remote-access:manage everywhere) sees it too, in a table within 80 columns.
    const table = await fleet(['recordings', device.slice(0, 8)]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout.split('\n')[0]).toMatch(/^SESSION\s+USER\s+DEVICE\s+START\s+DURATION/);
    const line = table.stdout.split('\n').find((l) => l.includes(user.email)) ?? '';
    expect(line.startsWith(rec.id.slice(0, 8))).toBe(true);
    expect(line.length).toBeLessThanOrEqual(80);

    for (const given of [rec.id.slice(0, 8), String(rec.audit_id), rec.session_id, rec.id]) {
      const played = await fleet(['play', given, '--no-wait'], asUser);
      expect(played.stderr, given).toBe('');
      expect(played.code).toBe(0);
      expect(played.stdout).toContain('recorded-23');
    }
    const none = await fleet(['play', 'deadbeef'], asUser);
    expect(none.code).toBe(1);
    expect(none.stderr).toMatch(/^fleet: No recording "deadbeef" among those you may play/);
  });
});

describe('fleet connect with port presets', () => {
  /** Runs fleet until it exits, or until it says it forwards (then stops it): a listener that opened is seen either way. */
  function untilForwarding(args: string[], options: { input?: string; env?: Record<string, string> } = {}): Promise<Run & { port?: number }> {
    const { FLEET_URL: _u, FLEET_TOKEN: _t, ...rest } = process.env;
    const child = spawn(process.execPath, [FLEET, ...args], { cwd: work, env: { ...rest, ...env, ...options.env } });
    let stdout = '';
    let stderr = '';
    let port: number | undefined;
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => {
      stderr += d;
      const m = /Forwarding 127\.0\.0\.1:(\d+)/.exec(stderr);
      if (m && port === undefined) {
        port = Number(m[1]);
        child.emit('forwarding');
      }
    });
    child.stdin.end(options.input ?? '');
    return new Promise((resolve) => {
      child.once('forwarding', async () => {
        // The forward works: one round trip through it.
        const socket = net.connect(port as number, '127.0.0.1');
        const echoed = await new Promise<string>((done) => {
          let got = '';
          socket.on('data', (d) => (got += d));
          socket.on('end', () => done(got));
          socket.on('error', () => done(got));
          socket.end('through-the-preset');
        });
        stdout += echoed;
        child.kill('SIGINT');
      });
      child.on('close', (code) => resolve({ code, stdout, stderr, port }));
    });
  }

  it('offers the device presets without -t (by number, or --preset NAME); refuses a denied or offline device before listening', async () => {
    const echo = net.createServer((s) => s.pipe(s));
    await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
    const echoPort = (echo.address() as net.AddressInfo).port;
    try {
      const made = await t.api('POST', '/api/v2/service-connect/portmap', {
        token: t.adminToken,
        body: { target: '*', name: 'Echo', proto: 'tcp', port: echoPort, dst: '127.0.0.1' },
      });
      expect(made.status, JSON.stringify(made.body)).toBe(201);

      const byName = await untilForwarding(['connect', device, '--preset', 'echo']);
      expect(byName.stderr).toContain(`to 127.0.0.1:${echoPort}`);
      expect(byName.stdout).toBe('through-the-preset');
      const byNumber = await untilForwarding(['connect', device], { input: '1\n' });
      expect(byNumber.stderr).toMatch(new RegExp(`1\\) Echo \\(127\\.0\\.0\\.1:${echoPort}\\)`));
      expect(byNumber.stdout).toBe('through-the-preset');
      const unknown = await untilForwarding(['connect', device, '--preset', 'nope']);
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toMatch(/^fleet: No port preset "nope" for .*; there are: Echo\./);

      const consoleOnly = await t.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/console'] }]);
      const denied = await untilForwarding(['connect', device, '-t', `0:127.0.0.1:${echoPort}`], { env: { FLEET_TOKEN: consoleOnly.token } });
      expect(denied.port).toBeUndefined();
      expect(denied.code).toBe(1);
      expect(denied.stderr).toMatch(/^fleet: Not allowed: no grant of remote-access:connect allows tunnels on/);
      await t.addDevice({ name: 'never-online' });
      const offline = await untilForwarding(['connect', 'never-online', '-t', `0:127.0.0.1:${echoPort}`]);
      expect(offline.port).toBeUndefined();
      expect(offline.code).toBe(1);
      expect(offline.stderr).toBe('fleet: never-online is not connected to the broker; try again when it is online.\n');
    } finally {
      echo.close();
    }
  });

  it('refuses a forward its tunnel grant does not cover (port, host or protocol) before any local port opens, naming the grant', async () => {
    const echo = net.createServer((s) => s.pipe(s));
    await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', resolve));
    const echoPort = (echo.address() as net.AddressInfo).port;
    // A local port free now: the refused forward would listen there.
    const probe = net.createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const local = (probe.address() as net.AddressInfo).port;
    await new Promise((resolve) => probe.close(resolve));
    const listening = () =>
      new Promise<boolean>((resolve) => {
        const socket = net.connect(local, '127.0.0.1');
        socket.on('connect', () => (socket.destroy(), resolve(true)));
        socket.on('error', () => resolve(false));
      });
    try {
      const sshOnly = await t.userWith([{ permission: 'device:read' }, { permission: 'remote-access:connect', resources: ['*/tunnel(proto=tcp;port=22)'] }]);
      const denied = await untilForwarding(['connect', device, '-t', `${local}:localhost:8080`], { env: { FLEET_TOKEN: sshOnly.token } });
      expect(denied.port).toBeUndefined();
      expect(denied.code).toBe(1);
      expect(denied.stderr).toMatch(
        /^fleet: Not allowed: no grant of remote-access:connect on \S+ allows tunnel\(proto=tcp;port=8080;dst=localhost\); ask an administrator for it/,
      );
      expect(denied.stderr.trim().split('\n')).toHaveLength(1);
      expect(await listening()).toBe(false);
      // Among several forwards, one not covered refuses them all, before any listens.
      const mixed = await untilForwarding(['connect', device, '-t', `0:localhost:22`, '-t', `${local}:localhost:22/udp`], {
        env: { FLEET_TOKEN: sshOnly.token },
      });
      expect(mixed.port).toBeUndefined();
      expect(mixed.stderr).toMatch(/allows tunnel\(proto=udp;port=22;dst=localhost\)/);

      // The port the grant names is forwarded; another host than the grant's is refused.
      const echoOnly = await t.userWith([
        { permission: 'device:read' },
        { permission: 'remote-access:connect', resources: [`*/tunnel(port=${echoPort};dst=127.0.0.1)`] },
      ]);
      const allowed = await untilForwarding(['connect', device, '-t', `0:127.0.0.1:${echoPort}`], { env: { FLEET_TOKEN: echoOnly.token } });
      expect(allowed.stdout).toBe('through-the-preset');
      const otherHost = await untilForwarding(['connect', device, '-t', `${local}:localhost:${echoPort}`], { env: { FLEET_TOKEN: echoOnly.token } });
      expect(otherHost.port).toBeUndefined();
      expect(otherHost.stderr).toContain(`allows tunnel(proto=tcp;port=${echoPort};dst=localhost)`);
    } finally {
      echo.close();
    }
  });
});

describe('fleet completion', () => {
  it('prints a bash script that completes the commands and the options of each, from the program itself', async () => {
    const r = await fleet(['completion', 'bash']);
    expect(r.code).toBe(0);
    const complete = (line: string[]) => {
      const script = `${r.stdout}\nCOMP_WORDS=(${line.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${line.length - 1}; _fleet_complete; echo "\${COMPREPLY[*]}"`;
      return spawnSync('bash', ['--norc', '-c', script], { encoding: 'utf8' }).stdout.trim();
    };
    expect(complete(['fleet', 'de'])).toBe('devices');
    expect(complete(['fleet', 'co']).split(' ').sort()).toEqual(['completion', 'connect', 'console']);
    expect(complete(['fleet', 'devices', '--o']).split(' ').sort()).toEqual(['--offline', '--online', '--output']);
    for (const shell of ['zsh', 'fish']) {
      const s = await fleet(['completion', shell]);
      expect(s.code).toBe(0);
      expect(s.stdout).toContain('devices');
      expect(s.stdout).toContain('offline');
    }
    const unknown = await fleet(['completion', 'tcsh']);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/^fleet: No completion for "tcsh": give bash, zsh, fish\./);
  });
});

describe('fleet cp like scp', () => {
  const mode = (file: string) => fs.statSync(file).mode & 0o777;
  let remoteDir: string;
  beforeAll(() => {
    remoteDir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-cli-device-'));
  });
  afterAll(() => fs.rmSync(remoteDir, { recursive: true, force: true }));

  it('copies a directory tree both ways with -r, permissions kept', async () => {
    const tree = path.join(work, 'tree');
    fs.mkdirSync(path.join(tree, 'sub', 'deeper'), { recursive: true });
    fs.writeFileSync(path.join(tree, 'run.sh'), '#!/bin/sh\necho hi\n', { mode: 0o755 });
    fs.chmodSync(path.join(tree, 'run.sh'), 0o755);
    fs.writeFileSync(path.join(tree, 'sub', 'private.txt'), 'secret-ish');
    fs.chmodSync(path.join(tree, 'sub', 'private.txt'), 0o640);
    const big = crypto.randomBytes(300_000);
    fs.writeFileSync(path.join(tree, 'sub', 'deeper', 'big.bin'), big);
    fs.chmodSync(path.join(tree, 'sub', 'deeper', 'big.bin'), 0o644);
    fs.chmodSync(path.join(tree, 'sub'), 0o750);

    const up = await fleet(['cp', '-r', tree, `${device}:${remoteDir}`]);
    expect(up.stderr).toBe('');
    expect(up.code).toBe(0);
    const there = path.join(remoteDir, 'tree');
    expect(fs.readFileSync(path.join(there, 'sub', 'deeper', 'big.bin')).equals(big)).toBe(true);
    expect(mode(path.join(there, 'run.sh'))).toBe(0o755);
    expect(mode(path.join(there, 'sub', 'private.txt'))).toBe(0o640);
    expect(mode(path.join(there, 'sub'))).toBe(0o750);

    const back = path.join(work, 'tree-back');
    const down = await fleet(['cp', '-r', `${device}:${there}`, back]);
    expect(down.stderr).toBe('');
    expect(down.code).toBe(0);
    expect(fs.readFileSync(path.join(back, 'sub', 'deeper', 'big.bin')).equals(big)).toBe(true);
    expect(fs.readFileSync(path.join(back, 'run.sh'), 'utf8')).toContain('echo hi');
    expect(mode(path.join(back, 'run.sh'))).toBe(0o755);
    expect(mode(path.join(back, 'sub', 'private.txt'))).toBe(0o640);
    // Into an existing directory, the tree goes inside it.
    const intoDir = fs.mkdtempSync(path.join(work, 'into-'));
    const again = await fleet(['cp', '-r', `${device}:${there}`, intoDir]);
    expect(again.code, again.stderr).toBe(0);
    expect(fs.existsSync(path.join(intoDir, 'tree', 'sub', 'private.txt'))).toBe(true);
    // Without -r a directory is refused with a sentence.
    const noR = await fleet(['cp', tree, `${device}:${remoteDir}/`]);
    expect(noR.code).toBe(1);
    expect(noR.stderr).toMatch(/^fleet: .*tree is a directory: copy it with -r\./);
  });

  it('takes a device directory without its trailing slash as the directory to copy into; keeps the file mode both ways', async () => {
    const local = path.join(work, 'tool.sh');
    fs.writeFileSync(local, '#!/bin/sh\n');
    fs.chmodSync(local, 0o750);
    const up = await fleet(['cp', local, `${device}:${remoteDir}`]);
    expect(up.stderr).toBe('');
    expect(up.code).toBe(0);
    expect(mode(path.join(remoteDir, 'tool.sh'))).toBe(0o750);
    const shared = path.join(work, 'shared.txt');
    fs.writeFileSync(shared, 'for all');
    fs.chmodSync(shared, 0o644);
    // Whatever the agent's umask: the client's permissions are set exactly.
    expect((await fleet(['cp', shared, `${device}:${remoteDir}/`])).code).toBe(0);
    expect(mode(path.join(remoteDir, 'shared.txt'))).toBe(0o644);

    fs.writeFileSync(path.join(remoteDir, 'exec.bin'), 'x');
    fs.chmodSync(path.join(remoteDir, 'exec.bin'), 0o711);
    const back = path.join(work, 'exec-back.bin');
    const down = await fleet(['cp', `${device}:${remoteDir}/exec.bin`, back]);
    expect(down.code, down.stderr).toBe(0);
    expect(mode(back)).toBe(0o711);
  });

  it('says a device path must be absolute, and local problems in sentences, not error codes', async () => {
    const relative = await fleet(['cp', path.join(work, 'tool.sh'), `${device}:tmp/x`]);
    expect(relative.code).toBe(1);
    expect(relative.stderr).toMatch(/^fleet: .*paths on a device are absolute/);
    const missing = await fleet(['cp', 'no-such-file.bin', `${device}:${remoteDir}/`]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toBe('fleet: no-such-file.bin does not exist.\n');
    fs.writeFileSync(path.join(remoteDir, 'here.txt'), 'here');
    const nowhere = await fleet(['cp', `${device}:${remoteDir}/here.txt`, path.join(work, 'no-dir', 'here.txt')]);
    expect(nowhere.code).toBe(1);
    expect(nowhere.stderr).not.toMatch(/E[A-Z]{3,}/);
    expect(nowhere.stderr).toMatch(/^fleet: the directory .*no-dir does not exist\./);
  });

  it('sends a large file over a slow link without a listener leak warning', async () => {
    // A slow link between the CLI and the broker: the CLI waits for room to send many times over.
    const proxy = net.createServer((client) => {
      const upstream = net.connect(new URL(t.url).port ? Number(new URL(t.url).port) : 80, new URL(t.url).hostname);
      client.on('data', (chunk) => {
        upstream.write(chunk);
        client.pause();
        setTimeout(() => client.resume(), 5);
      });
      upstream.pipe(client);
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.destroy());
      client.on('close', () => upstream.destroy());
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    try {
      const local = path.join(work, 'large.bin');
      const content = crypto.randomBytes(32 * 1024 * 1024);
      fs.writeFileSync(local, content);
      const viaProxy = { FLEET_URL: `http://127.0.0.1:${(proxy.address() as net.AddressInfo).port}` };
      const up = await fleet(['cp', local, `${device}:${remoteDir}/large.bin`], { env: viaProxy });
      expect(up.stderr).not.toMatch(/MaxListenersExceeded/);
      expect(up.stderr).toBe('');
      expect(up.code).toBe(0);
      expect(fs.readFileSync(path.join(remoteDir, 'large.bin')).equals(content)).toBe(true);
    } finally {
      proxy.close();
    }
  });
});
