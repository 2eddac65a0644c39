/**
 * Whether process `pid` (or, given a negative pid, process group `-pid`) is gone: no such process.
 * A process that exists but is not ours to signal (EPERM) is not gone.
 */
export function processGone(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return false;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ESRCH';
  }
}
