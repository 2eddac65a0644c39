import { spawn } from 'node:child_process';
import os from 'node:os';
import type { Readable, Writable } from 'node:stream';
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { SessionContext } from './context.js';
import { SpawnerBusy, SpawnerPool, type CommandSpawner, type SpawnRequest } from './spawner.js';

/** How long a command that ignores the hang-up may outlive its closed session. */
const KILL_AFTER_MS = 5000;

/** A started command as openPiped uses it: a ChildProcess, or what the command helper passed back (spawner.ts). */
interface StartedCommand {
  pid: number;
  stdin: Writable;
  stdout: Readable;
  stderr: Readable;
  on(event: 'close', listener: (code: number | null, signal: NodeJS.Signals | null) => void): unknown;
}

/**
 * The agent's command helpers (spawner.ts; two at most, the second only while commands start side by
 * side): on unless FLEET_AGENT_SPAWNER=0. Replaceable for tests (`setCommandSpawner`).
 */
let spawner: CommandSpawner | undefined = process.env.FLEET_AGENT_SPAWNER === '0' ? undefined : new SpawnerPool(2);

/** Tests: the helper openPiped uses (undefined: the agent spawns each command itself). Returns the one before. */
export function setCommandSpawner(next: CommandSpawner | undefined): CommandSpawner | undefined {
  const before = spawner;
  spawner = next;
  return before;
}

/**
 * Starts a command with pipes: through the helper where it runs, else (not started yet, given up,
 * too many requests waiting) here, as before. A failure of the helper is not retried here: the
 * command may have started.
 */
async function startCommand(req: SpawnRequest): Promise<StartedCommand> {
  if (spawner?.available()) {
    try {
      return await spawner.spawn(req);
    } catch (err) {
      if (!(err instanceof SpawnerBusy)) throw err;
    }
  }
  const child = spawn(req.file, req.args, { cwd: req.cwd, env: req.env, stdio: 'pipe', detached: true });
  await new Promise<void>((resolve, reject) => {
    child.once('spawn', resolve);
    child.once('error', reject);
  });
  child.on('error', () => {}); // a signal to a process already gone
  return child as StartedCommand;
}

/** What to run and how: the console's login-shell argv, prepared by openConsole. */
export interface PipedCommand {
  file: string;
  args: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
}

/**
 * A console command with pipes instead of a pty (ConsoleParams.pipes: `ssh host cmd` without a
 * terminal, as sshd runs one). Its output (stdout and stderr, in the order read) goes to the
 * channel and its end is told only once both are read to their end: a pty's output can be cut
 * off when its last process leaves it, a pipe's cannot. Output respects the channel's credit (the
 * pipes stop being read), input the command's (the channel stops being read). The command runs in
 * its own session, so a closed channel hangs up all of it.
 */
export async function openPiped(channel: Channel, run: PipedCommand, ctx: SessionContext, info: Record<string, unknown>): Promise<Record<string, unknown>> {
  // No terminal: no TERM either (as sshd without a pty).
  const { TERM: _term, ...env } = run.env;
  let child: StartedCommand;
  try {
    child = await startCommand({ file: run.file, args: run.args, cwd: run.cwd, env });
  } catch (err) {
    throw new AgentRefusal('io_error', `The command could not be started on the device: ${(err as Error).message}`);
  }
  const pid = child.pid;
  ctx.log('console opened', { ch: channel.id, pid, ...info, pipes: true });

  const outputs = [child.stdout, child.stderr];
  let paused = false;
  const resume = () => {
    paused = false;
    for (const o of outputs) o.resume();
  };
  for (const o of outputs) {
    o.on('data', (data: Buffer) => {
      if (channel.destroyed || channel.writableEnded) return;
      if (!channel.write(data) && !paused) {
        paused = true;
        for (const p of outputs) p.pause();
        channel.once('drain', resume);
      }
    });
  }

  // As a pty console's: the exit status waits until the broker is known to listen (its first message).
  let brokerListening = false;
  let onBrokerListening: (() => void) | undefined;
  const brokerHeard = () => {
    brokerListening = true;
    onBrokerListening?.();
  };

  let gone = false;
  // 'close': the process has ended and both pipes are read to their end.
  child.on('close', (code, signal) => {
    gone = true;
    ctx.log('console exited', { ch: channel.id, code, signal });
    const report = () => {
      onBrokerListening = undefined;
      if (channel.destroyed) return;
      const number = signal ? (os.constants.signals[signal] ?? null) : null;
      channel.control({ type: 'exit', code: signal ? null : code, signal: number });
      channel.end();
    };
    if (brokerListening) return report();
    onBrokerListening = report;
    setTimeout(() => onBrokerListening?.(), 2000).unref();
  });

  child.stdin.on('error', () => {}); // the command stopped reading its input
  child.stdin.on('drain', () => channel.resume());
  channel.on('data', (data: Buffer) => {
    brokerHeard();
    if (child.stdin.destroyed || child.stdin.writableEnded) return;
    if (!child.stdin.write(data)) channel.pause();
  });
  channel.on('end', () => {
    if (!child.stdin.destroyed) child.stdin.end();
  });
  channel.on('control', () => brokerHeard()); // a resize means nothing without a terminal
  channel.on('close', () => {
    channel.off('drain', resume);
    if (gone) return;
    const hangUp = (sig: NodeJS.Signals) => {
      try {
        process.kill(-pid, sig);
      } catch {
        // already gone
      }
    };
    hangUp('SIGHUP');
    child.stdin.destroy();
    resume(); // the pipes are read to their end (into nothing), so the end is seen
    setTimeout(() => {
      if (!gone) hangUp('SIGKILL');
    }, KILL_AFTER_MS).unref();
  });
  return { pid, ...info, command: true };
}
