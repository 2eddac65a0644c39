/**
 * qbee's `proc_watch`: `processes` of `{name, policy: Present|Absent, command}`. A process counts
 * as running when a command line of the device's processes contains `name`. `Present` and not
 * running, or `Absent` and running: the `command` (a shell command, `$(key)` resolved) runs to
 * start or stop it. A start command must put the program in the background with its output
 * redirected (`prog >/dev/null 2>&1 &`), since the agent waits for the command to finish.
 */
import fs from 'node:fs/promises';
import type { Bundle } from '../bundle.js';
import { reportCommand, requireTools, shell } from '../helpers.js';
import { list, object, text } from '../parse.js';
import { resolveParameters } from '../template.js';

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
      const name = resolveParameters(watcher.name, ctx.parameters);
      const running = (await commandLines()).some((line) => line.includes(name));
      if (watcher.policy === 'Present' && running) continue;
      if (watcher.policy === 'Absent' && !running) continue;
      const doing =
        watcher.policy === 'Present'
          ? `Restarting process ${name} using the defined command as it was not running`
          : `Stopping process ${name} using the defined command as it was found running`;
      const result = await shell(ctx, watcher.command, COMMAND_TIMEOUT_MS);
      reportCommand(ctx, result, `${doing}: done`, `${doing}: the command failed`);
    }
  },
};

/** The command lines of the device's processes but the agent's own. */
async function commandLines(): Promise<string[]> {
  const lines: string[] = [];
  for (const entry of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const raw = await fs.readFile(`/proc/${entry}/cmdline`);
      const line = raw.toString('utf8').replace(/\0+$/, '').split('\0').join(' ');
      lines.push(line || (await fs.readFile(`/proc/${entry}/comm`, 'utf8')).trim());
    } catch {
      // the process ended meanwhile
    }
  }
  return lines;
}
