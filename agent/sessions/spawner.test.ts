import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { expectBoundedPipedFlood, sessionPair } from '../../test/support/session-pair.js';
import { setCommandSpawner } from './piped.js';
import { processGone } from './process.js';
import { Spawner, SpawnerBusy, SpawnerPool, type CommandSpawner, type SpawnedCommand, type SpawnRequest } from './spawner.js';

const ENV = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
const sh = (script: string, extra: Partial<SpawnRequest> = {}): SpawnRequest => ({ file: 'sh', args: ['-c', script], cwd: os.tmpdir(), env: ENV, ...extra });

/** A helper started and answering (available() starts it; it is used once it said it is ready). */
async function readySpawner(options: ConstructorParameters<typeof Spawner>[0] = {}): Promise<Spawner> {
  const s = new Spawner(options);
  for (let i = 0; i < 1500 && !s.available(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!s.available()) throw new Error('the command helper did not start');
  return s;
}

/** What a command wrote (stdout and stderr) and how it ended. */
async function finish(cmd: SpawnedCommand, input?: string): Promise<{ out: string; code: number | null; signal: NodeJS.Signals | null }> {
  let out = '';
  cmd.stdout.on('data', (d: Buffer) => (out += d.toString()));
  cmd.stderr.on('data', (d: Buffer) => (out += d.toString()));
  cmd.stdin.on('error', () => {});
  if (input !== undefined) cmd.stdin.end(input);
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((r) => cmd.on('close', (c, s) => r([c, s])));
  return { out, code, signal };
}

const spawners: Spawner[] = [];
afterEach(() => {
  for (const s of spawners.splice(0)) s.stop();
});

describe('the command helper (spawner)', () => {
  it('starts a command as the agent did: its argv, cwd and environment, its input, output and exit status', async () => {
    const s = await readySpawner();
    spawners.push(s);
    const cmd = await s.spawn(sh('pwd; echo "v=$V"; echo err >&2; wc -c; exit 3', { env: { ...ENV, V: 'x y' }, cwd: '/' }));
    const r = await finish(cmd, '12345\n');
    expect(r.code).toBe(3);
    expect(r.signal).toBeNull();
    expect(r.out).toContain('/\n');
    expect(r.out).toContain('v=x y\n');
    expect(r.out).toContain('err\n');
    expect(r.out).toMatch(/^\s*6$/m);
  });

  it('tells a signal as the signal, and the command runs in a session of its own started by the helper, not the agent', async () => {
    const s = await readySpawner();
    spawners.push(s);
    const cmd = await s.spawn(sh('echo "ppid=$PPID sid=$(ps -o sid= -p $$ | tr -d " ")"; kill -TERM $$'));
    const r = await finish(cmd);
    expect(r).toMatchObject({ code: null, signal: 'SIGTERM' });
    // The agent's loop did not fork it: its parent is the helper, and it leads its own session (as `detached`).
    expect(r.out).toContain(`ppid=${s.pid} `);
    expect(r.out).toContain(`sid=${cmd.pid}\n`);
  });

  it('refuses a command that cannot start, as spawn did (the helper keeps running)', async () => {
    const s = await readySpawner();
    spawners.push(s);
    const pid = s.pid;
    await expect(s.spawn({ file: '/nonexistent/command', args: [], cwd: '/', env: ENV })).rejects.toMatchObject({ code: 'ENOENT' });
    await expect(s.spawn(sh('true', { cwd: '/nonexistent-dir' }))).rejects.toMatchObject({ code: 'ENOENT' });
    expect(s.pid).toBe(pid);
    expect((await finish(await s.spawn(sh('exit 0')))).code).toBe(0);
  });

  it('passes the output untouched: a command that writes much and ends before anything is read loses nothing', async () => {
    const s = await readySpawner();
    spawners.push(s);
    const bulk = 3 * 1024 * 1024 + 7;
    const cmd = await s.spawn(sh(`head -c ${bulk} /dev/zero | tr '\\0' x; printf END; echo E >&2`));
    cmd.stdout.pause();
    await new Promise((r) => setTimeout(r, 200)); // the command waits on its full pipe
    let n = 0;
    let tail = '';
    cmd.stdout.on('data', (d: Buffer) => {
      n += d.length;
      tail = (tail + d.toString('latin1')).slice(-4);
    });
    cmd.stdout.resume();
    cmd.stderr.resume();
    await new Promise((r) => cmd.on('close', r));
    expect(n).toBe(bulk + 3);
    expect(tail).toBe('xEND');
  });

  it('starts again after the helper dies; the commands it had running end with their output, with no exit status', async () => {
    const s = await readySpawner();
    spawners.push(s);
    const running = await s.spawn(sh('echo started; sleep 2; echo after'));
    const first = s.pid as number;
    let out = '';
    running.stdout.on('data', (d: Buffer) => (out += d.toString()));
    await expect.poll(() => out).toContain('started');
    process.kill(first, 'SIGKILL');
    const [code, signal] = await new Promise<unknown[]>((r) => running.on('close', (...a) => r(a)));
    // The command was not the helper's to kill: it ran to its end (its pipes are the agent's), its status unknown.
    expect(out).toContain('after');
    expect([code, signal]).toEqual([null, null]);
    expect(s.available()).toBe(false); // starts the next helper
    await expect.poll(() => s.available(), { timeout: 15_000 }).toBe(true);
    expect(s.pid).not.toBe(first);
    expect(s.started).toBe(2);
    expect((await finish(await s.spawn(sh('exit 4')))).code).toBe(4);
  });

  it('times out a request the helper does not answer, kills that helper, and starts another', async () => {
    const s = await readySpawner({ requestTimeoutMs: 3000 }); // long enough for a loaded machine's answers to the next helper
    spawners.push(s);
    const stuck = s.pid as number;
    process.kill(stuck, 'SIGSTOP');
    try {
      await expect(s.spawn(sh('true'))).rejects.toMatchObject({ code: 'ETIMEDOUT' });
      await expect.poll(() => processGone(stuck), { timeout: 15_000 }).toBe(true);
    } finally {
      try {
        process.kill(stuck, 'SIGCONT');
      } catch {
        // killed
      }
    }
    await expect.poll(() => s.available(), { timeout: 15_000 }).toBe(true);
    expect(s.pid).not.toBe(stuck);
    expect((await finish(await s.spawn(sh('exit 0')))).code).toBe(0);
  });

  it('caps the requests waiting: a flood past the cap is refused at once, the rest start', async () => {
    const s = await readySpawner({ maxPending: 4 });
    spawners.push(s);
    const results = await Promise.allSettled(Array.from({ length: 40 }, () => s.spawn(sh('sleep 0.3'))));
    const busy = results.filter((r) => r.status === 'rejected' && r.reason instanceof SpawnerBusy).length;
    const ok = results.filter((r) => r.status === 'fulfilled');
    expect(ok.length).toBe(4);
    expect(busy).toBe(36);
    const ends = await Promise.all(ok.map((r) => finish((r as PromiseFulfilledResult<SpawnedCommand>).value)));
    expect(ends.map((e) => e.code)).toEqual([0, 0, 0, 0]);
    // The cap is of requests waiting, not of commands running: once answered, more start.
    expect((await finish(await s.spawn(sh('exit 0')))).code).toBe(0);
  });

  it('is given up where it cannot start (the agent then spawns as before)', async () => {
    const s = new Spawner({ execPath: '/nonexistent/node', maxDeaths: 2 });
    spawners.push(s);
    expect(s.available()).toBe(false);
    await expect.poll(() => s.pid === undefined && (s.available() || true) && s.givenUp, { timeout: 15_000 }).toBe(true);
    expect(s.available()).toBe(false);
    expect(s.started).toBeLessThanOrEqual(2);
    // A program that starts but never answers (not a Node.js that runs the helper) is ended and given up too.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-spawner-'));
    const program = path.join(dir, 'silent');
    fs.writeFileSync(program, '#!/bin/sh\nexec sleep 30\n', { mode: 0o755 });
    try {
      const silent = new Spawner({ execPath: program, startTimeoutMs: 200, maxDeaths: 2 });
      spawners.push(silent);
      expect(silent.available()).toBe(false);
      const first = silent.pid as number;
      expect(first).toBeGreaterThan(0);
      await expect.poll(() => (silent.available() || true) && silent.givenUp, { timeout: 15_000 }).toBe(true);
      expect(silent.started).toBe(2);
      expect(silent.pid).toBeUndefined();
      await expect.poll(() => processGone(first), { timeout: 15_000 }).toBe(true);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('several command helpers (SpawnerPool)', () => {
  const pools: SpawnerPool[] = [];
  afterEach(() => {
    for (const p of pools.splice(0)) p.stop();
  });
  const ready = async (pool: SpawnerPool, n: number) => {
    for (let i = 0; i < 1500 && pool.helpers.filter((h) => h.live && h.available()).length < n; i++) await new Promise((r) => setTimeout(r, 10));
  };

  /** A pool of two whose first helper is ready. */
  const startedPool = async () => {
    const pool = new SpawnerPool(2);
    pools.push(pool);
    pool.available();
    await ready(pool, 1);
    return pool;
  };

  it('keeps one helper while commands start one at a time', async () => {
    const pool = await startedPool();
    for (let i = 0; i < 5; i++) {
      expect(pool.available()).toBe(true);
      expect((await finish(await pool.spawn(sh(`exit ${i}`)))).code).toBe(i);
    }
    expect(pool.helpers.map((h) => h.started)).toEqual([1, 0]);
  });

  it('starts a second helper when commands start side by side, and shares the starts between both', async () => {
    const pool = await startedPool();
    // A command starting in the first helper: the next available() starts the second one.
    const first = pool.spawn(sh('echo one'));
    expect(pool.available()).toBe(true);
    await ready(pool, 2);
    expect(pool.helpers.map((h) => h.started)).toEqual([1, 1]);
    const runs = await Promise.all(
      Array.from({ length: 12 }, async (_, i) => {
        expect(pool.available()).toBe(true);
        return finish(await pool.spawn(sh(`echo "$PPID"; exit ${i % 5}`)));
      }),
    );
    expect((await finish(await first)).out).toBe('one\n');
    runs.forEach((r, i) => expect(r.code).toBe(i % 5));
    // Both helpers forked some of them: the commands' parents are the two helpers.
    const parents = new Set(runs.map((r) => Number(r.out.trim())));
    expect(parents).toEqual(new Set(pool.helpers.map((h) => h.pid)));
  });

  it('goes on with the other helper when one dies', async () => {
    const pool = await startedPool();
    const first = pool.spawn(sh('sleep 0.2; echo a'));
    pool.available();
    await ready(pool, 2);
    await finish(await first);
    pool.helpers[0].stop();
    expect(pool.available()).toBe(true);
    const r = await finish(await pool.spawn(sh('echo "$PPID"')));
    expect(Number(r.out.trim())).toBe(pool.helpers[1].pid);
  });
});

describe('commands without a terminal through the helper', () => {
  let helper: Spawner;
  let before: CommandSpawner | undefined;
  let cleanup: (() => void) | undefined;
  beforeAll(async () => {
    helper = await readySpawner();
    before = setCommandSpawner(helper);
  });
  afterAll(() => {
    setCommandSpawner(before);
    helper.stop();
  });
  afterEach(() => {
    cleanup?.();
    cleanup = undefined;
  });

  it('runs the command line from the helper with the exit status, signal number and output as before', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    for (const [line, exit] of [
      ['echo "parent=$PPID"; echo to-stderr >&2; exit 5', { code: 5, signal: null }],
      ['kill -INT $$', { code: null, signal: os.constants.signals.SIGINT }],
    ] as const) {
      const { channel, info } = await p.broker.open('console', { cols: 80, rows: 24, command: ['sh'], pipes: true, commandLine: line });
      expect(info.commandLine).toBe(true);
      let out = '';
      channel.on('data', (d: Buffer) => (out += d.toString()));
      const status = new Promise<any>((r) => channel.on('control', (m) => m.type === 'exit' && r(m)));
      const ended = new Promise((r) => channel.once('end', r));
      channel.end();
      expect(await status).toEqual({ type: 'exit', ...exit });
      await ended;
      if (exit.code === 5) expect(out).toBe(`parent=${helper.pid}\nto-stderr\n`);
    }
  });

  it('hangs up a command that never ends, and all of its process group, when the channel closes', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const { channel, info } = await p.broker.open('console', {
      cols: 80,
      rows: 24,
      command: ['sh'],
      pipes: true,
      commandLine: 'trap "" HUP; sleep 600 & wait',
    });
    const pid = info.pid as number;
    expect(processGone(-pid)).toBe(false);
    channel.destroy();
    // The hang-up is ignored; the kill follows (KILL_AFTER_MS).
    await expect.poll(() => processGone(-pid), { timeout: 20_000, interval: 200 }).toBe(true);
  });

  it('holds a flood whose output is never read at a bounded backlog, nothing kept in the helper', async () => {
    const window = 64 * 1024;
    const p = await sessionPair(window);
    cleanup = p.close;
    await expectBoundedPipedFlood(p, { cols: 80, rows: 24, command: ['sh'], pipes: true, commandLine: 'yes flood | cat' }, window);
  });

  it('many commands at once all end with their output and status', async () => {
    const p = await sessionPair();
    cleanup = p.close;
    const runs = await Promise.all(
      Array.from({ length: 30 }, async (_, i) => {
        const { channel } = await p.broker.open('console', { cols: 80, rows: 24, command: ['sh'], pipes: true, commandLine: `echo ${i}; exit ${i % 7}` });
        let out = '';
        channel.on('data', (d: Buffer) => (out += d.toString()));
        const status = new Promise<any>((r) => channel.on('control', (m) => m.type === 'exit' && r(m)));
        channel.end();
        const s = await status;
        await new Promise((r) => (channel.readableEnded ? r(undefined) : channel.once('end', r)));
        return { i, out, code: s.code };
      }),
    );
    for (const r of runs) {
      expect(r.out).toBe(`${r.i}\n`);
      expect(r.code).toBe(r.i % 7);
    }
  });
});
