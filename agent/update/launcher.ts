/**
 * The launcher: the first thing the installed package's agent does. When an update was installed
 * (agent/update/store.ts), it runs that version in this same process (a dynamic import of its
 * bundle, which starts itself) instead of its own code; the package stays what systemd starts.
 *
 * Rollback, for a version not confirmed yet (not welcomed by the broker since the switch):
 *   - its bundle fails to load: back to the previous version at once, in this process;
 *   - it crashes at start: the service manager restarts the agent; after MAX_ATTEMPTS starts the
 *     launcher goes back to the previous version;
 *   - it runs but is not welcomed within the deadline: a watchdog in this process rolls back and
 *     exits for the service manager to start the previous version.
 * The previous version reports the failure once connected (agent_internal).
 */
import { pathToFileURL } from 'node:url';
import { chooseLaunch, UpdateStore } from './store.js';

/** Left on globalThis by the launcher for the version it runs: which package launched it. */
export interface LaunchedBy {
  packageDir: string;
  packageVersion: string;
  version: string;
}

const KEY = '__fleetAgentLaunchedBy';

export function launchedBy(): LaunchedBy | undefined {
  return (globalThis as Record<string, unknown>)[KEY] as LaunchedBy | undefined;
}

export interface LaunchOptions {
  stateDir: string;
  packageDir: string;
  packageVersion: string;
  deadlineMs: number;
  log: (level: 'info' | 'warn' | 'error', msg: string, detail?: Record<string, unknown>) => void;
  /** exit for the service manager (the watchdog's way out) */
  exit: (code: number) => void;
}

/** Runs the installed update, if any; true when it took over (this package's code must not run the agent). */
export async function launchInstalled(o: LaunchOptions): Promise<boolean> {
  const store = new UpdateStore(o.stateDir);
  // Each failure rolls back one step: at most current → previous → package.
  for (let step = 0; step < 3; step++) {
    const choice = chooseLaunch(store, o.packageVersion);
    if (!choice) return false;
    (globalThis as Record<string, unknown>)[KEY] = { packageDir: o.packageDir, packageVersion: o.packageVersion, version: choice.version } satisfies LaunchedBy;
    if (choice.pending) {
      o.log('info', 'starting the updated agent: it must connect to the broker in time', { version: choice.version, deadlineMs: o.deadlineMs });
      const watchdog = setTimeout(() => {
        if (store.read().pending?.version !== choice.version) return;
        store.rollback(choice.version, `it was not welcomed by the broker within ${Math.round(o.deadlineMs / 1000)} s`);
        o.log('error', 'the updated agent did not connect in time: rolled back, restarting', { version: choice.version });
        o.exit(1);
      }, o.deadlineMs);
      watchdog.unref();
    } else o.log('info', 'starting the updated agent', { version: choice.version });
    try {
      await import(pathToFileURL(choice.file).href);
      return true;
    } catch (err) {
      delete (globalThis as Record<string, unknown>)[KEY];
      store.rollback(choice.version, `it failed to start: ${(err as Error).message}`);
      o.log('error', 'the updated agent failed to start: rolled back', { version: choice.version, err: (err as Error).message });
    }
  }
  return false;
}
