import { spawn } from 'node:child_process';
import os from 'node:os';
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { SessionContext } from './context.js';

/** How long a command that ignores the hang-up may outlive its closed session. */
const KILL_AFTER_MS = 5000;

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
  const child = spawn(run.file, run.args, { cwd: run.cwd, env, stdio: 'pipe', detached: true });
  try {
    await new Promise<void>((resolve, reject) => {
      child.once('spawn', resolve);
      child.once('error', reject);
    });
  } catch (err) {
    throw new AgentRefusal('io_error', `The command could not be started on the device: ${(err as Error).message}`);
  }
  const pid = child.pid as number;
  child.on('error', () => {}); // a signal to a process already gone
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
