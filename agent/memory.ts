/**
 * The packaged agent's memory at idle (docs/performance.md, "The agent idle: memory"): what it does
 * at run time for the settings its launcher gives node (agent/packaging/build.ts).
 */

/**
 * Gives back what a burst left. An idle agent allocates almost nothing, so V8 starts no collection
 * by itself: what the start and an inventory left (the dpkg status file read whole, the reports
 * serialised) would stay committed until the next inventory. The packaged agent runs with
 * `--expose-gc` and collects once after each inventory; run without it (from source, tests) this
 * does nothing.
 */
export function releaseMemory(): void {
  (globalThis as { gc?: () => void }).gc?.();
}

/**
 * Removes what the launcher put in the environment for this process only (MALLOC_ARENA_MAX and
 * MALLOC_TRIM_THRESHOLD_, read by glibc when the process started), each marked by the launcher: the
 * consoles, commands and tools the agent starts inherit its environment, and get the one it was
 * given. A setting made by whoever started the agent stays.
 */
export function forgetLauncherEnvironment(env: NodeJS.ProcessEnv = process.env): void {
  for (const name of ['MALLOC_ARENA_MAX', 'MALLOC_TRIM_THRESHOLD_']) {
    if (env[`FLEET_AGENT_${name}`] !== 'launcher') continue;
    delete env[name];
    delete env[`FLEET_AGENT_${name}`];
  }
}
