/**
 * A local user against the agent's writes, as that user would try it: links planted in the places
 * they can write (their home, a directory they own), FIFOs and devices where the agent reads, hard
 * links to files they cannot touch, and a swapper racing a directory component between a real
 * directory and a symlink to a directory of root's. Everything is planted in a temp tree (the test
 * runs as root and gives the planted places to uid 1500, the tree's user); the bundles run
 * in-process. Whatever happens, nothing is written or chowned outside the target, no temporary
 * file is left behind, and every run ends.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createSoftwareTestContext, type SoftwareTestContext } from '../test-support/test-context.js';
import { applyBundle, testContext } from '../test-support/system-test-context.js';
import { buildDeb, indexRepository, prepareDebRoot } from '../test-support/deb-fixture.js';
import { fileDistributionBundle } from './file-distribution.js';
import { softwareManagementBundle } from './software-management.js';
import { sshKeysBundle } from './sshkeys.js';

const USER = 1500;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const mkfifo = (file: string) => execFileSync('mkfifo', [file]);

/** Every file below `dir` whose name marks it as one of the agent's temporary files. */
function strayTemps(dir: string): string[] {
  const out: string[] = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (/fleet-tmp|tmp-agent/.test(entry.name)) out.push(path.join(entry.parentPath, entry.name));
  }
  return out;
}

/** A directory of root's holding one file, as /etc/cron.d would; returns a check that it is untouched. */
function rootsDirectory(dir: string): () => void {
  fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  const file = path.join(dir, 'existing');
  fs.writeFileSync(file, 'root owns this\n', { mode: 0o644 });
  return () => {
    expect(fs.readdirSync(dir)).toEqual(['existing']);
    expect(fs.readFileSync(file, 'utf8')).toBe('root owns this\n');
    const st = fs.statSync(file);
    expect([st.uid, st.gid, st.mode & 0o7777, st.nlink]).toEqual([0, 0, 0o644, 1]);
    expect(fs.statSync(dir).uid).toBe(0);
  };
}

/**
 * A user's swapper: in `dir`, `name` goes round as a real directory, a symlink to `outside` and
 * nothing (atomic renames), as fast as it can, until stopped (what it returns). It runs as the
 * tree's user (uid 1500), with that user's rights only, as the attacker would.
 */
function swapper(dir: string, name: string, outside: string): () => Promise<void> {
  const script = `
    const fs = require('fs');
    const [dir, name, outside] = process.argv.slice(1);
    const at = dir + '/' + name, parked = at + '.parked', link = at + '.link';
    const tryTo = (f) => { try { f(); } catch {} };
    for (let n = 0; ; n++) {
      tryTo(() => fs.symlinkSync(outside, link));
      let st;
      tryTo(() => (st = fs.lstatSync(at)));
      // a directory there is the user's own (parked) or one the agent made (moved out of the way)
      if (st && st.isDirectory()) tryTo(() => fs.renameSync(at, fs.existsSync(parked) ? at + '.junk' + n : parked));
      tryTo(() => fs.renameSync(link, at));
      tryTo(() => fs.renameSync(at, link));
      tryTo(() => fs.renameSync(parked, at));
    }`;
  const child = spawn(process.execPath, ['-e', script, dir, name, outside], { stdio: 'ignore', uid: USER, gid: USER });
  const stop = () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once('exit', () => resolve());
      child.kill('SIGKILL');
    });
  cleanups.push(stop);
  return stop;
}

/**
 * Runs of each race: at least this many, and on until the swapper has been seen to win some runs
 * (the bundle met its link and refused) and lose others (written), so the race was really run.
 * A run costs a few to a few hundred milliseconds (every write is flushed); `FLEET_HOSTILE_RUNS`
 * raises the count for a soak of thousands of runs.
 */
const RACE_RUNS = Number(process.env.FLEET_HOSTILE_RUNS) || 100;
/** A race's time bound: a loaded machine makes runs slow, and a soak long. */
const RACE_TIMEOUT = 3_600_000;

/** Runs `once(i)` RACE_RUNS times, then on until `seen()` holds (3000 runs more at most); the count run. */
async function race(once: (i: number) => Promise<void>, seen: () => boolean): Promise<number> {
  let i = 0;
  while (i < RACE_RUNS || (!seen() && i < RACE_RUNS + 3000)) await once(i++);
  return i;
}

/** A tree whose top directories the tree's user may pass through (mkdtemp makes them root's only). */
function passable(t: ReturnType<typeof testContext>): void {
  fs.chmodSync(t.dir, 0o711);
  fs.chmodSync(t.root, 0o755);
}

describe('sshkeys against the user whose keys it writes', () => {
  function home() {
    const t = testContext();
    cleanups.push(() => t.cleanup());
    fs.mkdirSync(t.at('/etc'));
    fs.writeFileSync(t.at('/etc/passwd'), `root:x:0:0:root:/root:/bin/sh\nbob:x:${USER}:${USER}:Bob:/home/bob:/bin/sh\n`);
    fs.mkdirSync(t.at('/home/bob'), { recursive: true, mode: 0o755 });
    fs.chownSync(t.at('/home/bob'), USER, USER);
    const untouched = rootsDirectory(t.at('/etc/cron.d'));
    return { t, untouched, keys: (k: string[]) => ({ users: [{ username: 'bob', userkeys: k }] }) };
  }

  function sshDir(t: ReturnType<typeof testContext>): string {
    const dir = t.at('/home/bob/.ssh');
    fs.mkdirSync(dir, { mode: 0o700 });
    fs.chownSync(dir, USER, USER);
    return dir;
  }

  it('refuses authorized_keys as a FIFO at once (the run ends, the next user is still done)', async () => {
    const { t, untouched } = home();
    fs.appendFileSync(t.at('/etc/passwd'), `carol:x:1501:1501:Carol:/home/carol:/bin/sh\n`);
    fs.mkdirSync(t.at('/home/carol'), { recursive: true });
    fs.chownSync(t.at('/home/carol'), 1501, 1501);
    const dir = sshDir(t);
    const fifo = path.join(dir, 'authorized_keys');
    mkfifo(fifo);
    expect(fs.lstatSync(fifo).isFIFO()).toBe(true);
    const data = {
      users: [
        { username: 'bob', userkeys: ['ssh-ed25519 AAAA bob'] },
        { username: 'carol', userkeys: ['ssh-ed25519 CCCC carol'] },
      ],
    };
    await applyBundle(sshKeysBundle, data, t.ctx);
    expect(t.take()).toEqual([
      { sev: 'ERR', text: 'Unable to write authorized_keys for user bob: /home/bob/.ssh/authorized_keys is not a regular file: refused' },
      { sev: 'INFO', text: 'Writing authorized_keys for user carol (1 key(s)).' },
    ]);
    expect(fs.lstatSync(fifo).isFIFO()).toBe(true);
    expect(fs.readFileSync(t.at('/home/carol/.ssh/authorized_keys'), 'utf8')).toBe('ssh-ed25519 CCCC carol\n');
    untouched();
    expect(strayTemps(t.root)).toEqual([]);
  });

  it('refuses authorized_keys as a symlink to /dev/zero without reading it', async () => {
    const { t, untouched } = home();
    const dir = sshDir(t);
    fs.symlinkSync('/dev/zero', path.join(dir, 'authorized_keys'));
    fs.lchownSync(path.join(dir, 'authorized_keys'), USER, USER);
    await applyBundle(sshKeysBundle, { users: [{ username: 'bob', userkeys: ['ssh-ed25519 AAAA bob'] }] }, t.ctx);
    expect(t.take()).toEqual([
      { sev: 'ERR', text: 'Unable to write authorized_keys for user bob: refusing to replace the symlink /home/bob/.ssh/authorized_keys' },
    ]);
    expect(fs.readlinkSync(path.join(dir, 'authorized_keys'))).toBe('/dev/zero');
    untouched();
  });

  it('replaces a hard link to a file of root instead of keeping, writing or chowning it', async () => {
    const { t, untouched } = home();
    const dir = sshDir(t);
    // root's file already holds exactly the wanted keys: kept as it is, sshd would read root's file
    fs.writeFileSync(t.at('/etc/cron.d/existing'), 'ssh-ed25519 AAAA bob\n');
    fs.linkSync(t.at('/etc/cron.d/existing'), path.join(dir, 'authorized_keys'));
    await applyBundle(sshKeysBundle, { users: [{ username: 'bob', userkeys: ['ssh-ed25519 AAAA bob'] }] }, t.ctx);
    expect(t.take()).toEqual([{ sev: 'INFO', text: 'Writing authorized_keys for user bob (1 key(s)).' }]);
    const keys = fs.statSync(path.join(dir, 'authorized_keys'));
    expect([keys.uid, keys.mode & 0o777, keys.nlink]).toEqual([USER, 0o600, 1]);
    const theirs = fs.statSync(t.at('/etc/cron.d/existing'));
    expect([theirs.uid, theirs.mode & 0o777, theirs.nlink]).toEqual([0, 0o644, 1]);
    fs.writeFileSync(t.at('/etc/cron.d/existing'), 'root owns this\n');
    untouched();
  });

  it('refuses a .ssh that is a symlink to a directory of root, and never chowns it', async () => {
    const { t, untouched } = home();
    fs.symlinkSync(t.at('/etc/cron.d'), t.at('/home/bob/.ssh'));
    fs.lchownSync(t.at('/home/bob/.ssh'), USER, USER);
    await applyBundle(sshKeysBundle, { users: [{ username: 'bob', userkeys: ['* * * * * root sh -c id'] }] }, t.ctx);
    expect(t.take()).toEqual([
      { sev: 'ERR', text: 'Unable to write authorized_keys for user bob: refusing to follow the symlink /home/bob/.ssh: another user could have made it' },
    ]);
    untouched();
  });

  it('a swapper racing ~/.ssh between a directory and a symlink to /etc/cron.d never gets a file there', { timeout: RACE_TIMEOUT }, async () => {
    const { t, untouched } = home();
    passable(t);
    sshDir(t);
    const stop = swapper(t.at('/home/bob'), '.ssh', t.at('/etc/cron.d'));
    let written = 0;
    let refused = 0;
    const runs = await race(
      async (i) => {
        await applyBundle(sshKeysBundle, { users: [{ username: 'bob', userkeys: [`* * * * * root sh -c id #${i}`] }] }, t.ctx);
        for (const r of t.take()) {
          if (r.sev === 'INFO') written++;
          else refused++;
        }
      },
      () => written > 0 && refused > 0,
    );
    await stop();
    // the swapper won some runs and lost others, and every run ended with a report of what it did
    expect(written).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
    expect(written + refused).toBe(runs);
    untouched();
    expect(strayTemps(t.root)).toEqual([]);
    // what was written went to the user's own directory, owned by the user
    for (const dir of ['.ssh', '.ssh.parked', '.ssh.link']) {
      const file = t.at(`/home/bob/${dir}/authorized_keys`);
      if (fs.existsSync(file) && !fs.lstatSync(t.at(`/home/bob/${dir}`)).isSymbolicLink()) expect(fs.statSync(file).uid).toBe(USER);
    }
  });
});

describe('file_distribution against a user who owns a directory on the way', () => {
  it('a swapper racing a component between a directory and a symlink to /etc/cron.d never gets a file there', { timeout: RACE_TIMEOUT }, async () => {
    const t = testContext({ files: { '/app.conf': 'run={{n}}\n' } });
    cleanups.push(() => t.cleanup());
    const untouched = rootsDirectory(t.at('/etc/cron.d'));
    passable(t);
    fs.mkdirSync(t.at('/srv/app/conf'), { recursive: true, mode: 0o755 });
    fs.chownSync(t.at('/srv/app'), USER, USER);
    fs.chownSync(t.at('/srv/app/conf'), USER, USER);
    const stop = swapper(t.at('/srv/app'), 'conf', t.at('/etc/cron.d'));
    let written = 0;
    let refused = 0;
    const unclear: string[] = [];
    const runs = await race(
      async (i) => {
        const config = {
          files: [
            {
              label: 'app',
              templates: [{ source: '/app.conf', destination: '/srv/app/conf/evil', is_template: true }],
              parameters: [{ key: 'n', value: String(i) }],
            },
          ],
        };
        await applyBundle(fileDistributionBundle, config, t.ctx);
        for (const r of t.take()) {
          if (r.sev === 'INFO') written++;
          else refused++;
          if (r.text.includes('/proc/')) unclear.push(r.text);
        }
      },
      () => written > 0 && refused > 0,
    );
    await stop();
    // the swapper won some runs and lost others, and every run ended with one report
    expect(written).toBeGreaterThan(0);
    expect(refused).toBeGreaterThan(0);
    expect(written + refused).toBe(runs);
    // refusals name the device's paths
    expect(unclear).toEqual([]);
    untouched();
    expect(strayTemps(t.root)).toEqual([]);
    expect(fs.readdirSync(path.join(t.dir, 'downloads'))).toEqual([]);
  });

  it('refuses to write below a directory every user can write to', async () => {
    const t = testContext({ files: { '/app.conf': 'x\n' } });
    cleanups.push(() => t.cleanup());
    fs.mkdirSync(t.at('/srv/drop'), { recursive: true });
    fs.chmodSync(t.at('/srv/drop'), 0o777);
    const config = { files: [{ label: 'app', templates: [{ source: '/app.conf', destination: '/srv/drop/app.conf', is_template: false }] }] };
    await applyBundle(fileDistributionBundle, config, t.ctx);
    expect(t.take()).toEqual([
      { sev: 'ERR', text: '[app] Unable to download file /app.conf to /srv/drop/app.conf: /srv/drop is writable by every user: refused' },
    ]);
    expect(fs.readdirSync(t.at('/srv/drop'))).toEqual([]);
  });

  it('follows a symlinked directory only when root made it in a place only root can change', async () => {
    const t = testContext({ files: { '/app.conf': 'x\n' } });
    cleanups.push(() => t.cleanup());
    fs.mkdirSync(t.at('/run/app'), { recursive: true });
    fs.mkdirSync(t.at('/var'));
    fs.symlinkSync('/run', t.at('/var/run')); // root's, in root's /var: followed, inside the root
    fs.mkdirSync(t.at('/home/bob'), { recursive: true });
    fs.chownSync(t.at('/home/bob'), USER, USER);
    fs.symlinkSync('/run', t.at('/home/bob/run')); // in bob's home: bob could have made it
    const to = (destination: string) => ({ files: [{ label: 'app', templates: [{ source: '/app.conf', destination, is_template: false }] }] });
    await applyBundle(fileDistributionBundle, to('/var/run/app/app.conf'), t.ctx);
    await applyBundle(fileDistributionBundle, to('/home/bob/run/app/other.conf'), t.ctx);
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual([
      'INFO [app] Successfully downloaded file /app.conf to /var/run/app/app.conf',
      'ERR [app] Unable to download file /app.conf to /home/bob/run/app/other.conf: refusing to follow the symlink /home/bob/run: another user could have made it',
    ]);
    expect(fs.readdirSync(t.at('/run/app'))).toEqual(['app.conf']);
  });
});

describe('software_management against planted temporary names', () => {
  let work: string;
  let s: SoftwareTestContext;
  const item = (port: string) => ({
    package: 'demo-daemon',
    config_files: [{ config_template: '/templates/demo.conf', config_location: '/etc/demo/demo.conf' }],
    parameters: [{ key: 'port', value: port }],
  });
  const apply = (data: unknown) => softwareManagementBundle.apply(softwareManagementBundle.parse(data), s.ctx);

  async function installed(): Promise<() => void> {
    work = await mkdtemp(path.join(tmpdir(), 'sw-hostile-'));
    cleanups.push(() => rm(work, { recursive: true, force: true }));
    s = await createSoftwareTestContext();
    cleanups.push(() => s.cleanup());
    const repo = path.join(work, 'repo');
    await prepareDebRoot(s.root, repo);
    await buildDeb(path.join(work, 'build'), repo, { name: 'demo-daemon', version: '1.0', files: { '/usr/bin/demo-daemon': '#!/bin/sh\n' } });
    await indexRepository(repo);
    s.files.set('/templates/demo.conf', 'port={{port}}\n');
    await apply({ items: [item('1')] });
    expect(s.reports.filter((r) => r.severity !== 'INFO')).toEqual([]);
    s.clear();
    fs.mkdirSync(path.join(s.root, 'etc/secret'), { recursive: true });
    fs.writeFileSync(path.join(s.root, 'etc/secret/shadow'), 'root:$6$hash:19000::::::\n', { mode: 0o600 });
    return () => {
      expect(fs.readFileSync(path.join(s.root, 'etc/secret/shadow'), 'utf8')).toBe('root:$6$hash:19000::::::\n');
      expect(fs.statSync(path.join(s.root, 'etc/secret/shadow')).mode & 0o7777).toBe(0o600);
    };
  }

  it('a symlink planted at <config_location>.tmp-agent is not written through', async () => {
    const untouched = await installed();
    fs.symlinkSync(path.join(s.root, 'etc/secret/shadow'), path.join(s.root, 'etc/demo/demo.conf.tmp-agent'));
    await apply({ items: [item('2')] });
    expect(s.reports.map((r) => r.text)).toContain('Successfully rendered template file /templates/demo.conf to /etc/demo/demo.conf.');
    expect(fs.readFileSync(path.join(s.root, 'etc/demo/demo.conf'), 'utf8')).toBe('port=2\n');
    untouched();
  });

  it('a hard link planted at <config_location>.tmp-agent is not written through', async () => {
    const untouched = await installed();
    fs.linkSync(path.join(s.root, 'etc/secret/shadow'), path.join(s.root, 'etc/demo/demo.conf.tmp-agent'));
    await apply({ items: [item('2')] });
    expect(fs.readFileSync(path.join(s.root, 'etc/demo/demo.conf'), 'utf8')).toBe('port=2\n');
    untouched();
  });

  it('keeps the mode of the file it replaces, whatever the umask', async () => {
    await installed();
    const conf = path.join(s.root, 'etc/demo/demo.conf');
    fs.chmodSync(conf, 0o600);
    const umask = process.umask(0o022);
    try {
      await apply({ items: [item('3')] });
    } finally {
      process.umask(umask);
    }
    expect(fs.readFileSync(conf, 'utf8')).toBe('port=3\n');
    expect(fs.statSync(conf).mode & 0o7777).toBe(0o600);
    expect(strayTemps(s.root)).toEqual([]);
  });

  it('refuses a FIFO at the location instead of blocking on it', async () => {
    await installed();
    const conf = path.join(s.root, 'etc/demo/demo.conf');
    fs.rmSync(conf);
    mkfifo(conf);
    await apply({ items: [item('4')] });
    expect(s.reports).toEqual([
      { severity: 'ERR', text: 'Unable to write configuration file /etc/demo/demo.conf.', log: '/etc/demo/demo.conf is not a regular file: refused' },
    ]);
    expect(fs.lstatSync(conf).isFIFO()).toBe(true);
  });
});
