/**
 * The machine's processes as Linux's /proc shows them, for tests and benches that look at what a
 * command left running or what its processes spent.
 */
import fs from 'node:fs';

export interface ProcessEntry {
  pid: number;
  ppid: number;
  /** The fields of /proc/<pid>/stat after the command's name: [0] state, [1] ppid, [11] utime, … */
  stat: string[];
}

/** Every process /proc lists now (one that ends while it is read is left out). */
export function processTable(): ProcessEntry[] {
  return fs
    .readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .flatMap((d) => {
      try {
        const text = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
        const stat = text.slice(text.lastIndexOf(')') + 2).split(' ');
        return [{ pid: Number(d), ppid: Number(stat[1]), stat }];
      } catch {
        return [];
      }
    });
}

/** The pids of `root`'s live descendants in `procs` (`root` itself not among them). */
export function descendantPids(procs: ProcessEntry[], root: number): Set<number> {
  const ours = new Set([root]);
  for (let grew = true; grew;) {
    grew = false;
    for (const p of procs) {
      if (ours.has(p.pid) || !ours.has(p.ppid)) continue;
      ours.add(p.pid);
      grew = true;
    }
  }
  ours.delete(root);
  return ours;
}

/** A process's command line, its arguments joined by spaces ('' once it has gone). */
export function commandLine(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ');
  } catch {
    return '';
  }
}
