/** proc_watch against a process the test starts itself (a script with a unique name), stopped by its pid. */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { applyBundle, emptyPath, testContext } from '../system-test-context.js';
import { procWatchBundle as bundle } from './proc-watch.js';

let t: ReturnType<typeof testContext>;
let pidFile = '';
afterEach(() => {
  // whatever the test left running (only the process it started, by its pid)
  try {
    process.kill(Number(fs.readFileSync(pidFile, 'utf8')), 'SIGKILL');
  } catch {
    // not running
  }
  t?.cleanup();
});

/** Running, not a zombie (an orphan waits for a reaper that a container may not have). */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

/** A script named uniquely that records its pid and stays up. */
function watchedScript(): { name: string; start: string; stop: string } {
  const name = `fleet-procwatch-${crypto.randomBytes(6).toString('hex')}`;
  const script = path.join(t.dir, `${name}.sh`);
  pidFile = path.join(t.dir, `${name}.pid`);
  fs.writeFileSync(script, `echo $$ > "${pidFile}"\nwhile :; do sleep 1; done\n`);
  return { name, start: `sh "${script}" >/dev/null 2>&1 &`, stop: `kill "$(cat "${pidFile}")"` };
}

describe('proc_watch', () => {
  it('starts a Present process that is not running, stops an Absent one that is; a second run changes nothing', async () => {
    t = testContext();
    const p = watchedScript();
    await applyBundle(bundle, { processes: [{ name: p.name, policy: 'Present', command: p.start }] }, t.ctx);
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual([`INFO Restarting process ${p.name} using the defined command as it was not running: done`]);
    await expect.poll(() => fs.existsSync(pidFile) && alive(Number(fs.readFileSync(pidFile, 'utf8')))).toBe(true);
    const pid = Number(fs.readFileSync(pidFile, 'utf8'));

    await applyBundle(bundle, { processes: [{ name: p.name, policy: 'Present', command: p.start }] }, t.ctx);
    expect(t.take()).toEqual([]);

    await applyBundle(bundle, { processes: [{ name: p.name, policy: 'Absent', command: p.stop }] }, t.ctx);
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual([`INFO Stopping process ${p.name} using the defined command as it was found running: done`]);
    await expect.poll(() => alive(pid)).toBe(false);
    await applyBundle(bundle, { processes: [{ name: p.name, policy: 'Absent', command: p.stop }] }, t.ctx);
    expect(t.take()).toEqual([]);
  });

  it('reports a failing command with its output', async () => {
    t = testContext();
    const p = watchedScript();
    await applyBundle(bundle, { processes: [{ name: p.name, policy: 'Present', command: 'echo "no such service" >&2; exit 4' }] }, t.ctx);
    expect(t.take()).toEqual([
      {
        sev: 'ERR',
        text: `Restarting process ${p.name} using the defined command as it was not running: the command failed: exit code 4`,
        log: 'no such service\n',
      },
    ]);
  });

  it('refuses bad data, and with no shell applies nothing', async () => {
    t = testContext();
    expect(() => bundle.parse({ processes: [{ name: 'x', policy: 'present', command: 'true' }] })).toThrow(
      'proc_watch.processes[0].policy must be Present or Absent',
    );
    expect(() => bundle.parse({ processes: [{ name: 'x', policy: 'Present' }] })).toThrow('proc_watch.processes[0].command is required');
    const p = watchedScript();
    t.setPath(emptyPath(t.dir));
    await applyBundle(bundle, { processes: [{ name: p.name, policy: 'Present', command: p.start }] }, t.ctx);
    expect(t.take()).toEqual([{ sev: 'ERR', text: 'sh is not installed on this device: process watch not applied.' }]);
    expect(fs.existsSync(pidFile)).toBe(false);
  });
});
