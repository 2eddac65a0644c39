import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { AgentRefusal } from '../../shared/codes.js';
import * as loginUser from './login-user.js';
import { environmentFilePath, lookupUser, parsePasswdLine, planCommandLine, planLogin, readEnvironmentFile } from './login-user.js';

afterEach(() => vi.restoreAllMocks());

function refusalOf(fn: () => unknown): AgentRefusal {
  try {
    fn();
  } catch (err) {
    if (err instanceof AgentRefusal) return err;
    throw err;
  }
  throw new Error('not refused');
}

describe('the console login user on the agent', () => {
  it('parses passwd lines and rejects malformed ones', () => {
    expect(parsePasswdLine('daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin')).toEqual({
      name: 'daemon',
      uid: 1,
      gid: 1,
      home: '/usr/sbin',
      shell: '/usr/sbin/nologin',
    });
    expect(parsePasswdLine('short:x:1')).toBeNull();
    expect(parsePasswdLine('bad:x:one:1::/:/bin/sh')).toBeNull();
    expect(parsePasswdLine('bad:x::1::/:/bin/sh')).toBeNull();
  });

  it('looks up system users and never passes a name outside the grammar to a command', () => {
    expect(lookupUser('root')).toMatchObject({ name: 'root', uid: 0, gid: 0 });
    expect(lookupUser('no-such-user-unit')).toBeNull();
    expect(lookupUser('-root')).toBeNull();
    expect(lookupUser('root:x')).toBeNull();
  });

  it("without a user, runs the agent's own shell as today", () => {
    const plan = planLogin(undefined);
    expect(plan.args).toEqual(['-l']);
    expect(plan.file).toBe(plan.shell);
  });

  it('as another user while not root: refused with user_switch_unavailable', () => {
    vi.spyOn(process, 'getuid').mockReturnValue(4242);
    const refusal = refusalOf(() => planLogin('daemon'));
    expect(refusal.code).toBe('user_switch_unavailable');
    expect(refusal.message).toMatch(/not as root, so it cannot start a console as daemon/);
  });

  it('as root: an unknown user is refused with unknown_user', () => {
    vi.spyOn(process, 'getuid').mockReturnValue(0);
    expect(refusalOf(() => planLogin('no-such-user-unit')).code).toBe('unknown_user');
  });

  it("as root: setpriv with the user's ids and groups, /bin/sh for a nologin account, a fresh environment", () => {
    vi.spyOn(process, 'getuid').mockReturnValue(0); // only the plan is made here, nothing runs
    process.env.FLEET_SECRET_FOR_TEST = 'agent-only';
    try {
      const plan = planLogin('daemon');
      expect(plan.file).toMatch(/\/setpriv$/);
      const daemon = lookupUser('daemon');
      expect(plan.args).toEqual([`--reuid=${daemon?.uid}`, `--regid=${daemon?.gid}`, '--init-groups', '--', '/bin/sh', '-l']);
      expect(plan.env).toMatchObject({ USER: 'daemon', LOGNAME: 'daemon', HOME: plan.cwd, SHELL: '/bin/sh', TERM: 'xterm-256color' });
      expect(plan.env.FLEET_SECRET_FOR_TEST).toBeUndefined();
    } finally {
      delete process.env.FLEET_SECRET_FOR_TEST;
    }
  });

  it("a command line as another user: setpriv, that user's shell with -c (no -l), sshd's variables, no TERM", () => {
    vi.spyOn(process, 'getuid').mockReturnValue(0); // only the plan is made here, nothing runs
    const plan = planLogin('daemon');
    const daemon = lookupUser('daemon');
    const run = planCommandLine(plan, 'id -u; echo "$HOME"', '');
    expect(run.file).toBe(plan.file);
    expect(run.args).toEqual([`--reuid=${daemon?.uid}`, `--regid=${daemon?.gid}`, '--init-groups', '--', '/bin/sh', '-c', 'id -u; echo "$HOME"']);
    expect(run.env).toMatchObject({ USER: 'daemon', LOGNAME: 'daemon', SHELL: '/bin/sh', PATH: '/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games' });
    expect(run.env.TERM).toBeUndefined();
    expect(run.cwd).toBe(plan.cwd);
  });

  it("a command line as the agent's user: its shell with -c, root's PATH for root, /etc/environment's PATH where it sets one", () => {
    const plan = { ...planLogin(undefined), uid: 0 };
    const run = planCommandLine(plan, 'true', '# comment\nLANG=C\n');
    expect(run.file).toBe(plan.shell);
    expect(run.args).toEqual(['-c', 'true']);
    expect(run.env.PATH).toBe('/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
    const ubuntu = 'PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/games:/usr/local/games:/snap/bin"\n';
    expect(planCommandLine(plan, 'true', ubuntu).env.PATH).toBe(
      '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/usr/games:/usr/local/games:/snap/bin',
    );
    expect(environmentFilePath("export PATH='/a:/b'\n")).toBe('/a:/b');
    expect(environmentFilePath('PATH=\nXPATH=/x\n')).toBeUndefined();
  });

  it('reads the environment file once while it is unchanged, and again once it is edited or replaced', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fleet-env-'));
    try {
      const file = path.join(dir, 'environment');
      fs.writeFileSync(file, 'PATH="/a:/b"\n');
      const reads = () => loginUser.environmentFileReads;
      const before = reads();
      for (let i = 0; i < 50; i++) expect(readEnvironmentFile(file)).toBe('PATH="/a:/b"\n');
      expect(reads() - before).toBe(1); // 50 commands, one read
      // Edited in place (another size), then replaced by a rename (another inode, same size and text length).
      fs.appendFileSync(file, 'PATH=/c\n');
      expect(environmentFilePath(readEnvironmentFile(file))).toBe('/c');
      fs.writeFileSync(path.join(dir, 'next'), 'PATH="/x:/y"\nPATH=/d\n');
      fs.renameSync(path.join(dir, 'next'), file);
      expect(environmentFilePath(readEnvironmentFile(file))).toBe('/d');
      expect(reads() - before).toBe(3);
      // Gone, or not a regular file (a FIFO would hold a blocking read): nothing, and the agent is not held.
      fs.rmSync(file);
      expect(readEnvironmentFile(file)).toBe('');
      fs.mkdirSync(file);
      expect(readEnvironmentFile(file)).toBe('');
      fs.rmdirSync(file);
      if (process.platform === 'linux') {
        execFileSync('mkfifo', [file]);
        expect(readEnvironmentFile(file)).toBe('');
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
