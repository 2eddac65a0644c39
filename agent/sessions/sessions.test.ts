import crypto from 'node:crypto';
import dgram from 'node:dgram';
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { AgentRefusal, refusalCodeOf } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { CopyParams } from '../../shared/protocol.js';
import { RAW_MARKER, RAW_SCRIPT } from '../../broker/ssh/relay.js';
import { expectBoundedPipedFlood, sessionPair } from '../../test/support/session-pair.js';
import { environmentFilePath } from './login-user.js';
import { resolveCopyTarget } from './paths.js';
import { processGone } from './process.js';

const sha = (b: Buffer | string) => crypto.createHash('sha256').update(b).digest('hex');

function collect(channel: Channel): { bytes: () => Buffer; ended: Promise<void> } {
  const parts: Buffer[] = [];
  channel.on('data', (d: Buffer) => parts.push(d));
  return { bytes: () => Buffer.concat(parts), ended: new Promise((r) => channel.once('end', () => r())) };
}

let cleanup: (() => void) | undefined;
afterEach(() => {
  cleanup?.();
  cleanup = undefined;
});

let dir: string;
beforeAll(() => {
  dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-sessions-')));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('console sessions', () => {
  it('runs a shell sized by the client and reports the exit status before the end', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const { channel } = await p.broker.open('console', { cols: 77, rows: 21 });
    const out = collect(channel);
    const exit = new Promise<any>((r) => channel.on('control', (m) => m.type === 'exit' && r(m)));
    channel.control({ type: 'resize', cols: 101, rows: 33 });
    channel.write('stty size; echo "sum-$((40+2))"; exit 7\n');
    expect(await exit).toEqual({ type: 'exit', code: 7, signal: null });
    await out.ended;
    const text = out.bytes().toString();
    expect(text).toContain('33 101');
    expect(text).toContain('sum-42');
  });

  it('keeps what is typed before the shell is ready: keys sent one by one as the console opens all reach it', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24 });
    const out = collect(channel);
    // As the web console releases the keys it held while connecting: each on its own, before any prompt.
    for (const key of 'echo "typed-$((6*7))"; exit\n') channel.write(key);
    await out.ended;
    expect(out.bytes().toString()).toContain('typed-42');
  });

  it('pauses a flooding program when the reader stops, without stalling another session', async () => {
    const window = 64 * 1024;
    const p = await sessionPair(window);
    cleanup = p.close;
    const { channel: flood } = await p.broker.open('console', { cols: 80, rows: 24 });
    flood.write('yes flood\n');
    flood.pause(); // a reader that does not read
    await new Promise((r) => setTimeout(r, 800));
    const agentSide = p.agentChannels[0];
    // What the agent holds is bounded: the credit window in flight plus the stream's own buffer.
    expect(flood.stats.bytesIn).toBeLessThanOrEqual(window);
    expect(agentSide.writableLength).toBeLessThanOrEqual(256 * 1024 + 64 * 1024);

    const echo = net.createServer((s) => s.pipe(s));
    await new Promise<void>((r) => echo.listen(0, '127.0.0.1', r));
    try {
      const { channel: tunnel } = await p.broker.open('tunnel', { proto: 'tcp', port: (echo.address() as AddressInfo).port, dst: '127.0.0.1' });
      const back = collect(tunnel);
      tunnel.end('still moving');
      await back.ended;
      expect(back.bytes().toString()).toBe('still moving');
    } finally {
      echo.close();
    }
    flood.destroy();
  });

  // node-pty's own write queue took every byte the broker sent, without bound; now the agent stops
  // reading the channel once its input queue is full (with pipes: the pipe's buffer and the stdin
  // stream's), so the broker's credit runs out: well under what was sent.
  it.each([
    ['a paste into a program in a terminal', false],
    ['input to a command with pipes', true],
  ])('bounds %s that does not read it: the client runs out of credit, the agent holds little', async (_what, pipes) => {
    const window = 64 * 1024;
    const p = await sessionPair(window);
    cleanup = p.close;
    const { channel } = await p.broker.open('console', { cols: 80, rows: 24, command: ['sleep', '30'], ...(pipes ? { pipes: true } : {}) });
    channel.resume(); // the echo, if any, is read
    const line = Buffer.from(`${'p'.repeat(63)}\n`);
    channel.write(Buffer.concat(Array.from({ length: (4 * 1024 * 1024) / line.length }, () => line)));
    await expect.poll(() => p.agentChannels[0].isPaused(), { timeout: 15_000 }).toBe(true);
    await new Promise((r) => setTimeout(r, 300));
    expect(channel.stats.bytesOut).toBeLessThan(1024 * 1024);
    channel.destroy();
  });

  it('runs a command as argv through the login shell, says so in its answer, and ends with it', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const { channel, info } = await p.broker.open('console', { cols: 80, rows: 24, command: ['printf', '[%s]', 'a b', '$HOME', '; id'] });
    expect(info.command).toBe(true);
    channel.control({ type: 'resize', cols: 80, rows: 24 }); // as the broker's relay does once it listens: the exit status waits for that
    const out = collect(channel);
    const exit = new Promise<any>((r) => channel.on('control', (m) => m.type === 'exit' && r(m)));
    expect(await exit).toEqual({ type: 'exit', code: 0, signal: null });
    await out.ended;
    expect(out.bytes().toString()).toContain('[a b][$HOME][; id]');
  });

  it('runs the command through /bin/sh when the login shell has no POSIX syntax (fish, csh)', async () => {
    const shell = process.env.SHELL;
    process.env.SHELL = path.join(dir, 'fish');
    fs.writeFileSync(process.env.SHELL, '#!/bin/sh\necho not-a-posix-shell\n', { mode: 0o755 });
    try {
      const p = await sessionPair();
      cleanup = p.close;
      const { channel } = await p.broker.open('console', { cols: 80, rows: 24, command: ['echo', 'via-sh'] });
      channel.control({ type: 'resize', cols: 80, rows: 24 }); // as the broker's relay does once it listens: the exit status waits for that
      const out = collect(channel);
      await out.ended;
      expect(out.bytes().toString()).toContain('via-sh');
      expect(out.bytes().toString()).not.toContain('not-a-posix-shell');
    } finally {
      if (shell === undefined) delete process.env.SHELL;
      else process.env.SHELL = shell;
    }
  });

  it("keeps a command's last output when it ends while the console is paused by the channel's credit", async () => {
    const window = 64 * 1024;
    const p = await sessionPair(window);
    cleanup = p.close;
    const go = path.join(dir, `go-${crypto.randomUUID()}`);
    // Just past what pauses the console (the credit in flight and the channel's 256 KiB buffer), so
    // the command gets all of it out; then, once the console is paused, its last word and its end.
    const bulk = window + 256 * 1024 + 2048;
    const script = `head -c ${bulk} /dev/zero | tr '\\0' x; while [ ! -e '${go}' ]; do sleep 0.02; done; printf END`;
    const { channel, info } = await p.broker.open('console', { cols: 80, rows: 24, command: ['sh', '-c', script] });
    channel.control({ type: 'resize', cols: 80, rows: 24 }); // as the broker's relay does once it listens: the exit status waits for that
    channel.pause(); // the broker reads nothing until the command is over
    const agentSide = p.agentChannels[0];
    await expect.poll(() => agentSide.writableNeedDrain, { timeout: 15_000 }).toBe(true);
    fs.writeFileSync(go, '');
    const pid = info.pid as number;
    // The command ended and the agent ended its side of the channel (after node-pty's exit).
    await expect.poll(() => processGone(pid) && agentSide.writableEnded, { timeout: 15_000 }).toBe(true);
    const out = collect(channel);
    channel.resume();
    await out.ended;
    const text = out.bytes().toString('latin1');
    expect(text.length).toBe(bulk + 'END'.length);
    expect(text.endsWith('xEND')).toBe(true);
  });

  it('runs a command with pipes when asked: no terminal, stdout and stderr, its input ended, its exit status', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const script = '[ -t 0 ] || echo "no-tty TERM=${TERM:-unset}"; echo to-stderr >&2; wc -c; exit 5';
    const { channel, info } = await p.broker.open('console', { cols: 80, rows: 24, command: ['sh', '-c', script], pipes: true });
    expect(info.command).toBe(true);
    const out = collect(channel);
    const exit = new Promise<any>((r) => channel.on('control', (m) => m.type === 'exit' && r(m)));
    channel.end('12345\n');
    expect(await exit).toEqual({ type: 'exit', code: 5, signal: null });
    await out.ended;
    const text = out.bytes().toString();
    expect(text).toContain('no-tty TERM=unset\n');
    expect(text).toContain('to-stderr\n');
    expect(text).toMatch(/^\s*6$/m);
  });

  it("keeps every command's last output with pipes, ended while the reader did not read (many times)", async () => {
    const window = 64 * 1024;
    const p = await sessionPair(window);
    cleanup = p.close;
    const bulk = window + 256 * 1024 + 2048;
    for (let i = 0; i < 5; i++) {
      const { channel, info } = await p.broker.open('console', {
        cols: 80,
        rows: 24,
        command: ['sh', '-c', `head -c ${bulk} /dev/zero | tr '\\0' x; printf END`],
        pipes: true,
      });
      channel.control({ type: 'resize', cols: 80, rows: 24 }); // as the broker's relay does: it listens
      channel.pause();
      // The broker reads nothing until the command is gone (its last word written, the agent paused or not).
      const pid = info.pid as number;
      await expect.poll(() => processGone(pid), { timeout: 15_000 }).toBe(true);
      const out = collect(channel);
      channel.resume();
      await out.ended;
      const text = out.bytes().toString('latin1');
      expect(text.length).toBe(bulk + 'END'.length);
      expect(text.endsWith('xEND')).toBe(true);
    }
  });

  it('holds a flood with pipes at a bounded backlog when the reader stops, and a closed channel ends the whole command', async () => {
    const window = 64 * 1024;
    const p = await sessionPair(window);
    cleanup = p.close;
    await expectBoundedPipedFlood(p, { cols: 80, rows: 24, command: ['sh', '-c', 'yes flood | cat'], pipes: true }, window);
  });

  it("runs the gateway's script for a command without a terminal: a raw pty where it gets one, no stty with pipes", async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const run = async (pipes: boolean) => {
      const command = ['/bin/sh', '-c', RAW_SCRIPT, 'sh', 'stty -a 2>&1 || echo no-terminal'];
      const { channel } = await p.broker.open('console', { cols: 80, rows: 24, command, ...(pipes ? { pipes: true } : {}) });
      channel.control({ type: 'resize', cols: 80, rows: 24 });
      const out = collect(channel);
      await out.ended;
      const text = out.bytes().toString();
      expect(text).toContain(RAW_MARKER);
      return text.slice(text.indexOf(RAW_MARKER) + RAW_MARKER.length);
    };
    // An agent without pipes (as before): the pty is made raw before the command runs.
    const inPty = await run(false);
    expect(inPty).toMatch(/(^|\s)-icanon(\s|$)/);
    expect(inPty).toMatch(/(^|\s)-echo(\s|$)/);
    const piped = await run(true);
    expect(piped).toContain('no-terminal');
  });

  it('runs a command line as sshd does: its shell with -c, no login profile, no script around it, PATH as a login shell had it', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    // A home whose profile would say so if a login shell read it (the agent's own user: HOME is this process's).
    const home = fs.mkdtempSync(path.join(dir, 'home-'));
    fs.writeFileSync(path.join(home, '.profile'), 'echo profile-read\n');
    fs.writeFileSync(path.join(home, '.bash_profile'), 'echo profile-read\n');
    const saved = { HOME: process.env.HOME, PATH: process.env.PATH, SHELL: process.env.SHELL };
    process.env.HOME = home;
    process.env.SHELL = '/bin/sh';
    process.env.PATH = `/agent-only-path:${saved.PATH}`;
    try {
      const line = 'echo "zero=$0 path=$PATH user=$USER shell=$SHELL term=${TERM:-unset}"; [ -t 0 ] || echo no-tty; wc -c; exit 3';
      // What the gateway sends: the script for an older agent, and the line for this one.
      const command = ['/bin/sh', '-c', RAW_SCRIPT, 'sh', line];
      const { channel, info } = await p.broker.open('console', { cols: 80, rows: 24, command, pipes: true, commandLine: line });
      expect(info).toMatchObject({ command: true, commandLine: true });
      channel.control({ type: 'resize', cols: 80, rows: 24 });
      const out = collect(channel);
      const exit = new Promise<any>((r) => channel.on('control', (m) => m.type === 'exit' && r(m)));
      channel.end('1234\n');
      expect(await exit).toEqual({ type: 'exit', code: 3, signal: null });
      await out.ended;
      const text = out.bytes().toString();
      expect(text).not.toContain('profile-read');
      expect(text).not.toContain(RAW_MARKER);
      const user = os.userInfo();
      const path = environmentFilePath(fs.existsSync('/etc/environment') ? fs.readFileSync('/etc/environment', 'utf8') : '');
      const expected =
        path ?? (user.uid === 0 ? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' : '/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games');
      expect(text).toContain(`zero=/bin/sh path=${expected} user=${user.username} shell=/bin/sh term=unset\n`);
      expect(text).toContain('no-tty\n');
      expect(text).toMatch(/^\s*5$/m);
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
  });

  it('refuses a malformed command line instead of running anything', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const command = ['/bin/sh', '-c', 'echo ran'];
    for (const commandLine of ['a\0b', 5, ['ls'], 'x'.repeat(256 * 1024 + 1)]) {
      await expect(p.broker.open('console', { cols: 80, rows: 24, command, pipes: true, commandLine } as never), typeof commandLine).rejects.toThrow(
        /malformed/,
      );
    }
  });

  it('refuses a malformed command instead of opening a shell', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    for (const command of [[], [''], ['a\0b'], 'ls', [5]]) {
      await expect(p.broker.open('console', { cols: 80, rows: 24, command } as never), JSON.stringify(command)).rejects.toThrow(/malformed/);
    }
  });

  it('hangs up the shell when the broker closes the channel', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const { channel, info } = await p.broker.open('console', { cols: 80, rows: 24 });
    const pid = info.pid as number;
    expect(pid).toBeGreaterThan(0);
    channel.destroy();
    // node-pty hangs up at once; a loaded machine may take a while to reap the shell.
    await expect.poll(() => processGone(pid), { timeout: 15_000 }).toBe(true);
  });
});

describe('tunnel sessions', () => {
  it('half-closes: the device side answers after the client finished sending', async () => {
    const server = net.createServer({ allowHalfOpen: true }, (s) => {
      const parts: Buffer[] = [];
      s.on('data', (d) => parts.push(d));
      s.on('end', () => s.end(sha(Buffer.concat(parts))));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const p = await sessionPair();
    cleanup = () => (p.close(), server.close());
    const { channel } = await p.broker.open('tunnel', { proto: 'tcp', port: (server.address() as AddressInfo).port, dst: '127.0.0.1' });
    const out = collect(channel);
    const payload = crypto.randomBytes(2 * 1024 * 1024);
    channel.end(payload);
    await out.ended;
    expect(out.bytes().toString()).toBe(sha(payload));
  });

  it('refuses a destination that does not answer', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const closed = await new Promise<number>((resolve) => {
      const srv = net.createServer().listen(0, '127.0.0.1', () => {
        const port = (srv.address() as AddressInfo).port;
        srv.close(() => resolve(port));
      });
    });
    await expect(p.broker.open('tunnel', { proto: 'tcp', port: closed, dst: '127.0.0.1' })).rejects.toThrow(
      /Cannot connect to 127\.0\.0\.1:\d+ from the device: ECONNREFUSED/,
    );
  });

  it('carries UDP datagrams one chunk each way', async () => {
    const server = dgram.createSocket('udp4');
    server.on('message', (msg, rinfo) => server.send(Buffer.concat([Buffer.from('re:'), msg]), rinfo.port, rinfo.address));
    await new Promise<void>((r) => server.bind(0, '127.0.0.1', r));
    const p = await sessionPair();
    cleanup = () => (p.close(), server.close());
    const { channel } = await p.broker.open('tunnel', { proto: 'udp', port: server.address().port, dst: '127.0.0.1' });
    const replies: string[] = [];
    channel.on('data', (d: Buffer) => replies.push(d.toString()));
    channel.write(Buffer.from('one'));
    channel.write(Buffer.from('two'));
    await expect.poll(() => replies.length).toBe(2);
    expect(replies.sort()).toEqual(['re:one', 're:two']);
  });
});

describe('copy sessions', () => {
  it('uploads to a temp file, checks size and sha256, then renames over the target', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const target = path.join(dir, 'up.bin');
    fs.writeFileSync(target, 'old');
    fs.chmodSync(target, 0o640);
    const content = crypto.randomBytes(300_000);
    const { channel } = await p.broker.open('copy', { direction: 'upload', path: target, size: content.length, sha256: sha(content) });
    const result = new Promise<any>((r) => channel.on('control', (m) => m.type === 'result' && r(m)));
    channel.resume();
    channel.end(content);
    expect(await result).toEqual({ type: 'result', ok: true, bytes: content.length, sha256: sha(content) });
    expect(sha(fs.readFileSync(target))).toBe(sha(content));
    expect(fs.statSync(target).mode & 0o777).toBe(0o640);
    expect(fs.readdirSync(dir).filter((f) => f.endsWith('.fleet-upload'))).toEqual([]);
  });

  it('discards an upload torn down before its end', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const target = path.join(dir, 'torn.bin');
    const { channel } = await p.broker.open('copy', { direction: 'upload', path: target });
    channel.write(crypto.randomBytes(100_000));
    await new Promise((r) => setTimeout(r, 100));
    channel.destroy();
    await expect.poll(() => fs.readdirSync(dir).filter((f) => f.startsWith('.torn.bin')).length).toBe(0);
    expect(fs.existsSync(target)).toBe(false);
  });

  it('downloads after the broker half-closes, with the size and mode in the open answer', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const source = path.join(dir, 'down.bin');
    const content = crypto.randomBytes(200_001);
    fs.writeFileSync(source, content, { mode: 0o600 });
    const { channel, info } = await p.broker.open('copy', { direction: 'download', path: source });
    expect(info).toEqual({ size: content.length, mode: 0o600 });
    const result = new Promise<any>((r) => channel.on('control', (m) => m.type === 'result' && r(m)));
    const out = collect(channel);
    channel.end();
    await out.ended;
    expect(await result).toEqual({ type: 'result', ok: true, bytes: content.length, sha256: sha(content) });
    expect(sha(out.bytes())).toBe(sha(content));
  });

  it('hashes nothing when the opener never reads the checksum (checksum: false, as sftp opens): the same bytes, an empty sha256', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const source = path.join(dir, 'nohash.bin');
    const content = crypto.randomBytes(300_001);
    fs.writeFileSync(source, content);
    const down = await p.broker.open('copy', { direction: 'download', path: source, checksum: false });
    const downResult = new Promise<any>((r) => down.channel.on('control', (m) => m.type === 'result' && r(m)));
    const out = collect(down.channel);
    down.channel.end();
    await out.ended;
    expect(await downResult).toEqual({ type: 'result', ok: true, bytes: content.length, sha256: '' });
    expect(out.bytes().equals(content)).toBe(true);

    const target = path.join(dir, 'nohash-up.bin');
    const up = await p.broker.open('copy', { direction: 'upload', path: target, checksum: false });
    const upResult = new Promise<any>((r) => up.channel.on('control', (m) => m.type === 'result' && r(m)));
    up.channel.resume();
    up.channel.end(content);
    expect(await upResult).toEqual({ type: 'result', ok: true, bytes: content.length, sha256: '' });
    expect(fs.readFileSync(target).equals(content)).toBe(true);
  });

  it('still checks an announced sha256 of an upload opened with checksum: false', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const target = path.join(dir, 'checked.bin');
    const content = crypto.randomBytes(10_000);
    const { channel } = await p.broker.open('copy', { direction: 'upload', path: target, checksum: false, sha256: sha(Buffer.from('other')) });
    const result = new Promise<any>((r) => channel.on('control', (m) => m.type === 'result' && r(m)));
    channel.resume();
    channel.end(content);
    expect(await result).toMatchObject({ type: 'result', ok: false, error: expect.stringMatching(/Checksum mismatch/) });
    expect(fs.existsSync(target)).toBe(false);
  });

  it('refuses a missing file, a directory and a path outside the allowed roots', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    await expect(p.broker.open('copy', { direction: 'download', path: path.join(dir, 'missing') })).rejects.toThrow(/No file/);
    await expect(p.broker.open('copy', { direction: 'download', path: dir })).rejects.toThrow(/not a regular file/);
    await expect(p.broker.open('copy', { direction: 'upload', path: dir })).rejects.toThrow(/is a directory/);
    await expect(p.broker.open('copy', { direction: 'upload', path: '/etc/x', allowed: [dir] })).rejects.toThrow(/^Not allowed on this device/);
  });

  it('a refusal reaches the broker with its code (shared/codes.ts), not only its sentence', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const refused = (params: CopyParams) => p.broker.open('copy', params).catch((err: unknown) => err);
    const outside = await refused({ direction: 'upload', path: '/etc/x', allowed: [dir] });
    expect(outside).toBeInstanceOf(AgentRefusal);
    expect(refusalCodeOf(outside)).toBe('path_outside_grant');
    expect(refusalCodeOf(await refused({ direction: 'download', path: path.join(dir, 'missing') }))).toBe('not_found');
    expect(refusalCodeOf(await refused({ direction: 'download', path: dir }))).toBe('not_a_file');
    expect(refusalCodeOf(await refused({ direction: 'upload', path: 'relative' }))).toBe('invalid_request');
  });
});

describe('copy path re-check on the device', () => {
  it('resolves symlinks in the directory and the file, and checks the real path against real roots', async () => {
    const root = path.join(dir, 'root');
    const outside = path.join(dir, 'outside');
    fs.mkdirSync(root, { recursive: true });
    fs.mkdirSync(outside, { recursive: true });
    fs.writeFileSync(path.join(outside, 'secret'), 's');
    fs.writeFileSync(path.join(root, 'plain'), 'p');
    fs.symlinkSync(outside, path.join(root, 'door'));
    fs.symlinkSync(path.join(outside, 'secret'), path.join(root, 'alias'));
    fs.symlinkSync(root, path.join(dir, 'root-link'));

    expect((await resolveCopyTarget(`${root}/plain`, 'download', [root])).target).toBe(path.join(root, 'plain'));
    // An allowed root given through a symlink is resolved too.
    expect((await resolveCopyTarget(`${root}/plain`, 'download', [path.join(dir, 'root-link')])).target).toBe(path.join(root, 'plain'));
    expect((await resolveCopyTarget(`${root}//./plain`, 'upload', [root])).target).toBe(path.join(root, 'plain'));
    await expect(resolveCopyTarget(`${root}/door/secret`, 'download', [root])).rejects.toThrow(/^Not allowed on this device/);
    await expect(resolveCopyTarget(`${root}/door/new`, 'upload', [root])).rejects.toThrow(/^Not allowed on this device/);
    await expect(resolveCopyTarget(`${root}/alias`, 'download', [root])).rejects.toThrow(/^Not allowed on this device/);
    await expect(resolveCopyTarget(`${root}/../outside/secret`, 'download', [root])).rejects.toThrow(/^Not allowed on this device/);
    await expect(resolveCopyTarget(`${root}-x/plain`, 'upload', [root])).rejects.toThrow(/does not exist/);
    await expect(resolveCopyTarget('relative/path', 'upload')).rejects.toThrow(/not an absolute path/);
    await expect(resolveCopyTarget(`${root}/plain`, 'download', [])).rejects.toThrow(/^Not allowed on this device/);
    // Codes tell a symlink leading out of the grant from a path outside it as written.
    await expect(resolveCopyTarget(`${root}/door/secret`, 'download', [root])).rejects.toMatchObject({ code: 'symlink_escape' });
    await expect(resolveCopyTarget(`${root}/alias`, 'download', [root])).rejects.toMatchObject({ code: 'symlink_escape' });
    await expect(resolveCopyTarget(`${root}/../outside/secret`, 'download', [root])).rejects.toMatchObject({ code: 'path_outside_grant' });
    await expect(resolveCopyTarget(`${root}-x/plain`, 'upload', [root])).rejects.toMatchObject({ code: 'not_found' });
    // Without `allowed` (an unrestricted grant) symlinks are followed like any program would.
    expect((await resolveCopyTarget(`${root}/alias`, 'download')).target).toBe(path.join(outside, 'secret'));
  });
});
