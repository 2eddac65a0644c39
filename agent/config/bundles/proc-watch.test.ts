/** proc_watch against processes the test starts itself (scripts with unique names), stopped by their pids. */
import { spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { applyBundle, emptyPath, testContext } from '../test-support/system-test-context.js';
import { isNamed, procWatchBundle as bundle } from './proc-watch.js';

let t: ReturnType<typeof testContext>;
let pidFile = '';
const decoys: ChildProcess[] = [];
afterEach(() => {
  // whatever the test left running (only the processes it started, by their pids)
  try {
    process.kill(Number(fs.readFileSync(pidFile, 'utf8')), 'SIGKILL');
  } catch {
    // not running
  }
  for (const decoy of decoys.splice(0)) decoy.kill('SIGKILL');
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

/**
 * A script named uniquely (short enough for the kernel's process name, or longer) that records its
 * pid and stays up; started through its `#!` line, so that the process is called by its name.
 */
function watchedScript(long = false): { name: string; script: string; start: string; stop: string } {
  const name = long ? `fleet-procwatch-${crypto.randomBytes(6).toString('hex')}` : `pw-${crypto.randomBytes(4).toString('hex')}`;
  const script = path.join(t.dir, name);
  pidFile = path.join(t.dir, `${name}.pid`);
  fs.writeFileSync(script, `#!/bin/sh\necho $$ > "${pidFile}"\nwhile :; do sleep 1; done\n`, { mode: 0o755 });
  return { name, script, start: `"${script}" >/dev/null 2>&1 &`, stop: `kill "$(cat "${pidFile}")"` };
}

/** A process whose command line holds `name` as an argument only (what any local user can start). */
function decoy(name: string): ChildProcess {
  const child = spawn('sh', ['-c', 'while :; do sleep 1; done', name, `/etc/${name}.conf`], { stdio: 'ignore' });
  decoys.push(child);
  return child;
}

function commandLineOf(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return '';
  }
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

describe('proc_watch: a process is its name, not its arguments', () => {
  it('does not take a process whose command line only contains the name for the watched one', async () => {
    t = testContext();
    const p = watchedScript();
    const fake = decoy(p.name);
    await expect.poll(() => commandLineOf(fake.pid!).includes(p.name)).toBe(true);
    // Absent: the decoy is not the process, so nothing is stopped
    await applyBundle(bundle, { processes: [{ name: p.name, policy: 'Absent', command: `touch "${t.dir}/stopped"` }] }, t.ctx);
    expect(t.take()).toEqual([]);
    expect(fs.existsSync(path.join(t.dir, 'stopped'))).toBe(false);
    // Present: the decoy does not hide that the process is missing
    await applyBundle(bundle, { processes: [{ name: p.name, policy: 'Present', command: p.start }] }, t.ctx);
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual([`INFO Restarting process ${p.name} using the defined command as it was not running: done`]);
    await expect.poll(() => fs.existsSync(pidFile) && alive(Number(fs.readFileSync(pidFile, 'utf8')))).toBe(true);
    await applyBundle(bundle, { processes: [{ name: p.name, policy: 'Present', command: p.start }] }, t.ctx);
    expect(t.take()).toEqual([]);
  });

  it('knows a process by a name longer than the kernel keeps, and by its path', async () => {
    t = testContext();
    const p = watchedScript(true);
    const fake = decoy(p.name);
    await expect.poll(() => commandLineOf(fake.pid!).includes(p.name)).toBe(true);
    await applyBundle(bundle, { processes: [{ name: p.name, policy: 'Present', command: p.start }] }, t.ctx);
    expect(t.take().map((r) => r.sev)).toEqual(['INFO']);
    await expect.poll(() => fs.existsSync(pidFile) && alive(Number(fs.readFileSync(pidFile, 'utf8')))).toBe(true);
    for (const name of [p.name, p.script]) {
      await applyBundle(bundle, { processes: [{ name, policy: 'Present', command: p.start }] }, t.ctx);
      expect(t.take(), name).toEqual([]);
    }
  });

  it('matches the process name, the executable and argv[0] exactly', () => {
    const nginx = { comm: 'nginx', exe: '/usr/sbin/nginx', argv: ['nginx: master process /usr/sbin/nginx'] };
    expect(isNamed(nginx, 'nginx')).toBe(true);
    expect(isNamed(nginx, '/usr/sbin/nginx')).toBe(true);
    expect(isNamed(nginx, 'ngin')).toBe(false);
    expect(isNamed(nginx, 'master')).toBe(false);
    const editor = { comm: 'vim', exe: '/usr/bin/vim.basic', argv: ['vim', '/etc/nginx/nginx.conf'] };
    expect(isNamed(editor, 'nginx')).toBe(false);
    expect(isNamed(editor, 'vim')).toBe(true);
    expect(isNamed(editor, 'vim.basic')).toBe(true);
    const renamed = { comm: 'mosquitto', exe: '', argv: ['/usr/local/bin/mosquitto', '-c', 'x'] };
    expect(isNamed(renamed, 'mosquitto')).toBe(true);
    expect(isNamed(renamed, '/usr/local/bin/mosquitto')).toBe(true);
    const script = { comm: 'my-long-service', exe: '/usr/bin/dash', argv: ['/bin/sh', '/opt/my-long-service-name.sh'] };
    expect(isNamed(script, 'my-long-service-name.sh')).toBe(true);
    expect(isNamed(script, 'my-long-service-other')).toBe(false);
    // the kernel's 15 characters alone do not name a longer name, nor does an argument of another program
    expect(isNamed({ comm: 'my-long-service', exe: '/x/y', argv: ['y'] }, 'my-long-service-name.sh')).toBe(false);
    expect(isNamed({ comm: 'sh', exe: '/usr/bin/dash', argv: ['sh', '/opt/my-long-service-name.sh'] }, 'my-long-service-name.sh')).toBe(false);
    expect(isNamed(nginx, '')).toBe(false);
  });
});

describe('proc_watch: substituted values are data, never code', () => {
  /** Values an attacker able to set a device attribute would try. */
  const HOSTILE = [
    `berlin; id > INJECTED; echo`,
    `berlin' ; id > INJECTED ; echo '`,
    `berlin" ; id > INJECTED ; echo "`,
    `$(id > INJECTED)`,
    '`id > INJECTED`',
    `berlin\nid > INJECTED`,
    `\${IFS}; id>INJECTED`,
    `*`,
  ];

  it('runs a command with $(key) exactly as written, each value one word, however it is quoted', async () => {
    for (const value of HOSTILE) {
      t = testContext({ parameters: { location: value } });
      const out = (n: number) => path.join(t.dir, `out${n}`);
      const command = [
        `cd "${t.dir}"`,
        `printf '%s|' $(location) > "${out(1)}"`,
        `printf '%s' "at $(location)!" > "${out(2)}"`,
        `printf '%s' 'at $(location)!' > "${out(3)}"`,
        `printf '%s' $(location)$(location) > "${out(4)}"`,
      ].join('; ');
      await applyBundle(bundle, { processes: [{ name: `no-such-process-${crypto.randomBytes(4).toString('hex')}`, policy: 'Present', command }] }, t.ctx);
      expect(
        t.take().map((r) => r.sev),
        JSON.stringify(value),
      ).toEqual(['INFO']);
      expect(fs.existsSync(path.join(t.dir, 'INJECTED')), JSON.stringify(value)).toBe(false);
      expect(fs.readFileSync(out(1), 'utf8'), JSON.stringify(value)).toBe(`${value}|`);
      expect(fs.readFileSync(out(2), 'utf8'), JSON.stringify(value)).toBe(`at ${value}!`);
      expect(fs.readFileSync(out(3), 'utf8'), JSON.stringify(value)).toBe(`at ${value}!`);
      expect(fs.readFileSync(out(4), 'utf8'), JSON.stringify(value)).toBe(`${value}${value}`);
      t.cleanup();
    }
  });

  it('fails a watcher whose command names an unknown $(key), naming it, and runs nothing', async () => {
    t = testContext({ parameters: { site: 'berlin' } });
    const marker = path.join(t.dir, 'ran');
    await applyBundle(
      bundle,
      {
        processes: [
          { name: 'no-such-process-a', policy: 'Present', command: `touch "${marker}"; echo $(location) $(site)` },
          { name: '$(proc)', policy: 'Present', command: `touch "${marker}"` },
          { name: 'no-such-process-b', policy: 'Present', command: `echo "$(sh -c 'exit 0')" > "${t.dir}/kept"` },
        ],
      },
      t.ctx,
    );
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual([
      'ERR Process watch of no-such-process-a not applied: unknown parameter $(location): no parameter, secret or device attribute has this key.',
      'ERR Process watch of $(proc) not applied: unknown parameter $(proc): no parameter, secret or device attribute has this key.',
      'INFO Restarting process no-such-process-b using the defined command as it was not running: done',
    ]);
    expect(fs.existsSync(marker)).toBe(false);
    // shell syntax that is not a key ($(command with arguments)) is the configuration's own code, kept
    expect(fs.existsSync(path.join(t.dir, 'kept'))).toBe(true);
  });
});
