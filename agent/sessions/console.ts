import type { IPty } from 'node-pty';
import { AgentRefusal } from '../../shared/codes.js';
import type { Channel } from '../../shared/mux.js';
import type { ConsoleParams } from '../../shared/protocol.js';
import type { SessionContext } from './context.js';
import { planCommandLine, planLogin } from './login-user.js';
import { openPiped } from './piped.js';
import { processGone } from './process.js';
import { PtyInput } from './pty-input.js';
import { readPtyIntoBuffers, writePtyRead } from './pty-reads.js';

const MAX_DIMENSION = 1000;

function dimension(value: unknown, fallback: number): number {
  return Number.isInteger(value) && (value as number) >= 1 && (value as number) <= MAX_DIMENSION ? (value as number) : fallback;
}

/** How often a console paused by its channel's credit looks whether its process has ended (below node-pty's 200 ms). */
const END_WATCH_MS = 50;

/** Shells that take `-c 'exec "$@"' $0 args…` as POSIX sh does. */
const POSIX_SHELL = /(?:^|\/)(?:sh|bash|dash|ash|zsh|ksh|mksh|yash|busybox)$/;

/** The argv to run instead of an interactive shell; refused when malformed rather than ignored. */
function commandOf(value: unknown): string[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || value.length === 0 || value.length > 257 || !value.every((a) => typeof a === 'string' && !a.includes('\0')) || value[0] === '') {
    throw new AgentRefusal('invalid_request', 'The command to run in the terminal is malformed.');
  }
  return value as string[];
}

/** A command line's most bytes (the broker's own bound on a command is 16 KiB). */
const MAX_COMMAND_LINE_BYTES = 256 * 1024;

/** The shell text of a command without a terminal (`commandLine`); refused when malformed rather than ignored. */
function commandLineOf(value: unknown): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || value.includes('\0') || Buffer.byteLength(value) > MAX_COMMAND_LINE_BYTES) {
    throw new AgentRefusal('invalid_request', 'The command line to run is malformed.');
  }
  return value;
}

/** node-pty (native code), loaded with the first console: an agent that never opens one does not load it. */
async function loadPty(): Promise<typeof import('node-pty')> {
  try {
    return await import('node-pty');
  } catch (err) {
    throw new AgentRefusal('unsupported', `Consoles are not available on this device: node-pty could not be loaded (${(err as Error).message}).`);
  }
}

/**
 * A login shell in a pty, sized by the client. Output respects the channel's credit: when the
 * channel pushes back the pty is paused, so a `yes` flood waits for the reader instead of filling
 * memory, and other channels of the same agent keep moving.
 */
export async function openConsole(channel: Channel, params: ConsoleParams, ctx: SessionContext): Promise<Record<string, unknown>> {
  // As the grant's login user when the request names one (refused here when the agent cannot switch).
  const plan = planLogin(typeof params.user === 'string' ? params.user : undefined);
  const { shell } = plan;
  const command = commandOf(params.command);
  // The login shell runs the command as argv: `<shell> -l -c 'exec "$@"' <shell> argv…`. A shell
  // without that syntax (fish, csh) is replaced by /bin/sh for this.
  const runner = POSIX_SHELL.test(shell) ? shell : '/bin/sh';
  const run = command ? [runner, '-l', '-c', 'exec "$@"', runner, ...command] : undefined;
  // plan: `<shell> -l` as the agent's user, or `setpriv … -- <shell> -l` as another.
  const file = run && plan.file === shell ? runner : plan.file;
  const args = !run ? plan.args : plan.file === shell ? run.slice(1) : [...plan.args.slice(0, -2), ...run];
  // Without a terminal (the broker's `ssh host cmd`): pipes, as sshd gives such a command, and
  // where the broker sends its line, started as sshd starts it (no login shell, no script around it).
  if (run && params.pipes === true) {
    const line = commandLineOf(params.commandLine);
    if (line !== undefined) return openPiped(channel, planCommandLine(plan, line), ctx, { shell, user: plan.user, commandLine: true });
    return openPiped(channel, { file, args, cwd: plan.cwd, env: plan.env }, ctx, { shell, user: plan.user });
  }
  const { spawn } = await loadPty();
  let pty: IPty;
  try {
    pty = spawn(file, args, {
      name: 'xterm-256color',
      cols: dimension(params.cols, 80),
      rows: dimension(params.rows, 24),
      cwd: plan.cwd,
      env: plan.env,
      encoding: null, // Buffers: a multi-byte character split across reads stays intact for the client
    });
  } catch (err) {
    throw new AgentRefusal('io_error', `The shell ${shell} could not be started on the device: ${(err as Error).message}`);
  }
  ctx.log('console opened', { ch: channel.id, pid: pty.pid, shell, user: plan.user, ...(command ? { command: command[0] } : {}) });

  let exited = false; // no more output wanted
  let gone = false; // the shell process has ended
  let paused = false;
  // node-pty reports the end of the process once the pty is read to its end, but gives up after
  // 200 ms and drops what is left unread (its guard for a pty that never closes). A console paused by
  // the channel's credit reads nothing, so the last output of a command that ended meanwhile (up to
  // the kernel's pty buffer) was lost. While paused, the process is looked for every
  // END_WATCH_MS; once it is gone the pty is read to its end, past the credit: what is left is
  // bounded by the kernel's buffer.
  let draining = false;
  let endWatch: NodeJS.Timeout | undefined;
  const stopEndWatch = () => {
    if (endWatch) clearInterval(endWatch);
    endWatch = undefined;
  };
  const watchEnd = () => {
    endWatch ??= setInterval(() => {
      if (!processGone(pty.pid)) return;
      stopEndWatch();
      draining = true;
      pty.resume();
    }, END_WATCH_MS).unref();
  };
  const resume = () => {
    paused = false;
    stopEndWatch();
    if (!exited) pty.resume();
  };

  // The pty's reads land in reused buffers (pty-reads.ts); a view written on holds its buffer until the write's callback, one queued behind others is a copy.
  const reads = readPtyIntoBuffers(pty);
  pty.onData((data) => {
    if (channel.destroyed || channel.writableEnded) return;
    if (!writePtyRead(channel, data as unknown as Buffer, reads) && !paused && !draining) {
      paused = true;
      pty.pause();
      channel.once('drain', resume);
      watchEnd();
    }
  });

  // The broker attaches its listeners once the open is answered and then sends a resize. A
  // control message sent before that could pass unheard, so the exit status waits for it.
  let brokerListening = false;
  let onBrokerListening: (() => void) | undefined;
  const brokerHeard = () => {
    brokerListening = true;
    onBrokerListening?.();
  };

  pty.onExit(({ exitCode, signal }) => {
    exited = true;
    gone = true;
    stopEndWatch();
    input?.close();
    ctx.log('console exited', { ch: channel.id, code: exitCode, signal });
    const report = () => {
      onBrokerListening = undefined;
      if (channel.destroyed) return;
      // The exit status goes ahead of the end of the stream; the broker forwards it after the last byte.
      channel.control({ type: 'exit', code: exitCode, signal: signal ? signal : null });
      channel.end();
    };
    if (brokerListening) return report();
    onBrokerListening = report;
    setTimeout(() => onBrokerListening?.(), 2000).unref();
  });

  // Keystrokes go to the pty's master side at once (pty-input.ts), not through node-pty's thread-pool
  // write; where node-pty has no descriptor to write to (not a Unix pty), through node-pty.
  const fd = (pty as unknown as { fd?: unknown }).fd;
  const input = typeof fd === 'number' && process.platform !== 'win32' ? new PtyInput(fd) : undefined;
  input?.on('error', () => {}); // the pty is closing: its exit follows
  input?.on('drain', () => channel.resume());
  channel.on('data', (data: Buffer) => {
    brokerHeard();
    if (exited) return;
    if (!input) return pty.write(data);
    // Input the pty does not take waits in the writer; past its bound the channel stops being read,
    // so the broker's credit for this console runs out instead of memory here.
    if (!input.write(data)) channel.pause();
  });
  channel.on('control', (msg) => {
    brokerHeard();
    if (msg.type === 'resize' && !exited) {
      try {
        pty.resize(dimension(msg.cols, pty.cols), dimension(msg.rows, pty.rows));
      } catch {
        // the pty may be closing; the next resize or the exit will tell
      }
    }
  });
  // The broker ended the session (user gone, access withdrawn): hang up the shell.
  channel.on('close', () => {
    channel.off('drain', resume);
    stopEndWatch();
    input?.close();
    if (!exited) {
      exited = true;
      try {
        pty.kill('SIGHUP');
      } catch {
        // already gone
      }
      // A program that ignores the hang-up does not outlive its session for long.
      setTimeout(() => {
        if (!gone) {
          try {
            pty.kill('SIGKILL');
          } catch {
            // already gone
          }
        }
      }, 5000).unref();
    }
  });
  return { pid: pty.pid, shell, user: plan.user, ...(command ? { command: true } : {}) };
}
