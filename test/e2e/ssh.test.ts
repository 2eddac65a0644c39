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
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { sshFiles } from '../../cli/ssh.js';
import { openSshPrivateKey, publicKeyLine } from '../../shared/ssh-keys.js';
import { SSH_MAX_CHANNELS } from '../../broker/ssh/gateway.js';
import { MAX_LIST_ENTRIES } from '../../shared/protocol.js';
import { echoServer, eventually, startEnrolledAgent, type TestAgent } from '../support/agent.js';
import { ADMIN, startTestBroker, type TestBroker } from '../support/broker.js';
import { connectRemote } from '../support/remote-ws.js';
import { withFleetOnPath } from '../support/fleet-path.js';
import { echoThroughForward, runSsh, sshUser as makeSshUser, type Run, type SshUser as ClientUser } from '../support/ssh-client.js';

const FLEET = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'bin', 'fleet.js');

let t: TestBroker;
let agent: TestAgent;
let device: string;
let work: string;
let echo: net.Server;
let echoPort: number;

/** A user's client set-up (the support's), and the token it was made with. */
type SshUser = ClientUser & { token: string };

async function sshUser(token: string, name: string): Promise<SshUser> {
  return { ...(await makeSshUser(t, work, token, name)), token };
}

const ssh = (user: Pick<SshUser, 'env' | 'config'>, args: string[], input: string | Buffer = ''): Promise<Run> => runSsh('ssh', user, args, input);

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
    const env: NodeJS.ProcessEnv = await withFleetOnPath({ ...rest, HOME: home, XDG_CONFIG_HOME: path.join(home, '.config') });
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
    const run = await ssh({ env, config: file }, [`root@${row.title}.127.0.0.1`, 'echo by-name']);
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

  it('runs rsync over ssh (an exec of rsync is a console command without a terminal)', async () => {
    const source = fs.mkdtempSync(path.join(work, 'rsync-src-'));
    const target = fs.mkdtempSync(path.join(work, 'rsync-dst-'));
    fs.writeFileSync(path.join(source, 'a.bin'), crypto.randomBytes(150_000));
    fs.mkdirSync(path.join(source, 'sub'));
    fs.writeFileSync(path.join(source, 'sub', 'b.txt'), 'nested\n');
    const run = await new Promise<Run>((resolve) => {
      const child = spawn('rsync', ['-a', '-e', `ssh -F ${admin.config} -o BatchMode=yes`, `${source}/`, `root@${host()}:${target}/`], { env: admin.env });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    expect(run.code, run.stderr).toBe(0);
    expect(fs.readFileSync(path.join(target, 'a.bin')).equals(fs.readFileSync(path.join(source, 'a.bin')))).toBe(true);
    expect(fs.readFileSync(path.join(target, 'sub', 'b.txt'), 'utf8')).toBe('nested\n');
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
      const echoed = await eventually(() => echoThroughForward(local, 'ping-through'), 20_000, 'the forwarded port');
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

  it('forwards dynamically (ssh -D): each SOCKS destination is a tunnel decided on its own, port and host', async () => {
    const u = await t.userWith([
      { permission: 'device:read' },
      { permission: 'remote-access:connect', resources: [`*/tunnel(proto=tcp;port=${echoPort};dst=127.0.0.1)`] },
    ]);
    const user = await sshUser(u.token, 'socks');
    const local = await new Promise<number>((resolve) => {
      const s = net.createServer();
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(port));
      });
    });
    const child = spawn(
      'ssh',
      ['-F', user.config, '-o', 'BatchMode=yes', '-o', 'ExitOnForwardFailure=yes', '-N', '-D', `127.0.0.1:${local}`, `root@${host()}`],
      {
        env: user.env,
      },
    );
    // A SOCKS5 CONNECT (no authentication) to host:port; resolves with the reply code and, on success, the echo of `probe`.
    const socks = (dst: { ip?: string; name?: string }, port: number, probe: string) =>
      new Promise<{ reply: number; echoed: string } | undefined>((resolve) => {
        const socket = net.connect(local, '127.0.0.1');
        let buffer = Buffer.alloc(0);
        let stage: 'method' | 'reply' | 'data' = 'method';
        let reply = -1;
        const done = (value: { reply: number; echoed: string } | undefined) => {
          socket.destroy();
          resolve(value);
        };
        socket.on('connect', () => socket.write(Buffer.from([5, 1, 0])));
        socket.on('data', (d) => {
          buffer = Buffer.concat([buffer, d]);
          if (stage === 'method' && buffer.length >= 2) {
            buffer = buffer.subarray(2);
            stage = 'reply';
            const port16 = Buffer.from([port >> 8, port & 0xff]);
            const address = dst.ip
              ? Buffer.from([1, ...dst.ip.split('.').map(Number)])
              : Buffer.concat([Buffer.from([3, Buffer.byteLength(dst.name as string)]), Buffer.from(dst.name as string)]);
            socket.write(Buffer.concat([Buffer.from([5, 1, 0]), address, port16]));
          }
          if (stage === 'reply' && buffer.length >= 10) {
            reply = buffer[1];
            buffer = buffer.subarray(10);
            if (reply !== 0) return done({ reply, echoed: '' });
            stage = 'data';
            socket.write(probe);
          }
          if (stage === 'data' && buffer.toString().includes(probe)) done({ reply, echoed: buffer.toString() });
        });
        socket.on('error', () => done(reply >= 0 ? { reply, echoed: '' } : undefined));
        socket.on('close', () => done(reply >= 0 ? { reply, echoed: '' } : undefined));
      });
    try {
      const allowed = await eventually(() => socks({ ip: '127.0.0.1' }, echoPort, 'via-socks'), 20_000, 'the SOCKS port');
      expect(allowed).toEqual({ reply: 0, echoed: 'via-socks' });
      // Another port, and the same port under another host name: refused per destination, the connection stays up.
      const otherPort = await socks({ ip: '127.0.0.1' }, echoPort === 65535 ? 1 : echoPort + 1, 'x');
      expect(otherPort?.reply).not.toBe(0);
      const otherHost = await socks({ name: 'localhost' }, echoPort, 'y');
      expect(otherHost?.reply).not.toBe(0);
      expect(await socks({ ip: '127.0.0.1' }, echoPort, 'again')).toEqual({ reply: 0, echoed: 'again' });
    } finally {
      child.kill();
    }
    const items = await eventually(async () => {
      const found = await audit(`device_id=${device}&action=tunnel&user_id=${u.id}`);
      return found.filter((e) => e.source === 'ssh').length >= 4 ? found : undefined;
    });
    const mine = items.filter((e) => e.source === 'ssh');
    expect(mine.filter((e) => e.result === 'allowed' && e.event === 'remote.tunnel.start')).toHaveLength(2);
    expect(mine.filter((e) => e.result === 'denied').map((e) => `${e.options.dst}:${e.options.port}`)).toEqual(
      expect.arrayContaining([`127.0.0.1:${echoPort === 65535 ? 1 : echoPort + 1}`, `localhost:${echoPort}`]),
    );
  });

  it('refuses remote forwarding (ssh -R) with a message, audited', async () => {
    const r = await ssh(admin, ['-o', 'ExitOnForwardFailure=yes', '-R', '0:127.0.0.1:1', `root@${host()}`, 'true']);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/remote port forwarding failed/i);
    const items = await eventually(async () => (await audit('action=tunnel')).find((e) => /ssh -R/.test(e.reason ?? '')), 10_000, 'the refused -R');
    expect(items).toMatchObject({ result: 'denied', source: 'ssh' });
  });

  it('copies files with scp and sftp both ways through copy sessions, within the path grant', async () => {
    const dir = fs.mkdtempSync(path.join(work, 'device-side-'));
    const local = path.join(work, 'upload.bin');
    // Not a multiple of sftp's 32 KiB reads: the last ones cross the end of the file.
    const payload = crypto.randomBytes(300_000);
    const small = crypto.randomBytes(40_000);
    fs.writeFileSync(path.join(dir, 'small.bin'), small);
    fs.writeFileSync(local, payload);
    const scp = (u: SshUser, args: string[]) =>
      new Promise<Run>((resolve) => {
        const child = spawn('scp', ['-F', u.config, '-o', 'BatchMode=yes', ...args], { env: u.env });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d) => (stdout += d));
        child.stderr.on('data', (d) => (stderr += d));
        child.on('close', (code) => resolve({ code, stdout, stderr }));
      });
    const up = await scp(admin, [local, `root@${host()}:${dir}/`]);
    expect(up.stderr).toBe('');
    expect(up.code).toBe(0);
    expect(fs.readFileSync(path.join(dir, 'upload.bin')).equals(payload)).toBe(true);
    const back = path.join(work, 'download.bin');
    const down = await scp(admin, [`root@${host()}:${dir}/upload.bin`, back]);
    expect(down.code, down.stderr).toBe(0);
    expect(fs.readFileSync(back).equals(payload)).toBe(true);
    const smallBack = await scp(admin, [`root@${host()}:${dir}/small.bin`, `${back}.small`]);
    expect(smallBack.code, smallBack.stderr).toBe(0);
    expect(fs.readFileSync(`${back}.small`).equals(small)).toBe(true);
    // sftp in batch mode: a put and a get.
    const batch = path.join(work, 'batch.txt');
    fs.writeFileSync(batch, `put ${local} ${dir}/again.bin\nget ${dir}/again.bin ${back}.2\n`);
    const sftp = await new Promise<Run>((resolve) => {
      const child = spawn('sftp', ['-F', admin.config, '-o', 'BatchMode=yes', '-b', batch, `root@${host()}`], { env: admin.env });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
    expect(sftp.code, sftp.stderr).toBe(0);
    expect(fs.readFileSync(`${back}.2`).equals(payload)).toBe(true);
    const copies = await audit(`device_id=${device}&action=copy&event=remote.copy.start`);
    expect(copies.filter((e) => e.source === 'ssh').map((e) => e.options.direction)).toEqual(expect.arrayContaining(['upload', 'download']));
    // A user whose grant downloads from another directory only: the upload is refused.
    const u = await t.userWith([
      { permission: 'remote-access:connect', resources: [`*/copy(direction=download;path=/nowhere)`] },
      { permission: 'device:read' },
    ]);
    const limited = await sshUser(u.token, 'copier');
    const refused = await scp(limited, [local, `root@${host()}:${dir}/not-allowed.bin`]);
    expect(refused.code).not.toBe(0);
    expect(fs.existsSync(path.join(dir, 'not-allowed.bin'))).toBe(false);
    const denied = await audit(`device_id=${device}&action=copy&user_id=${u.id}`);
    expect(denied.some((e) => e.result === 'denied' && e.options.direction === 'upload')).toBe(true);
  });

  it('lists and downloads directories with sftp and scp -r through device listings, within the path grant, symlinks not followed', async () => {
    const granted = fs.mkdtempSync(path.join(work, 'granted-'));
    const outside = fs.mkdtempSync(path.join(work, 'outside-'));
    const secret = `secret-${crypto.randomUUID()}`;
    fs.writeFileSync(path.join(outside, 'secret.txt'), secret);
    const clean = path.join(granted, 'clean');
    fs.mkdirSync(path.join(clean, 'sub', 'deeper'), { recursive: true });
    fs.writeFileSync(path.join(clean, 'a.bin'), crypto.randomBytes(70_000));
    fs.writeFileSync(path.join(clean, 'empty.txt'), '');
    fs.writeFileSync(path.join(clean, 'sub', 'b.txt'), 'bee\n');
    fs.writeFileSync(path.join(clean, 'sub', 'deeper', 'c.bin'), crypto.randomBytes(5000));
    // A tree where a local user planted symlinks pointing out of the grant.
    const trap = path.join(granted, 'trap');
    fs.mkdirSync(trap);
    fs.writeFileSync(path.join(trap, 'ok.txt'), 'fine\n');
    fs.symlinkSync(path.join(outside, 'secret.txt'), path.join(trap, 'leak.txt'));
    fs.symlinkSync(outside, path.join(trap, 'leakdir'));
    const hashes = (root: string): Record<string, string> => {
      const out: Record<string, string> = {};
      const walk = (dir: string) => {
        for (const name of fs.readdirSync(dir)) {
          const full = path.join(dir, name);
          const st = fs.lstatSync(full);
          if (st.isDirectory()) walk(full);
          else out[path.relative(root, full)] = st.isFile() ? crypto.createHash('sha256').update(fs.readFileSync(full)).digest('hex') : 'not a file';
        }
      };
      walk(root);
      return out;
    };
    const run = (cmd: string, u: SshUser, args: string[]) =>
      new Promise<Run>((resolve) => {
        const child = spawn(cmd, ['-F', u.config, '-o', 'BatchMode=yes', ...args], { env: u.env });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d) => (stdout += d));
        child.stderr.on('data', (d) => (stderr += d));
        child.on('close', (code) => resolve({ code, stdout, stderr }));
      });
    const u = await t.userWith([
      { permission: 'remote-access:connect', resources: [`*/copy(direction=download;path=${granted})`] },
      { permission: 'device:read' },
    ]);
    const lister = await sshUser(u.token, 'lister');
    const batch = (lines: string[], as = lister) => {
      const file = path.join(work, `batch-${crypto.randomUUID()}.txt`);
      fs.writeFileSync(file, `${lines.join('\n')}\n`);
      return run('sftp', as, ['-b', file, `root@${host()}`]);
    };

    // ls of a granted directory (OPENDIR/READDIR), ls -l showing a symlink as one.
    const ls = await batch([`ls ${clean}`, `ls -l ${trap}`, `ls ${clean}/sub/deeper`]);
    expect(ls.code, ls.stderr).toBe(0);
    for (const name of ['a.bin', 'empty.txt', 'sub', 'c.bin']) expect(ls.stdout).toContain(name);
    expect(ls.stdout).toMatch(/^l\S+ .* leak\.txt$/m);
    expect(ls.stdout).toMatch(/^l\S+ .* leakdir$/m);
    expect(ls.stdout).not.toContain(secret);
    // ls outside the grant, and through a planted symlink to a directory outside it: refused.
    for (const dir of [outside, path.dirname(granted), `${trap}/leakdir`]) {
      const refused = await batch([`ls ${dir}`]);
      expect(refused.code, dir).not.toBe(0);
      expect(refused.stdout).not.toContain('secret.txt');
    }
    const listings = await audit(`device_id=${device}&action=copy&user_id=${u.id}`);
    // Refused before the device is asked (the grant's paths), or by the device (a symlink resolving out of them).
    expect(listings.some((e) => e.result === 'denied' && e.options.path === outside && e.source === 'ssh')).toBe(true);
    expect(listings.some((e) => e.result === 'denied' && /trap\/leakdir resolves outside/.test(e.reason))).toBe(true);
    const listed = listings.filter((e) => e.result === 'allowed' && e.options.op === 'list' && e.source === 'ssh');
    expect(listed.map((e) => e.options.path.replace(/\/$/, ''))).toEqual(expect.arrayContaining([clean, trap]));

    // get -r and scp -r of a tree: every file, byte for byte.
    const dest = fs.mkdtempSync(path.join(work, 'dest-'));
    const got = await batch([`get -r ${clean} ${dest}/by-sftp`]);
    expect(got.code, got.stderr).toBe(0);
    expect(hashes(path.join(dest, 'by-sftp'))).toEqual(hashes(clean));
    const scp = await run('scp', lister, ['-r', `root@${host()}:${clean}`, `${dest}/by-scp`]);
    expect(scp.code, scp.stderr).toBe(0);
    expect(hashes(path.join(dest, 'by-scp'))).toEqual(hashes(clean));
    expect(Object.keys(hashes(clean))).toHaveLength(4);

    // The planted symlinks are not followed out of the grant: sftp skips them, scp (which follows
    // links) is refused them by the device; the file inside is copied either way.
    const trapSftp = await batch([`get -r ${trap} ${dest}/trap-sftp`]);
    expect(trapSftp.code, trapSftp.stderr).toBe(0);
    const trapScp = await run('scp', lister, ['-r', `root@${host()}:${trap}`, `${dest}/trap-scp`]);
    expect(trapScp.code).not.toBe(0);
    for (const copied of ['trap-sftp', 'trap-scp']) {
      const found = hashes(path.join(dest, copied));
      expect(found['ok.txt'], copied).toBe(crypto.createHash('sha256').update('fine\n').digest('hex'));
      for (const [name, digest] of Object.entries(found)) {
        expect(name).not.toMatch(/secret/);
        if (digest !== 'not a file') expect(fs.readFileSync(path.join(dest, copied, name), 'utf8')).not.toContain(secret);
      }
    }

    // A listing handed out in pieces; one past the device's bound fails instead of passing for complete.
    const many = path.join(granted, 'many');
    const huge = path.join(granted, 'huge');
    fs.mkdirSync(many);
    fs.mkdirSync(huge);
    for (let i = 0; i < 250; i++) fs.writeFileSync(path.join(many, `f${i}`), '');
    for (let i = 0; i < MAX_LIST_ENTRIES + 1; i++) fs.writeFileSync(path.join(huge, `f${i}`), '');
    const manyLs = await batch([`ls -1 ${many}`]);
    expect(manyLs.code, manyLs.stderr).toBe(0);
    expect(manyLs.stdout.split('\n').filter((l) => /\/f\d+$|^f\d+$/.test(l.trim()))).toHaveLength(250);
    const hugeGet = await batch([`get -r ${huge} ${dest}/huge`]);
    expect(hugeGet.code).not.toBe(0);
    expect(hugeGet.stderr).toMatch(/Couldn't read directory/);
  });

  it('makes directories with sftp mkdir and scp -r to the device, within the upload grant, never through a planted symlink', async () => {
    const up = fs.mkdtempSync(path.join(work, 'upload-root-'));
    const outside = fs.mkdtempSync(path.join(work, 'outside-up-'));
    fs.symlinkSync(outside, path.join(up, 'escape'));
    const src = fs.mkdtempSync(path.join(work, 'src-'));
    fs.mkdirSync(path.join(src, 'sub', 'deeper'), { recursive: true });
    fs.writeFileSync(path.join(src, 'a.bin'), crypto.randomBytes(50_000));
    fs.writeFileSync(path.join(src, 'sub', 'b.txt'), 'bee\n');
    fs.writeFileSync(path.join(src, 'sub', 'deeper', 'c.bin'), crypto.randomBytes(3000));
    const digests = (root: string): Record<string, string> => {
      const out: Record<string, string> = {};
      const walk = (dir: string) => {
        for (const name of fs.readdirSync(dir)) {
          const full = path.join(dir, name);
          if (fs.lstatSync(full).isDirectory()) walk(full);
          else out[path.relative(root, full)] = crypto.createHash('sha256').update(fs.readFileSync(full)).digest('hex');
        }
      };
      walk(root);
      return out;
    };
    const run = (cmd: string, u: SshUser, args: string[]) =>
      new Promise<Run>((resolve) => {
        const child = spawn(cmd, ['-F', u.config, '-o', 'BatchMode=yes', ...args], { env: u.env });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d) => (stdout += d));
        child.stderr.on('data', (d) => (stderr += d));
        child.on('close', (code) => resolve({ code, stdout, stderr }));
      });
    const batch = (u: SshUser, lines: string[]) => {
      const file = path.join(work, `batch-${crypto.randomUUID()}.txt`);
      fs.writeFileSync(file, `${lines.join('\n')}\n`);
      return run('sftp', u, ['-b', file, `root@${host()}`]);
    };
    const writer = await t.userWith([{ permission: 'remote-access:connect', resources: [`*/copy(path=${up})`] }, { permission: 'device:read' }]);
    const reader = await t.userWith([
      { permission: 'remote-access:connect', resources: [`*/copy(direction=download;path=${up})`] },
      { permission: 'device:read' },
    ]);
    const w = await sshUser(writer.token, 'writer');
    const r = await sshUser(reader.token, 'reader');

    const scp = await run('scp', w, ['-r', src, `root@${host()}:${up}/tree`]);
    expect(scp.code, scp.stderr).toBe(0);
    expect(digests(path.join(up, 'tree'))).toEqual(digests(src));
    const made = await batch(w, [`mkdir ${up}/new`]);
    expect(made.code, made.stderr).toBe(0);
    expect(fs.statSync(path.join(up, 'new')).isDirectory()).toBe(true);
    // Outside the grant, through a planted symlink, or with a download-only grant: refused, nothing made.
    for (const [u, dir] of [
      [w, `${outside}/x`],
      [w, `${up}/escape/x`],
      [r, `${up}/read-only`],
    ] as const) {
      const refused = await batch(u, [`mkdir ${dir}`]);
      expect(refused.code, dir).not.toBe(0);
    }
    expect(fs.readdirSync(outside)).toEqual([]);
    expect(fs.existsSync(path.join(up, 'read-only'))).toBe(false);
    const entries = await audit(`device_id=${device}&action=copy&event=remote.copy.start`);
    const mkdirs = entries.filter((e) => e.options.op === 'mkdir' && e.source === 'ssh');
    expect(mkdirs.some((e) => e.result === 'allowed' && e.options.path === `${up}/new`)).toBe(true);
    const readerEntries = await audit(`device_id=${device}&action=copy&user_id=${reader.id}`);
    expect(readerEntries.some((e) => e.result === 'denied' && e.options.op === 'mkdir' && e.options.path === `${up}/read-only`)).toBe(true);
    const writerEntries = await audit(`device_id=${device}&action=copy&user_id=${writer.id}`);
    expect(writerEntries.some((e) => e.result === 'denied' && /escape\/x resolves outside/.test(e.reason))).toBe(true);
  });

  it('removes files and directories and renames with sftp rm, rmdir and rename, both paths within the grant, never through a symlink', async () => {
    const a = fs.mkdtempSync(path.join(work, 'grant-a-'));
    const b = fs.mkdtempSync(path.join(work, 'grant-b-'));
    fs.writeFileSync(path.join(a, 'old.txt'), 'old\n');
    fs.writeFileSync(path.join(a, 'gone.txt'), 'gone\n');
    fs.writeFileSync(path.join(a, 'stay.txt'), 'stay\n');
    fs.mkdirSync(path.join(a, 'empty'));
    fs.writeFileSync(path.join(b, 'precious'), 'precious\n');
    fs.symlinkSync(path.join(b, 'precious'), path.join(a, 'link'));
    fs.symlinkSync(b, path.join(a, 'escape'));
    const batch = (u: SshUser, lines: string[]) =>
      new Promise<Run>((resolve) => {
        const file = path.join(work, `batch-${crypto.randomUUID()}.txt`);
        fs.writeFileSync(file, `${lines.join('\n')}\n`);
        const child = spawn('sftp', ['-F', u.config, '-o', 'BatchMode=yes', '-b', file, `root@${host()}`], { env: u.env });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d) => (stdout += d));
        child.stderr.on('data', (d) => (stderr += d));
        child.on('close', (code) => resolve({ code, stdout, stderr }));
      });
    const writer = await t.userWith([
      { permission: 'remote-access:connect', resources: [`*/copy(direction=upload;path=${a})`] },
      { permission: 'device:read' },
    ]);
    const reader = await t.userWith([
      { permission: 'remote-access:connect', resources: [`*/copy(direction=download;path=${a})`] },
      { permission: 'device:read' },
    ]);
    const w = await sshUser(writer.token, 'changer');
    const r = await sshUser(reader.token, 'looker');

    const ok = await batch(w, [`rename ${a}/old.txt ${a}/new.txt`, `rm ${a}/gone.txt`, `rmdir ${a}/empty`, `rm ${a}/link`]);
    expect(ok.code, ok.stderr).toBe(0);
    expect(fs.readFileSync(path.join(a, 'new.txt'), 'utf8')).toBe('old\n');
    expect(fs.existsSync(path.join(a, 'old.txt'))).toBe(false);
    expect(fs.existsSync(path.join(a, 'gone.txt'))).toBe(false);
    expect(fs.existsSync(path.join(a, 'empty'))).toBe(false);
    // The symlink went, not what it pointed to.
    expect(fs.existsSync(path.join(a, 'link'))).toBe(false);
    expect(fs.readFileSync(path.join(b, 'precious'), 'utf8')).toBe('precious\n');
    // Out of the grant (either path of a rename), through a planted symlink, or with a download-only grant: refused.
    for (const [u, line] of [
      [w, `rename ${a}/stay.txt ${b}/stay.txt`],
      [w, `rename ${b}/precious ${a}/stolen`],
      [w, `rename ${a}/stay.txt ${a}/escape/stay.txt`],
      [w, `rm ${a}/escape/precious`],
      [w, `rm ${b}/precious`],
      [r, `rm ${a}/stay.txt`],
      [r, `rename ${a}/stay.txt ${a}/moved.txt`],
    ] as const) {
      const refused = await batch(u, [line]);
      expect(refused.code, line).not.toBe(0);
    }
    expect(fs.readFileSync(path.join(a, 'stay.txt'), 'utf8')).toBe('stay\n');
    expect(fs.readdirSync(b).sort()).toEqual(['precious']);
    expect(fs.existsSync(path.join(a, 'stolen'))).toBe(false);
    const entries = await audit(`device_id=${device}&action=copy&user_id=${writer.id}`);
    expect(entries.some((e) => e.result === 'allowed' && e.options.op === 'rename' && e.options.to === `${a}/new.txt`)).toBe(true);
    expect(entries.some((e) => e.result === 'allowed' && e.options.op === 'rmdir' && e.options.path === `${a}/empty`)).toBe(true);
    // The target outside: refused by the broker before the device is asked; through a planted symlink: by the device.
    expect(entries.some((e) => e.result === 'denied' && e.options.op === 'rename' && e.options.to === `${b}/stay.txt`)).toBe(true);
    expect(entries.some((e) => e.end_result === 'denied' && e.options.op === 'rename' && e.options.to === `${a}/escape/stay.txt`)).toBe(true);
    expect(entries.some((e) => e.result === 'denied' && e.options.op === 'rename' && e.options.path === `${b}/precious`)).toBe(true);
    expect(entries.some((e) => e.result === 'denied' && e.options.op === 'remove' && e.options.path === `${b}/precious`)).toBe(true);
    const readerEntries = await audit(`device_id=${device}&action=copy&user_id=${reader.id}`);
    expect(readerEntries.some((e) => e.result === 'denied' && e.options.op === 'remove')).toBe(true);
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

  it('ends a live connection, even one without channels, once its sign-in session ends (signed out)', async () => {
    const u = await t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const user = await sshUser(u.token, 'idle');
    const child = spawn('ssh', ['-F', user.config, '-o', 'BatchMode=yes', '-N', '127.0.0.1.fleet-gateway'], { env: user.env });
    let stderr = '';
    child.stderr.on('data', (d) => (stderr += d));
    const closed = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    // Signed in: the gateway's audit has nothing to refuse, and the connection is held open.
    await eventually(async () => (t.broker.services.ssh.gateway['perUser'].get(u.id) ? true : undefined), 20_000, 'the connection to sign in');
    expect((await t.api('POST', '/api/v2/logout', { token: u.token })).status).toBeLessThan(300);
    await closed;
    expect(stderr).not.toMatch(/Permission denied/);
  });

  it('lists an SSH console among live sessions: an operator watches it read-only and ends it', async () => {
    const u = await t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const user = await sshUser(u.token, 'watched');
    const child = spawn('ssh', ['-F', user.config, '-o', 'BatchMode=yes', `root@${host()}`, 'echo "watched-$((6*7))"; sleep 60'], { env: user.env });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const closed = new Promise<number | null>((resolve) => child.on('close', resolve));
    await eventually(() => out.includes('watched-42'), 20_000, 'the command to start');
    const listed = await eventually(async () => {
      const items = (await t.api('GET', '/api/v2/remote/sessions', { token: t.adminToken })).body.items as any[];
      return items.find((s) => s.user.id === u.id && s.kind === 'console');
    });
    expect(listed).toMatchObject({ source: 'ssh', can_watch: true, can_attach: false, device: { id: device } });
    const w = connectRemote(t.url, 'console', { watch: listed.id, cols: 80, rows: 24 }, t.adminToken);
    expect(await w.frame('ready')).toMatchObject({ type: 'ready', session: listed.id, mode: 'watch' });
    await w.output('watched-42');
    expect((await t.api('DELETE', `/api/v2/remote/sessions/${listed.id}`, { token: t.adminToken })).status).toBe(204);
    expect(await closed).toBe(255);
    expect(err).toMatch(/ended this session/);
    expect((await w.closed).code).toBe(4403);
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
    expect(err).toMatch(/access was withdrawn/i);
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

  it('refuses an expired certificate of its own CA, audited as such', async () => {
    const u = await t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const user = await sshUser(u.token, 'expired');
    const files = sshFiles('lab', user.env);
    const { parsePublicKeyLine } = await import('../../shared/ssh-keys.js');
    const key = parsePublicKeyLine(fs.readFileSync(files.pub, 'utf8'));
    const sessionId = (JSON.parse(Buffer.from(u.token.split('.')[1], 'base64url').toString()) as { sid: string }).sid;
    const hourAgo = Date.now() - 3600_000;
    const stale = t.broker.services.ssh.authority.issue(key!, {
      keyId: u.email,
      principals: [u.email],
      sessionId,
      validBefore: Math.floor(hourAgo / 1000) + 60,
      now: hourAgo,
    });
    fs.writeFileSync(files.cert, `${stale}\n`);
    const r = await ssh(user, [`root@${host()}`, 'true']);
    expect(r.code).toBe(255);
    const entry = await eventually(async () => (await audit('event=remote.ssh.denied')).find((e) => /has expired/.test(e.reason)), 10_000, 'the denied entry');
    expect(entry).toMatchObject({ result: 'denied', source: 'ssh' });
  });

  it('keeps a client that never reads at a bounded backlog: the device waits instead of the broker buffering', async () => {
    const u = await t.userWith([{ permission: 'remote-access:connect' }, { permission: 'device:read' }]);
    const user = await sshUser(u.token, 'stalled');
    // stdout is never read: the pipe, then ssh's window, then the gateway's fill and the device's `yes` waits.
    const child = spawn('ssh', ['-F', user.config, '-o', 'BatchMode=yes', `root@${host()}`, 'yes flood-flood-flood'], { env: user.env });
    try {
      const sessions = async () => ((await t.api('GET', '/api/v2/remote/sessions', { token: u.token })).body.items as any[]).find((s) => s.kind === 'console');
      let last = -1;
      const settled = await eventually(
        async () => {
          const s = await sessions();
          if (!s || s.bytes_out === 0) return undefined;
          const same = s.bytes_out === last;
          last = s.bytes_out;
          if (!same) await new Promise((r) => setTimeout(r, 1000));
          return same ? s : undefined;
        },
        30_000,
        'the output to stop growing',
      );
      expect(settled.bytes_out).toBeLessThan(32 * 1024 * 1024);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it("delivers a command's whole output, its last bytes included, when the client reads only after the command ended", async () => {
    // More than ssh's 2 MiB window: the command ends while the rest waits in the gateway and on the
    // device. In a pty its last bytes could be lost when it ended (CI once got no output at all from
    // `echo`); a command without a terminal now runs with pipes, whose end comes after their last byte.
    const bytes = 3 * 1024 * 1024;
    for (let round = 0; round < 2; round++) {
      const done = path.join(work, `ended-${crypto.randomUUID()}`);
      const child = spawn(
        'ssh',
        ['-F', admin.config, '-o', 'BatchMode=yes', `root@${host()}`, `head -c ${bytes} /dev/zero | tr '\\0' x; echo END; touch ${done}`],
        {
          env: admin.env,
        },
      );
      child.stdout.pause();
      let got = 0;
      let tail = '';
      const exited = new Promise<number | null>((resolve) => child.on('close', resolve));
      try {
        await eventually(() => fs.existsSync(done), 30_000, 'the command to end');
        // What the device sent settles before the client starts reading.
        let last = -1;
        await eventually(
          async () => {
            const s = ((await t.api('GET', '/api/v2/remote/sessions', { token: t.adminToken })).body.items as any[]).find((x) => x.kind === 'console');
            const out = s?.bytes_out ?? -2;
            const same = out === last;
            last = out;
            if (!same) await new Promise((r) => setTimeout(r, 500));
            return same || undefined;
          },
          30_000,
          'the output to settle',
        );
        child.stdout.on('data', (d: Buffer) => {
          got += d.length;
          tail = (tail + d.toString('latin1')).slice(-16);
        });
        child.stdout.resume();
        expect(await exited).toBe(0);
        expect(got).toBe(bytes + 'END\n'.length);
        expect(tail.endsWith('xEND\n')).toBe(true);
      } finally {
        child.kill('SIGKILL');
        fs.rmSync(done, { force: true });
      }
    }
  });

  it('runs a command without a terminal as sshd does: no tty, and the end of its input reaches it', async () => {
    const input = crypto.randomBytes(100_000);
    const run = await ssh(admin, [`root@${host()}`, 'tty; wc -c'], input);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^not a tty\n\s*100000\n$/);
  });

  it("starts a command without a terminal as sshd does: the login user's shell with -c, not a login shell, no script around it", async () => {
    // `$0` is the shell that runs the line: the agent's user's (its SHELL, else /bin/bash), not the /bin/sh of the script an older agent runs.
    const run = await ssh(admin, [
      `root@${host()}`,
      'echo "$0"; case "$0" in *bash) shopt -q login_shell && echo login || echo not-login;; *) echo not-login;; esac',
    ]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toBe(`${process.env.SHELL || '/bin/bash'}\nnot-login\n`);
  });

  it("turns Nagle's algorithm off on every connection: a small answer (a window adjust, a WRITE's status) never waits for the client's ACK", async () => {
    const port = t.broker.services.ssh.gateway.port as number;
    const setNoDelay = vi.spyOn(net.Socket.prototype, 'setNoDelay');
    const client = net.connect(port, '127.0.0.1');
    client.on('error', () => {});
    try {
      await new Promise<void>((resolve) => client.once('connect', () => resolve()));
      const gatewaySide = () => setNoDelay.mock.contexts.findIndex((socket) => (socket as net.Socket).remotePort === client.localPort);
      await expect.poll(gatewaySide).toBeGreaterThanOrEqual(0);
      expect(setNoDelay.mock.calls[gatewaySide()][0]).not.toBe(false);
    } finally {
      setNoDelay.mockRestore();
      client.destroy();
    }
  });

  it('bounds connections that have not signed in from one address', async () => {
    const { SSH_PREAUTH_PER_ADDRESS } = await import('../../broker/ssh/gateway.js');
    const port = t.broker.services.ssh.gateway.port as number;
    const idle: net.Socket[] = [];
    try {
      for (let i = 0; i < SSH_PREAUTH_PER_ADDRESS; i++) {
        const s = net.connect(port, '127.0.0.1');
        s.on('error', () => {});
        // The gateway reads a client's first bytes (a version line or a preamble) before it answers.
        s.write('SSH-2.0-idle\r\n');
        await new Promise<void>((resolve) => s.once('data', () => resolve()));
        idle.push(s);
      }
      // One more is closed at once, without a version line from the gateway.
      const extra = net.connect(port, '127.0.0.1');
      extra.on('error', () => {});
      const got = await new Promise<string>((resolve) => {
        let seen = '';
        extra.on('data', (d) => (seen += d));
        extra.on('close', () => resolve(seen));
      });
      expect(got).toBe('');
    } finally {
      for (const s of idle) s.destroy();
    }
    // Once they are gone, a client signs in again.
    await eventually(async () => (await ssh(admin, [`root@${host()}`, 'echo back'])).stdout === 'back\n', 20_000, 'a sign-in after the idle connections left');
  });

  // Last: it leaves this test process's address locked out for the rest of the window.
  it('limits failed sign-ins per address: past the limit even a good certificate is cut off', async () => {
    const { SSH_AUTH_FAILURES_PER_ADDRESS } = await import('../../broker/ssh/gateway.js');
    const stranger = await sshUser(t.adminToken, 'stranger');
    const { privateKey, publicKey } = crypto.generateKeyPairSync('ed25519');
    const files = sshFiles('lab', stranger.env);
    fs.writeFileSync(files.key, openSshPrivateKey(privateKey), { mode: 0o600 });
    fs.writeFileSync(files.pub, `${publicKeyLine(publicKey)}\n`);
    fs.rmSync(files.cert);
    for (let i = 0; i < SSH_AUTH_FAILURES_PER_ADDRESS; i++) {
      const r = await ssh(stranger, [`root@${host()}`, 'true']);
      expect(r.code).toBe(255);
    }
    const locked = await ssh(admin, [`root@${host()}`, 'echo still-in']);
    expect(locked.code).toBe(255);
    expect(locked.stdout).toBe('');
  });
});
