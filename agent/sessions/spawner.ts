import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { Readable, Writable } from 'node:stream';

/**
 * Commands without a terminal started by a helper process beside the agent, so the agent's event
 * loop does not wait for each fork to reach its exec.
 *
 * Node.js's `spawn` returns only once the forked child has exec'd (libuv reads the child's
 * close-on-exec pipe), and on a loaded device that wait (a fork of the agent's whole address space,
 * then the child's turn for a core) held the agent's loop for about 10 ms per `ssh host cmd`:
 * every open, every byte of every other session, waited behind it. The helper is a bare Node.js
 * process (`node -e`, nothing imported but child_process: a smaller address space to fork) that
 * spawns each command with pipes as the agent did, and passes the pipes' agent ends back over its
 * IPC channel (SCM_RIGHTS); the agent reads and writes them as before, and the helper tells it the
 * exit status. Nothing of a command's output passes through the helper.
 *
 * Robust where it runs: started with the first command and used only once it answers (until then,
 * and wherever it cannot start, the agent spawns itself, as before); a helper that dies is started
 * again on the next command (after repeated deaths it is given up); each request times out; the
 * requests waiting are capped; an idle helper exits. A helper that dies while its commands run
 * leaves them running (they are in sessions of their own); their sessions end with their output,
 * with no exit status.
 */

/** The helper's source: CommonJS for `node -e`, nothing imported but child_process (it must start and fork cheaply). */
export const SPAWNER_SOURCE = `'use strict';
const { spawn } = require('node:child_process');
const send = (m, h) => { try { process.send(m, h); } catch {} };
process.on('disconnect', () => process.exit(0));
process.on('message', (m) => {
  if (!m || m.t !== 'spawn') return;
  const id = m.id;
  let c;
  try {
    c = spawn(m.file, m.args, { cwd: m.cwd, env: m.env, stdio: 'pipe', detached: true });
  } catch (e) {
    send({ t: 'error', id, message: String(e && e.message), code: e && e.code });
    return;
  }
  // Nothing is read here: what the command writes stays in its pipe until the agent reads it.
  for (const s of [c.stdout, c.stderr]) if (s && s._handle && s._handle.readStop) s._handle.readStop();
  let started = false;
  c.on('error', (e) => {
    if (!started) send({ t: 'error', id, message: String(e && e.message), code: e && e.code });
  });
  c.once('spawn', () => {
    started = true;
    send({ t: 'pid', id, pid: c.pid });
    // One descriptor a message; each is closed here once the agent has taken it.
    send({ t: 'fd', id, n: 0 }, c.stdin && !c.stdin.destroyed ? c.stdin : undefined);
    send({ t: 'fd', id, n: 1 }, c.stdout);
    send({ t: 'fd', id, n: 2 }, c.stderr);
  });
  c.once('exit', (code, signal) => {
    if (started) send({ t: 'exit', id, code, signal });
  });
});
send({ t: 'ready' });
`;

/** The helper's name on its command line (after the source: its process.argv[1]), for ps and the benches. */
export const SPAWNER_NAME = 'fleet-agent-command-helper';

export interface SpawnRequest {
  file: string;
  args: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
}

/**
 * What the agent holds of a command the helper started: its pid, the agent ends of its pipes, and
 * 'close' (code, signal) once it has exited and its output is read to its end, as ChildProcess's.
 */
export class SpawnedCommand extends EventEmitter {
  stdin: Writable = closedWritable();
  stdout: Readable = endedReadable();
  stderr: Readable = endedReadable();
  private pending = 3; // the exit, stdout's close, stderr's close
  private status: [number | null, NodeJS.Signals | null] = [null, null];
  constructor(readonly pid: number) {
    super();
  }
  /** @internal */
  attach(n: number, socket: net.Socket | undefined): void {
    if (n === 0) {
      if (!socket) return;
      // The command's input: written to, never read from (as a ChildProcess's stdin).
      (socket as unknown as { _handle?: { readStop?(): void } })._handle?.readStop?.();
      this.stdin = socket;
      return;
    }
    // A reset (the command's end gone with bytes unread) ends the stream as its end would.
    socket?.on('error', () => socket.destroy());
    const stream = socket ?? endedReadable();
    if (n === 1) this.stdout = stream;
    else this.stderr = stream;
    stream.once('close', () => this.settle());
  }
  /** @internal The process has ended (code, signal), or its helper died (nothing known). */
  exited(code: number | null, signal: NodeJS.Signals | null): void {
    this.status = [code, signal];
    this.settle();
  }
  private settle(): void {
    if (--this.pending === 0) this.emit('close', ...this.status);
  }
}

function closedWritable(): Writable {
  const w = new Writable({ write: (_c, _e, cb) => cb() });
  w.destroy();
  return w;
}
function endedReadable(): Readable {
  const r = new Readable({ read() {} });
  r.push(null);
  r.resume();
  return r;
}

interface Pending {
  resolve(cmd: SpawnedCommand): void;
  reject(err: NodeJS.ErrnoException): void;
  timer: NodeJS.Timeout;
  cmd?: SpawnedCommand;
  fds: number;
}

export interface SpawnerOptions {
  /** the Node.js binary to run the helper with */
  execPath?: string;
  /** a request not answered (pid and pipes) in this long fails, and the helper is replaced */
  requestTimeoutMs?: number;
  /** a helper not ready in this long is ended (and counts as a death) */
  startTimeoutMs?: number;
  /** requests waiting for the helper's answer at most; past it a command is refused */
  maxPending?: number;
  /** the helper exits when idle this long (its memory back to the device) */
  idleMs?: number;
  /** after this many deaths in a row without an answer in between, the helper is not started again */
  maxDeaths?: number;
}

export class SpawnerBusy extends Error {}

/** One helper process and its requests; see the module's comment. */
export class Spawner {
  private child: ChildProcess | undefined;
  private ready = false;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  /** commands started whose exit has not been told yet, by request id */
  private readonly running = new Map<number, SpawnedCommand>();
  private deaths = 0;
  private idleTimer: NodeJS.Timeout | undefined;
  private readonly o: Required<SpawnerOptions>;
  /** How many helpers were started (tests, the bench). */
  started = 0;

  constructor(options: SpawnerOptions = {}) {
    this.o = { execPath: process.execPath, requestTimeoutMs: 10_000, startTimeoutMs: 30_000, maxPending: 64, idleMs: 5 * 60_000, maxDeaths: 3, ...options };
  }

  /** Whether a request would go to a running helper now; false starts one (when allowed) for the next. */
  available(): boolean {
    if (this.ready && this.child) return true;
    if (!this.child && this.deaths < this.o.maxDeaths) this.start();
    return false;
  }

  /** Whether the helper was given up (it died maxDeaths times in a row). */
  get givenUp(): boolean {
    return this.deaths >= this.o.maxDeaths;
  }

  /** Requests sent and not yet answered (pid and pipes). */
  get load(): number {
    return this.pending.size;
  }

  /** Whether a helper runs or is starting. */
  get live(): boolean {
    return this.child !== undefined;
  }

  /** The helper's pid, while one runs. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Starts the command through the helper (call only when `available()`). */
  spawn(req: SpawnRequest): Promise<SpawnedCommand> {
    const child = this.child;
    if (!child || !this.ready) return Promise.reject(new Error('The command helper is not running.'));
    if (this.pending.size >= this.o.maxPending) return Promise.reject(new SpawnerBusy('Too many commands are starting at once.'));
    const id = this.nextId++;
    this.touch();
    return new Promise<SpawnedCommand>((resolve, reject) => {
      const timer = setTimeout(() => this.timeOut(id), this.o.requestTimeoutMs);
      this.pending.set(id, { resolve, reject, timer, fds: 0 });
      child.channel?.ref();
      try {
        child.send({ t: 'spawn', id, file: req.file, args: req.args, cwd: req.cwd, env: req.env });
      } catch (err) {
        this.fail(id, err as Error);
      }
    });
  }

  /** Ends the helper (its commands keep running). */
  stop(): void {
    const child = this.child;
    if (!child) return;
    this.lost(child);
    child.kill('SIGKILL');
  }

  private start(): void {
    // Nothing of the agent's Node.js options (a loader, a profiler) or environment the helper does not need.
    const { NODE_OPTIONS: _o, ...env } = process.env;
    let child: ChildProcess;
    try {
      child = spawn(this.o.execPath, ['--max-old-space-size=16', '-e', SPAWNER_SOURCE, SPAWNER_NAME], {
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
        env,
        serialization: 'json',
      });
    } catch {
      this.deaths++;
      return;
    }
    this.started++;
    this.child = child;
    this.ready = false;
    child.on('error', () => this.lost(child));
    child.on('exit', () => this.lost(child));
    child.on('message', (m: Record<string, unknown>, handle?: unknown) => this.message(child, m, handle));
    child.unref();
    child.channel?.unref();
    // A helper that never says it is ready (a Node.js that cannot run it) is ended, and counts as a death.
    setTimeout(() => {
      if (this.child === child && !this.ready) child.kill('SIGKILL');
    }, this.o.startTimeoutMs).unref();
  }

  private message(child: ChildProcess, m: Record<string, unknown>, handle: unknown): void {
    if (child !== this.child) {
      if (handle instanceof net.Socket) handle.destroy();
      return;
    }
    if (m.t === 'ready') {
      this.ready = true;
      this.touch();
      return;
    }
    const id = m.id as number;
    const p = this.pending.get(id);
    const cmd = p?.cmd ?? this.running.get(id);
    if (m.t === 'error') {
      const err = Object.assign(new Error(String(m.message)), { code: m.code }) as NodeJS.ErrnoException;
      this.fail(id, err);
      return;
    }
    if (m.t === 'pid' && p) {
      p.cmd = new SpawnedCommand(m.pid as number);
      return;
    }
    if (m.t === 'fd') {
      const socket = handle instanceof net.Socket ? handle : undefined;
      if (!p?.cmd) {
        // An answer to a request that timed out: the command is not wanted.
        socket?.destroy();
        return;
      }
      p.cmd.attach(m.n as number, socket);
      if (++p.fds === 3) {
        clearTimeout(p.timer);
        this.pending.delete(id);
        this.running.set(id, p.cmd);
        this.deaths = 0;
        p.resolve(p.cmd);
        this.idleCheck();
      }
      return;
    }
    if (m.t === 'exit') {
      if (!cmd) return;
      this.running.delete(id);
      cmd.exited((m.code as number | null) ?? null, (m.signal as NodeJS.Signals | null) ?? null);
      this.idleCheck();
    }
  }

  private fail(id: number, err: Error): void {
    const p = this.pending.get(id);
    if (!p) return;
    clearTimeout(p.timer);
    this.pending.delete(id);
    p.reject(err);
    this.idleCheck();
  }

  /** A request the helper did not answer in time: refused, its command (if it comes) killed, the helper replaced. */
  private timeOut(id: number): void {
    const p = this.pending.get(id);
    if (!p) return;
    const pid = p.cmd?.pid;
    this.fail(id, Object.assign(new Error('The command helper did not answer in time.'), { code: 'ETIMEDOUT' }));
    if (pid) killGroup(pid);
    // A helper that does not answer is stuck: its other requests fail with it, and the next command starts a new one.
    this.stop();
  }

  /** The helper is gone: its requests fail, its running commands end with their output (no exit status). */
  private lost(child: ChildProcess): void {
    if (child !== this.child) return;
    this.child = undefined;
    this.ready = false;
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
    if (this.pending.size > 0 || !this.idleExit) this.deaths++;
    this.idleExit = false;
    for (const id of [...this.pending.keys()]) {
      const pid = this.pending.get(id)?.cmd?.pid;
      if (pid) killGroup(pid);
      this.fail(id, Object.assign(new Error('The command helper ended.'), { code: 'ECHILD' }));
    }
    const running = [...this.running.values()];
    this.running.clear();
    for (const cmd of running) cmd.exited(null, null);
  }

  private idleExit = false;

  private touch(): void {
    clearTimeout(this.idleTimer);
    this.idleTimer = undefined;
  }

  /** Nothing waiting and nothing running: the channel no longer holds the agent's loop, and an idle helper exits after idleMs. */
  private idleCheck(): void {
    if (this.pending.size > 0 || this.running.size > 0 || !this.child) return;
    this.child.channel?.unref();
    if (this.idleTimer) return;
    const child = this.child;
    this.idleTimer = setTimeout(() => {
      if (child !== this.child || this.pending.size > 0 || this.running.size > 0) return;
      this.idleExit = true;
      child.disconnect();
    }, this.o.idleMs).unref();
  }
}

/** What starts commands for openPiped: one helper, or several (SpawnerPool). */
export interface CommandSpawner {
  available(): boolean;
  spawn(req: SpawnRequest): Promise<SpawnedCommand>;
  stop(): void;
}

/**
 * Several helpers, for commands started side by side. A helper starts one command at a time, and
 * each start waits in the helper for the forked child to exec (the child's turn for a core, on a
 * busy device): with one helper that wait capped `ssh host true` at what one process can fork in
 * turn. The first helper starts with the first command; another starts only when a command comes
 * while every running helper has one starting, so a device that runs one command at a time keeps
 * one helper. Each request goes to the ready helper with the fewest starting; each helper keeps its
 * own restarts, time-outs, cap and idle exit.
 */
export class SpawnerPool implements CommandSpawner {
  readonly helpers: Spawner[];
  constructor(size = 2, options: SpawnerOptions = {}) {
    this.helpers = Array.from({ length: Math.max(1, size) }, () => new Spawner(options));
  }

  available(): boolean {
    const [first, ...more] = this.helpers;
    if (!first.available()) return more.some((h) => h.live && h.available());
    // All running helpers busy starting a command: one more is started for the next commands.
    if (this.helpers.every((h) => !h.live || h.load > 0)) {
      const idle = more.find((h) => !h.live && !h.givenUp);
      idle?.available();
    }
    return true;
  }

  spawn(req: SpawnRequest): Promise<SpawnedCommand> {
    let best: Spawner | undefined;
    for (const h of this.helpers) if (h.live && h.available() && (!best || h.load < best.load)) best = h;
    return best ? best.spawn(req) : Promise.reject(new Error('The command helper is not running.'));
  }

  stop(): void {
    for (const h of this.helpers) h.stop();
  }
}

function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // already gone
  }
}
