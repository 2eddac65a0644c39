/**
 * How far V8 lets the broker's heap grow between full collections.
 *
 * After each full collection V8 lets the old generation grow to a multiple of what it kept (up to 4×)
 * before collecting it again. Objects that outlive a scavenge or two are moved there: a session's,
 * for the seconds it lasts. A peer opening and closing consoles in a loop (`npm run bench -- hostile`)
 * so filled it with the garbage of finished sessions: the broker's RSS peaked 70–90 MiB over its
 * start, where what was live stayed near +19 MiB. With a growth factor of 1.5 the peak was +30 MiB,
 * for six full collections in 45 s instead of one (each about 10 ms of a 50 MiB heap):
 * docs/performance.md, "Hostile peers, sixth round".
 */
import v8 from 'node:v8';

/** The old generation may grow by this percentage of what the last full collection kept. */
export const HEAP_GROWING_PERCENT = 50;

/** The V8 flag to set, or undefined where whoever started node chose the growth themselves. */
export function heapGrowingFlag(execArgv: readonly string[], nodeOptions = ''): string | undefined {
  const given = [...execArgv, ...nodeOptions.split(/\s+/)].some((arg) => /^--heap[-_]growing[-_]percent\b/.test(arg));
  return given ? undefined : `--heap-growing-percent=${HEAP_GROWING_PERCENT}`;
}

/** Sets the broker's heap growth for this process (read by V8 at each full collection). */
export function applyHeapSettings(): void {
  const flag = heapGrowingFlag(process.execArgv, process.env.NODE_OPTIONS);
  if (flag) v8.setFlagsFromString(flag);
}
