/**
 * Where updated agents live on the device, and which one runs. Under `<state dir>/agent/`:
 *
 *   versions/<version>/fleet-agent.mjs   an agent the broker published, checked (size, sha256) before it got here
 *   versions/<version>/node_modules      link to the installed package's runtime dependencies (node-pty, ws)
 *   update.json                          the pointer: which version runs instead of the package, the one
 *                                        before it, the switch not yet confirmed, the last failure
 *
 * update.json is replaced atomically (write, fsync, rename): a power cut leaves the old pointer or the
 * new one. Disk is bounded: only the current and the previous version are kept.
 */
import fs from 'node:fs';
import path from 'node:path';
import coerce from 'semver/functions/coerce.js';
import semverCompare from 'semver/functions/compare.js';
import { isoTime } from '../iso-time.js';

export interface UpdateState {
  /** the version run instead of the installed package; absent: the package runs */
  current?: string;
  /** what ran before `current` (absent: the package) — what a rollback goes back to */
  previous?: string;
  /** the package's version when `current` was chosen: a newer package installed since wins */
  package_version?: string;
  /** a switch not confirmed yet: the new version has not been welcomed by the broker */
  pending?: { version: string; attempts: number; since: string };
  /** the last update that failed and was rolled back; `reported` once the broker was told */
  failed?: { version: string; reason: string; at: string; rolled_back_to: string; reported?: boolean };
  /** versions that failed here: not installed again (bounded) */
  refused?: string[];
  /** the last update policy the settings bundle gave (kept across restarts) */
  policy?: { enabled: boolean; window?: { from: number; to: number }; downgrade: boolean };
}

/** Starts of an unconfirmed version before it is given up. */
export const MAX_ATTEMPTS = 2;
const MAX_REFUSED = 10;
const VERSION = /^[0-9][A-Za-z0-9.+~-]{0,63}$/;

/**
 * Orders agent versions (semver, as the package's own version is): <0, 0, >0. "1.10.0" > "1.9.2";
 * "1.0.0-rc1" < "1.0.0". A shorter version is read with zeros added ("1.0" is "1.0.0").
 */
export function compareVersions(a: string, b: string): number {
  return semverCompare(asSemver(a), asSemver(b));
}

function asSemver(version: string): string {
  return coerce(version, { includePrerelease: true })?.version ?? '0.0.0';
}

export class UpdateStore {
  readonly dir: string;
  readonly versionsDir: string;
  private readonly file: string;

  constructor(stateDir: string) {
    this.dir = path.join(stateDir, 'agent');
    this.versionsDir = path.join(this.dir, 'versions');
    this.file = path.join(this.dir, 'update.json');
  }

  read(): UpdateState {
    try {
      const s = JSON.parse(fs.readFileSync(this.file, 'utf8')) as UpdateState;
      if (typeof s !== 'object' || s === null) return {};
      // A pointer naming something that is not a version (or not there) is ignored: the package runs.
      if (s.current !== undefined && (!VERSION.test(s.current) || !fs.existsSync(this.bundle(s.current)))) delete s.current;
      if (s.previous !== undefined && (!VERSION.test(s.previous) || !fs.existsSync(this.bundle(s.previous)))) delete s.previous;
      return s;
    } catch {
      return {};
    }
  }

  write(state: UpdateState): void {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const temp = `${this.file}.${process.pid}.tmp`;
    const fd = fs.openSync(temp, 'w', 0o600);
    try {
      fs.writeSync(fd, `${JSON.stringify(state, null, 2)}\n`);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(temp, this.file);
  }

  update(change: (s: UpdateState) => void): UpdateState {
    const s = this.read();
    change(s);
    this.write(s);
    return s;
  }

  bundle(version: string): string {
    return path.join(this.versionsDir, version, 'fleet-agent.mjs');
  }

  /**
   * Installs a checked bundle as `version` beside the others (a temporary directory renamed into
   * place), its dependencies linked from the package, and points `current` at it, unconfirmed.
   * `running` is the version running now (absent: the package); it becomes `previous`.
   */
  install(version: string, bundleFile: string, packageDir: string, packageVersion: string, running: string | undefined): void {
    if (!VERSION.test(version)) throw new Error(`not a version: ${version}`);
    fs.mkdirSync(this.versionsDir, { recursive: true, mode: 0o700 });
    const target = path.join(this.versionsDir, version);
    const temp = fs.mkdtempSync(path.join(this.versionsDir, '.new-'));
    try {
      fs.copyFileSync(bundleFile, path.join(temp, 'fleet-agent.mjs'));
      fs.chmodSync(path.join(temp, 'fleet-agent.mjs'), 0o500);
      fs.symlinkSync(path.join(packageDir, 'node_modules'), path.join(temp, 'node_modules'));
      fs.rmSync(target, { recursive: true, force: true });
      fs.renameSync(temp, target);
    } catch (err) {
      fs.rmSync(temp, { recursive: true, force: true });
      throw err;
    }
    this.update((s) => {
      s.current = version;
      if (running !== undefined && running !== version) s.previous = running;
      else delete s.previous;
      s.package_version = packageVersion;
      s.pending = { version, attempts: 0, since: isoTime() };
    });
    this.prune();
  }

  /** Removes every version directory but the current and the previous one (and unfinished installs). */
  prune(): void {
    const s = this.read();
    const keep = new Set([s.current, s.previous].filter((v): v is string => v !== undefined));
    let entries: string[];
    try {
      entries = fs.readdirSync(this.versionsDir);
    } catch {
      return;
    }
    for (const name of entries) if (!keep.has(name)) fs.rmSync(path.join(this.versionsDir, name), { recursive: true, force: true });
  }

  /** The unconfirmed `version` failed: back to the previous one (or the package), remembered and not tried again. */
  rollback(version: string, reason: string): UpdateState {
    const state = this.update((s) => {
      if (s.current !== version) return;
      const back = s.previous;
      if (back !== undefined) s.current = back;
      else delete s.current;
      delete s.previous;
      delete s.pending;
      s.failed = { version, reason: reason.slice(0, 500), at: isoTime(), rolled_back_to: back ?? 'package' };
      s.refused = [...(s.refused ?? []).filter((v) => v !== version), version].slice(-MAX_REFUSED);
    });
    this.prune();
    return state;
  }

  /** `version` was welcomed by the broker: the switch stands. */
  confirm(version: string): void {
    const s = this.read();
    if (s.pending?.version !== version) return;
    this.update((next) => {
      if (next.pending?.version === version) delete next.pending;
    });
    this.prune();
  }
}

/** What the launcher should run: a version of the store (path of its bundle), or the package itself. */
export interface LaunchChoice {
  version: string;
  file: string;
  /** unconfirmed: a watchdog must see it welcomed in time */
  pending: boolean;
}

/**
 * The launcher's decision at start (run by the installed package before anything else). A package
 * newer than (or re-installed since) the chosen version wins; an unconfirmed version started
 * MAX_ATTEMPTS times without being welcomed is rolled back first.
 */
export function chooseLaunch(store: UpdateStore, packageVersion: string): LaunchChoice | undefined {
  let s = store.read();
  if (s.current === undefined) return undefined;
  if (s.package_version !== packageVersion) {
    // The package was upgraded (or replaced) by other means: it is what the operator installed.
    store.update((next) => {
      delete next.current;
      delete next.previous;
      delete next.pending;
    });
    store.prune();
    return undefined;
  }
  if (s.pending?.version === s.current) {
    if (s.pending.attempts >= MAX_ATTEMPTS) {
      s = store.rollback(s.current, `it was started ${s.pending.attempts} times without connecting to the broker`);
      if (s.current === undefined) return undefined;
      return { version: s.current, file: store.bundle(s.current), pending: false };
    }
    const attempts = s.pending.attempts + 1;
    store.update((next) => {
      if (next.pending) next.pending.attempts = attempts;
    });
    return { version: s.current, file: store.bundle(s.current), pending: true };
  }
  return { version: s.current, file: store.bundle(s.current), pending: false };
}
