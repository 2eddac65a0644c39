/**
 * The installable agent: `npm run build:agent` into a temporary directory, the .deb and the tarball
 * inspected, the systemd unit verified, the broker's GET /install.sh and GET /install/{artifact}, and
 * install.sh run into a temporary root (never onto this machine) whose bundled agent, one `node`
 * process, enrols and connects to a test broker.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_NODE_FLAGS, LAUNCHER } from '../../agent/packaging/build.js';
import { eventually, startAgent, type TestAgent } from '../support/agent.js';
import { startTestBroker, type TestBroker } from '../support/broker.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const TSX = path.join(ROOT, 'node_modules', '.bin', 'tsx');
const VERSION = (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
const ARCH = execFileSync('dpkg', ['--print-architecture'], { encoding: 'utf8' }).trim();
const DEB = `fleet-agent_${VERSION}_${ARCH}.deb`;
const TARBALL = `fleet-agent-${VERSION}-linux-${ARCH}.tar.gz`;

let work: string;
let out: string;
let t: TestBroker;
const agents: TestAgent[] = [];

function run(cmd: string, args: string[], options: { cwd?: string; input?: string } = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', cwd: options.cwd, input: options.input, timeout: 60_000 });
  return { code: r.status, stdout: r.stdout ?? '', stderr: r.stderr ?? '' };
}

/** The same, without blocking this process (which is the broker the command may talk to). */
function runAsync(
  cmd: string,
  args: string[],
  input?: Buffer | string,
  env?: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], ...(env ? { env: { ...process.env, ...env } } : {}) });
    child.stdin.end(input ?? '');
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

function mode(p: string): string {
  return (fs.statSync(p).mode & 0o777).toString(8);
}

/** GET with a Host header of our choosing (fetch does not allow setting it). */
function getWithHost(url: string, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.get(url, { headers: { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
  });
}

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-agent-build-'));
  out = path.join(work, 'dist');
  t = await startTestBroker({ database: 'sqlite', env: { AGENT_ARTIFACTS_DIR: out } });
});
afterAll(async () => {
  await Promise.all(agents.map((a) => a.close()));
  await t?.close();
  fs.rmSync(work, { recursive: true, force: true });
});

describe('the agent build', () => {
  it('answers 404 with what to do while the agent is not built', async () => {
    const script = await fetch(`${t.url}/install.sh`);
    expect(script.status).toBe(404);
    const body = (await script.json()) as { code: number; error: string; message: string };
    expect(body).toMatchObject({ code: 404, error: 'not_found' });
    expect(body.message).toContain('npm run build:agent');
    expect((await fetch(`${t.url}/install/${DEB}`)).status).toBe(404);
  });

  it('builds one bundle with its own runtime dependencies only, versioned, runnable with node alone', () => {
    const built = run(TSX, [path.join(ROOT, 'agent', 'packaging', 'build.ts'), '--out', out], { cwd: ROOT });
    expect(built.stderr).toBe('');
    expect(built.code).toBe(0);
    expect(fs.readdirSync(out).sort()).toEqual([TARBALL, DEB, 'fleet-agent.mjs', 'install.sh', 'node_modules', 'package.json'].sort());

    const manifest = JSON.parse(fs.readFileSync(path.join(out, 'package.json'), 'utf8')) as { version: string; dependencies: Record<string, string> };
    const installed = (name: string) =>
      (JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules', name, 'package.json'), 'utf8')) as { version: string }).version;
    expect(manifest.version).toBe(VERSION);
    expect(manifest.dependencies).toEqual({ 'node-pty': installed('node-pty'), ws: installed('ws') });
    expect(fs.readdirSync(path.join(out, 'node_modules')).sort()).toEqual(['node-pty', 'ws']);
    expect(fs.existsSync(path.join(out, 'node_modules', 'node-pty', 'build', 'Release', 'pty.node'))).toBe(true);

    const bundle = fs.readFileSync(path.join(out, 'fleet-agent.mjs'), 'utf8');
    // Started as a program, it is a shell line that runs node on itself with the agent's flags (agent/packaging/launcher.test.ts).
    expect(bundle.startsWith(LAUNCHER)).toBe(true);
    expect(LAUNCHER).toContain(AGENT_NODE_FLAGS);
    // Its CommonJS dependencies are required, not imported (an import lexes their source: idle memory).
    expect(bundle).toMatch(/require\("ws"\)/);
    expect(bundle).toMatch(/require\("node-pty"\)/);
    expect(bundle).not.toMatch(/(from|import\()\s*["'](ws|node-pty)["']/);
    expect(bundle).toContain(JSON.stringify(VERSION));
    // Nothing of the broker or the console: no imports of their packages, no broker sources.
    for (const foreign of ['express', 'better-sqlite3', 'kysely', 'pg', 'multer', 'preact', 'tsx']) {
      expect(bundle).not.toMatch(new RegExp(`(from|require\\()\\s*["']${foreign}["']`));
    }
    expect(bundle).not.toContain('broker/');
    const help = run(process.execPath, [path.join(out, 'fleet-agent.mjs'), '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Usage: fleet-agent');
  });

  it('packages a .deb: metadata, files, owners, modes, maintainer scripts', () => {
    const info = run('dpkg-deb', ['-I', path.join(out, DEB)]);
    expect(info.code).toBe(0);
    const field = (name: string) => new RegExp(`^ ${name}: (.*)$`, 'm').exec(info.stdout)?.[1];
    expect(field('Package')).toBe('fleet-agent');
    expect(field('Version')).toBe(VERSION);
    expect(field('Architecture')).toBe(ARCH);
    expect(field('Depends')).toBe('nodejs (>= 20)');
    expect(Number(field('Installed-Size'))).toBeGreaterThan(0);

    const listing = run('dpkg-deb', ['-c', path.join(out, DEB)]);
    expect(listing.code).toBe(0);
    const entries = listing.stdout
      .trim()
      .split('\n')
      .map((line) => {
        const [perms, owner, , , , name, , target] = line.split(/\s+/);
        return { perms, owner, name: name === './' ? '/' : name.replace(/^\./, '').replace(/\/$/, ''), target };
      });
    for (const e of entries) expect(e.owner).toBe('root/root');
    const byName = new Map(entries.map((e) => [e.name, e]));
    expect(byName.get('/usr/lib/fleet-agent/fleet-agent.mjs')?.perms).toBe('-rwxr-xr-x');
    expect(byName.get('/usr/lib/fleet-agent/package.json')?.perms).toBe('-rw-r--r--');
    expect(byName.get('/usr/lib/fleet-agent/node_modules/node-pty/build/Release/pty.node')).toBeDefined();
    expect(byName.get('/usr/lib/systemd/system/fleet-agent.service')?.perms).toBe('-rw-r--r--');
    expect(byName.get('/usr/bin/fleet-agent')).toMatchObject({ perms: 'lrwxrwxrwx', target: '../lib/fleet-agent/fleet-agent.mjs' });
    // Only its own tree: nothing in /etc (install.sh writes the configuration), nothing world-writable.
    for (const e of entries) {
      expect(e.name === '/' || e.name === '/usr' || e.name.startsWith('/usr/')).toBe(true);
      if (!e.perms.startsWith('l')) expect(e.perms[8]).toBe('-');
    }

    // The maintainer scripts parse and are executable; the tarball holds the same tree.
    const control = path.join(work, 'control');
    expect(run('dpkg-deb', ['-e', path.join(out, DEB), control]).code).toBe(0);
    for (const script of ['postinst', 'prerm', 'postrm']) {
      expect(mode(path.join(control, script))).toBe('755');
      expect(run('sh', ['-n', path.join(control, script)]).code).toBe(0);
    }
    const tarListing = run('tar', ['-tzf', path.join(out, TARBALL)]);
    expect(tarListing.code).toBe(0);
    const tarNames = tarListing.stdout
      .trim()
      .split('\n')
      .map((n) => `/${n.replace(/\/$/, '')}`);
    expect(tarNames.sort()).toEqual(
      entries
        .map((e) => e.name)
        .filter((n) => n !== '/')
        .sort(),
    );
  });

  it('installs a systemd unit that systemd-analyze verifies', () => {
    // The unit as the .deb installs it; ExecStart pointed at the unpacked tree, as the binary is not
    // installed on this machine (verify checks that it exists and is executable).
    const tree = path.join(work, 'deb-tree');
    expect(run('dpkg-deb', ['-x', path.join(out, DEB), tree]).code).toBe(0);
    const unit = fs.readFileSync(path.join(tree, 'usr', 'lib', 'systemd', 'system', 'fleet-agent.service'), 'utf8');
    expect(unit).toMatch(/^ExecStart=\/usr\/bin\/fleet-agent --config \/etc\/fleet-agent\/config.json --exit-on-reload$/m);
    expect(unit).toMatch(/^User=root$/m);
    expect(unit).toMatch(/^StateDirectory=fleet-agent$/m);
    const check = path.join(work, 'verify', 'fleet-agent.service');
    fs.mkdirSync(path.dirname(check));
    fs.writeFileSync(check, unit.replace('ExecStart=/usr/bin/fleet-agent', `ExecStart=${path.join(tree, 'usr', 'bin', 'fleet-agent')}`));
    const verified = run('systemd-analyze', ['verify', check]);
    expect(verified.stderr).toBe('');
    expect(verified.code).toBe(0);
  });
});

describe('install.sh from the broker', () => {
  it('serves the script with its own URL, and the packages; refuses other names and hosts', async () => {
    const r = await fetch(`${t.url}/install.sh`);
    expect(r.status).toBe(200);
    expect(r.headers.get('content-type')).toMatch(/^text\/x-shellscript/);
    const script = await r.text();
    expect(script.startsWith('#!/bin/sh\n')).toBe(true);
    expect(script).toContain(`BROKER='${t.url}'`);
    expect(script).toContain(`VERSION='${VERSION}'`);
    // The digest of every package it serves, and its signing key, written in by the broker.
    const digestOf = (name: string) =>
      crypto
        .createHash('sha256')
        .update(fs.readFileSync(path.join(out, name)))
        .digest('hex');
    expect(script).toContain(
      `PACKAGE_SHA256S='${[DEB, TARBALL]
        .sort()
        .map((n) => `${digestOf(n)}  ${n}`)
        .join('\n')}'`,
    );
    expect(script).toContain(`BROKER_KEY='${t.broker.services.brokerKey.publicKeyPem.trim()}'`);
    expect(script).not.toContain('__FLEET_');
    const file = path.join(work, 'install.sh');
    fs.writeFileSync(file, script);
    expect(run('sh', ['-n', file])).toMatchObject({ code: 0, stderr: '' });

    const deb = await fetch(`${t.url}/install/${DEB}`);
    expect(deb.status).toBe(200);
    expect(deb.headers.get('content-type')).toBe('application/vnd.debian.binary-package');
    const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex');
    expect(sha(Buffer.from(await deb.arrayBuffer()))).toBe(sha(fs.readFileSync(path.join(out, DEB))));
    expect((await fetch(`${t.url}/install/${TARBALL}`)).headers.get('content-type')).toBe('application/gzip');

    // Only agent packages: not the script's source, the manifest or anything by traversal.
    for (const name of ['package.json', 'install.sh', '..%2Fpackage.json', 'fleet-agent.mjs', `fleet-agent%2F..%2F..%2F${DEB}`]) {
      const bad = await fetch(`${t.url}/install/${name}`);
      expect(bad.status).toBe(400);
      expect(await bad.json()).toMatchObject({ code: 400, error: 'invalid_request' });
    }
    const missing = await fetch(`${t.url}/install/fleet-agent_${VERSION}_sparc.deb`);
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { message: string }).message).toContain('npm run build:agent');
    // A Host header that is not a host never reaches the script.
    const hostile = await getWithHost(`${t.url}/install.sh`, "x';reboot;'");
    expect(hostile.status).toBe(400);
    expect(hostile.body).not.toContain('reboot');
  });

  it('refuses to install without a key, with a malformed one or one on the command line, changing nothing', () => {
    const file = path.join(work, 'install.sh');
    const root = fs.mkdtempSync(path.join(work, 'root-'));
    const keyFile = path.join(work, 'bad-key');
    const noKey = run('sh', [file, '--root', root]);
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toContain('--bootstrap-key-file');
    fs.writeFileSync(keyFile, 'a b"c\n');
    const badKey = run('sh', [file, '--root', root, '--bootstrap-key-file', keyFile]);
    expect(badKey.code).toBe(1);
    expect(badKey.stderr).toContain('unexpected characters');
    // sudo logs command lines and ps shows them: the key never comes from there.
    for (const args of [['--bootstrap-key', 'k3y'], ['--bootstrap-key=k3y']]) {
      const onCommandLine = run('sh', [file, '--root', root, ...args]);
      expect(onCommandLine.code).toBe(1);
      expect(onCommandLine.stderr).toContain('not taken from the command line');
    }
    fs.writeFileSync(keyFile, 'k\n');
    const badBroker = run('sh', [file, '--root', root, '--bootstrap-key-file', keyFile, '--broker', 'https://x"y']);
    expect(badBroker.code).toBe(1);
    expect(fs.readdirSync(root)).toEqual([]);
  });

  it('refuses a plain http broker on another machine unless --insecure-http, changing nothing', () => {
    const file = path.join(work, 'install.sh');
    const root = fs.mkdtempSync(path.join(work, 'root-'));
    const keyFile = path.join(work, 'key');
    fs.writeFileSync(keyFile, 'k\n');
    for (const broker of ['http://broker.example.com', 'http://10.0.0.5:8080', 'http://127.0.0.1.example.com', 'http://127.0.0.1@broker.example.com']) {
      const r = run('sh', [file, '--root', root, '--bootstrap-key-file', keyFile, '--broker', broker]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain('refusing the plain http broker');
      expect(r.stderr).toContain('--insecure-http');
    }
    expect(fs.readdirSync(root)).toEqual([]);
  });

  it('refuses a package that does not match the digest in the script, installing nothing', async () => {
    // The script from the broker; the package from somewhere on the way that altered it.
    const genuine = fs.readFileSync(path.join(out, TARBALL));
    const tampered = Buffer.from(genuine);
    tampered[tampered.length - 1] ^= 0xff;
    const server = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'application/gzip' });
      res.end(req.url === `/install/${TARBALL}` ? tampered : 'nope');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const keyFile = path.join(work, 'key');
      fs.writeFileSync(keyFile, 'k\n');
      const root = fs.mkdtempSync(path.join(work, 'root-'));
      const mirror = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      const r = await runAsync('sh', [path.join(work, 'install.sh'), '--root', root, '--format', 'tar', '--bootstrap-key-file', keyFile, '--broker', mirror]);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`the downloaded ${TARBALL} does not match the broker's digest`);
      expect(fs.readdirSync(root)).toEqual([]);
    } finally {
      server.close();
    }
  });

  it('installs into a temporary root; the installed agent, one node process, enrols and connects', async () => {
    const created = await t.api('POST', '/api/v2/bootstrapkey', { token: t.adminToken, body: { auto_accept: true } });
    expect(created.status).toBe(200);
    const key = Object.keys(created.body as object)[0];
    const root = fs.mkdtempSync(path.join(work, 'root-'));
    // As the console's line runs it: the script saved to a file, the key on standard input.
    const installed = await runAsync('sh', [path.join(work, 'install.sh'), '--root', root, '--bootstrap-key-stdin'], `${key}\n`);
    expect(installed.stderr).toContain('nothing started');
    expect(installed.stderr).toMatch(new RegExp(`checked ${TARBALL.replaceAll('.', '\\.')}: sha256 [0-9a-f]{64}`));
    expect(installed.code).toBe(0);

    const conf = path.join(root, 'etc', 'fleet-agent');
    expect(mode(conf)).toBe('700');
    expect(mode(path.join(root, 'var', 'lib', 'fleet-agent'))).toBe('700');
    expect(mode(path.join(conf, 'config.json'))).toBe('600');
    expect(mode(path.join(conf, 'bootstrap-key'))).toBe('600');
    expect(fs.readFileSync(path.join(conf, 'bootstrap-key'), 'utf8')).toBe(`${key}\n`);
    // The broker's signing key, pinned for the agent from the same channel as the script.
    const pinned = path.join(root, 'var', 'lib', 'fleet-agent', 'broker-key.pem');
    expect(fs.readFileSync(pinned, 'utf8')).toBe(t.broker.services.brokerKey.publicKeyPem);
    expect(mode(pinned)).toBe('600');
    expect(JSON.parse(fs.readFileSync(path.join(conf, 'config.json'), 'utf8'))).toEqual({
      broker: t.url,
      bootstrap_key_file: '/etc/fleet-agent/bootstrap-key',
      state_dir: '/var/lib/fleet-agent',
    });
    const program = path.join(root, 'usr', 'bin', 'fleet-agent');
    expect(fs.readlinkSync(program)).toBe('../lib/fleet-agent/fleet-agent.mjs');
    expect(fs.existsSync(path.join(root, 'usr', 'lib', 'systemd', 'system', 'fleet-agent.service'))).toBe(true);

    // The .deb's tree is the same (unpacked with dpkg-deb below a root: nothing registered with dpkg here).
    const debRoot = fs.mkdtempSync(path.join(work, 'root-'));
    // `curl … | sh -s`, the key from the environment.
    const viaDeb = await runAsync('sh', ['-s', '--', '--root', debRoot, '--format', 'deb'], fs.readFileSync(path.join(work, 'install.sh')), {
      FLEET_BOOTSTRAP_KEY: key,
    });
    expect(viaDeb.code).toBe(0);
    expect(fs.readFileSync(path.join(debRoot, 'etc', 'fleet-agent', 'bootstrap-key'), 'utf8')).toBe(`${key}\n`);
    // From a key file as well.
    const keyFile = path.join(work, 'enrol-key');
    fs.writeFileSync(keyFile, `${key}\n`);
    const fileRoot = fs.mkdtempSync(path.join(work, 'root-'));
    const viaFile = await runAsync('sh', [path.join(work, 'install.sh'), '--root', fileRoot, '--bootstrap-key-file', keyFile]);
    expect(viaFile.code).toBe(0);
    expect(fs.readFileSync(path.join(fileRoot, 'etc', 'fleet-agent', 'bootstrap-key'), 'utf8')).toBe(`${key}\n`);
    const files = (dir: string) => (fs.readdirSync(dir, { recursive: true }) as string[]).sort();
    expect(files(debRoot)).toEqual(files(root));

    // The installed program with the installed configuration; only the paths below the temporary
    // root are given on the command line (the configuration names the real system's paths).
    const agent = startAgent({
      program,
      stateDir: path.join(root, 'var', 'lib', 'fleet-agent'),
      args: ['--config', path.join(conf, 'config.json'), '--bootstrap-key-file', path.join(conf, 'bootstrap-key')],
    });
    agents.push(agent);
    const device = await agent.waitConnected(t, 30_000);
    const starting = await agent.waitForLog((l) => l.msg === 'fleet agent starting');
    expect(starting.version).toBe(VERSION);

    // One process, node itself (no tsx wrapper, no loader), and the key is not on its command line.
    const pid = agent.process.pid as number;
    expect(fs.realpathSync(`/proc/${pid}/exe`)).toBe(fs.realpathSync(process.execPath));
    const cmdline = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
    expect(cmdline).toContain(path.join(root, 'usr', 'bin', 'fleet-agent'));
    expect(cmdline).not.toContain(key);
    expect(cmdline).not.toContain('tsx');
    // No second node (a loader or wrapper would make one); short-lived commands the inventory runs may come and go.
    const children = run('pgrep', ['-P', String(pid)])
      .stdout.split('\n')
      .filter(Boolean)
      .map((child) => {
        try {
          return fs.readFileSync(`/proc/${child}/comm`, 'utf8').trim();
        } catch {
          return 'gone';
        }
      });
    expect(children.filter((name) => name === 'node' || name.startsWith('MainThread'))).toEqual([]);

    // The broker knows it by its version (the inventory's agent version, sent on connect).
    const report = await eventually(async () => {
      const r = await t.api('GET', `/api/v2/inventory/${device}`, { token: t.adminToken });
      return r.status === 200 ? r.body : undefined;
    });
    expect(JSON.stringify(report)).toContain(`"agent_version":"${VERSION}"`);
  });
});
