/**
 * qbee's `proc_watch`: `processes` of `{name, policy: Present|Absent, command}`. A process counts
 * as running when one of the device's processes is named `name` exactly, as `pidof` and `pgrep -x`
 * name processes: its process name (`/proc/<pid>/comm`, which the kernel cuts to 15 characters),
 * the file name or path of its executable (`/proc/<pid>/exe`), or its `argv[0]` (file name or path),
 * and for a script started through its `#!` line, the script. Arguments do not count: a process
 * whose command line merely contains `name` (an editor on `name.conf`, `grep name`) is not `name`.
 * (qbee looks for `name` anywhere in the command lines; see docs/qbee.md.)
 * `Present` and not running, or `Absent` and running: the `command` (a shell command whose `$(key)`s
 * reach the shell as data) runs to start or stop it. A start command must put the program in the
 * background with its output redirected (`prog >/dev/null 2>&1 &`), since the agent waits for the
 * command to finish. A watcher whose name or command names an unknown `$(key)` is reported and
 * skipped.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Bundle } from '../bundle.js';
import { reportCommand, requireTools, shell } from '../helpers.js';
import { list, object, text } from '../parse.js';
import { ParameterError, resolveParameters } from '../template.js';

export interface ProcWatchData {
  processes: { name: string; policy: 'Present' | 'Absent'; command: string }[];
}

/** Time a start or stop command may take. */
const COMMAND_TIMEOUT_MS = 2 * 60_000;

export const procWatchBundle: Bundle<ProcWatchData> = {
  name: 'proc_watch',
  parse(data) {
    const o = object(data, 'proc_watch');
    return {
      processes: list(o, 'processes', 'proc_watch', 200).map((entry, i) => {
        const what = `proc_watch.processes[${i}]`;
        const e = object(entry, what);
        const policy = text(e, 'policy', what, { required: true });
        if (policy !== 'Present' && policy !== 'Absent') throw new Error(`${what}.policy must be Present or Absent`);
        return { name: text(e, 'name', what, { required: true, max: 256 }), policy, command: text(e, 'command', what, { required: true, max: 16384 }) };
      }),
    };
  },
  async apply(data, ctx) {
    if (!(await requireTools(ctx, ['sh'], 'process watch'))) return;
    for (const watcher of data.processes) {
      if (ctx.signal.aborted) return;
      let name = watcher.name;
      try {
        name = resolveParameters(watcher.name, ctx.parameters);
        const running = (await processes()).some((p) => isNamed(p, name));
        if (watcher.policy === 'Present' && running) continue;
        if (watcher.policy === 'Absent' && !running) continue;
        const doing =
          watcher.policy === 'Present'
            ? `Restarting process ${name} using the defined command as it was not running`
            : `Stopping process ${name} using the defined command as it was found running`;
        const result = await shell(ctx, watcher.command, COMMAND_TIMEOUT_MS);
        reportCommand(ctx, result, `${doing}: done`, `${doing}: the command failed`);
      } catch (err) {
        if (!(err instanceof ParameterError)) throw err;
        ctx.report('ERR', `Process watch of ${name} not applied: ${err.message}.`);
      }
    }
  },
};

/** What names a process: see the bundle's description. */
export interface ProcessNames {
  /** `/proc/<pid>/comm`: at most 15 characters */
  comm: string;
  /** `/proc/<pid>/exe`, "" when unreadable (a kernel thread, a zombie) */
  exe: string;
  /** the command line's words */
  argv: string[];
}

/** The kernel keeps 15 characters of a process name (TASK_COMM_LEN less its NUL). */
const COMM_LENGTH = 15;

/** True when the process is `name`: its process name, executable or argv[0] (file name or path), or the script it runs. */
export function isNamed(p: ProcessNames, name: string): boolean {
  if (!name) return false;
  const argv0 = p.argv[0] ?? '';
  for (const candidate of [p.exe, argv0]) {
    if (candidate && (candidate === name || path.posix.basename(candidate) === name)) return true;
  }
  if (p.comm === name) return true;
  // A script started through its `#!` line: the kernel names the process after the script (its
  // first 15 characters), and the interpreter gets the script's path as argv[1].
  const script = p.argv[1] ?? '';
  if (script && p.comm === path.posix.basename(script).slice(0, COMM_LENGTH)) return script === name || path.posix.basename(script) === name;
  return false;
}

/** The device's processes but the agent's own and those that have ended (zombies). */
async function processes(): Promise<ProcessNames[]> {
  const out: ProcessNames[] = [];
  for (const entry of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      // a zombie has ended: it only waits for its parent to collect it
      const stat = await fs.readFile(`/proc/${entry}/stat`, 'utf8');
      if (/^[ZX]/.test(stat.slice(stat.lastIndexOf(')') + 2))) continue;
      const comm = (await fs.readFile(`/proc/${entry}/comm`, 'utf8')).replace(/\n$/, '');
      const raw = await fs.readFile(`/proc/${entry}/cmdline`).catch(() => Buffer.alloc(0));
      const argv = raw.length > 0 ? raw.toString('utf8').replace(/\0+$/, '').split('\0') : [];
      const exe = await fs.readlink(`/proc/${entry}/exe`).catch(() => '');
      out.push({ comm, exe: exe.replace(/ \(deleted\)$/, ''), argv });
    } catch {
      // the process ended meanwhile
    }
  }
  return out;
}
