import { execFileSync } from 'node:child_process';
import fs, { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import { AgentRefusal } from '../../shared/codes.js';
import { LOGIN_USER_PATTERN } from '../../shared/resources.js';
import { parsePasswdLine, type PasswdEntry } from '../passwd.js';

export { parsePasswdLine, type PasswdEntry };

/**
 * The system's entry for `name`: getent first (it asks NSS, so LDAP or systemd users count too),
 * /etc/passwd where getent is missing. Null when there is no such user.
 */
export function lookupUser(name: string): PasswdEntry | null {
  // The name was checked by the broker's grammar; checked again so it never reaches a command line otherwise.
  if (!LOGIN_USER_PATTERN.test(name)) return null;
  let text: string;
  try {
    text = execFileSync('getent', ['passwd', name], { encoding: 'utf8', timeout: 5000, stdio: ['ignore', 'pipe', 'ignore'] });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') return null; // getent's "not found" is exit status 2
    try {
      text = readFileSync('/etc/passwd', 'utf8');
    } catch {
      return null;
    }
  }
  for (const line of text.split('\n')) {
    const entry = parsePasswdLine(line.trim());
    if (entry && entry.name === name) return entry;
  }
  return null;
}

/** Shells that mean "no interactive login": a console granted as such an account runs /bin/sh. */
const NO_LOGIN_SHELLS = /(^|\/)(nologin|false|sync|halt|shutdown)$/;

export interface LoginPlan {
  /** the program node-pty starts */
  file: string;
  args: string[];
  cwd: string;
  env: NodeJS.ProcessEnv;
  /** the user the shell runs as */
  user: string;
  /** that user's id (the agent's own where the plan keeps the agent's user) */
  uid: number;
  shell: string;
}

const SETPRIV_PLACES = ['/usr/bin/setpriv', '/bin/setpriv', '/usr/sbin/setpriv', '/sbin/setpriv'];

function agentUserName(): string | undefined {
  try {
    return os.userInfo().username;
  } catch {
    return undefined; // a uid without a passwd entry (some containers)
  }
}

/**
 * How to start the console's login shell. Without a user, or as the agent's own user: the agent's
 * shell, as today. As another user: only when the agent runs as root, through setpriv, which sets
 * the uid, the gid and the user's supplementary groups (node-pty's own uid/gid switch would keep
 * root's supplementary groups), with a fresh environment that carries nothing of the agent's.
 */
export function planLogin(user: string | undefined): LoginPlan {
  const own = agentUserName();
  if (user === undefined || user === own) {
    const shell = process.env.SHELL || '/bin/bash';
    const home = os.homedir();
    return {
      file: shell,
      args: ['-l'],
      cwd: home,
      env: { ...process.env, TERM: 'xterm-256color', HOME: home },
      user: own ?? String(process.getuid?.()),
      uid: process.getuid?.() ?? -1,
      shell,
    };
  }
  if (process.getuid?.() !== 0) {
    throw new AgentRefusal(
      'user_switch_unavailable',
      `The agent runs as ${own ?? 'an unprivileged user'}, not as root, so it cannot start a console as ${user}.`,
    );
  }
  const entry = lookupUser(user);
  if (!entry) throw new AgentRefusal('unknown_user', `There is no user ${user} on the device.`);
  const setpriv = SETPRIV_PLACES.find((p) => existsSync(p));
  if (!setpriv) throw new AgentRefusal('unsupported', `The device lacks setpriv (util-linux), which a console as another user needs.`);
  // The grant is the fleet's explicit choice to allow a console as this account, as root's `su -s` would.
  const shell = entry.shell === '' || NO_LOGIN_SHELLS.test(entry.shell) ? '/bin/sh' : entry.shell;
  const home = entry.home !== '' && existsSync(entry.home) ? entry.home : '/';
  return {
    file: setpriv,
    args: [`--reuid=${entry.uid}`, `--regid=${entry.gid}`, '--init-groups', '--', shell, '-l'],
    cwd: home,
    env: {
      TERM: 'xterm-256color',
      HOME: home,
      USER: entry.name,
      LOGNAME: entry.name,
      SHELL: shell,
      PATH: entry.uid === 0 ? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' : '/usr/local/bin:/usr/bin:/bin',
      ...(process.env.LANG ? { LANG: process.env.LANG } : {}),
    },
    user: entry.name,
    uid: entry.uid,
    shell,
  };
}

/** The PATH sshd gives a session: its compiled default (root's with the sbin directories), as /etc/profile sets it on Debian. */
const ROOT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';
const USER_PATH = '/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games';
/** /etc/environment is read at most this far (pam_env's file of `NAME=value` lines). */
const ENVIRONMENT_FILE_MAX = 64 * 1024;

/**
 * The PATH /etc/environment sets (pam_env gives it to sshd's sessions on Debian and Ubuntu, where
 * it is the only place Ubuntu sets /snap/bin), or undefined. Only PATH is taken from it.
 */
export function environmentFilePath(text: string): string | undefined {
  let path: string | undefined;
  for (const line of text.slice(0, ENVIRONMENT_FILE_MAX).split('\n')) {
    const m = /^\s*(?:export\s+)?PATH=(.*?)\s*$/.exec(line);
    if (!m) continue;
    const value = m[1].length >= 2 && (m[1][0] === '"' || m[1][0] === "'") && m[1].endsWith(m[1][0]) ? m[1].slice(1, -1) : m[1];
    if (value !== '' && !value.includes('\0')) path = value;
  }
  return path;
}

/** The last read of an environment file, and the identity (device, inode, size, times) it was read at. */
let environmentCache: { file: string; key: string; text: string } | undefined;
/** How many times an environment file was read (not answered from the cache); for tests. */
export let environmentFileReads = 0;

/**
 * `file`'s text (/etc/environment), '' where it cannot be read. Read again only when its device,
 * inode, size, modification or change time differ from the last read (a local user may edit it,
 * or replace it by a rename): one stat per command instead of a read. Opened as before (following
 * a symlink as the read did); the identity is taken from the descriptor read, and only a regular
 * file is read.
 */
export function readEnvironmentFile(file = '/etc/environment'): string {
  let st: fs.Stats;
  try {
    st = fs.statSync(file);
  } catch {
    environmentCache = undefined;
    return '';
  }
  const keyOf = (s: fs.Stats) => `${s.dev}:${s.ino}:${s.size}:${s.mtimeMs}:${s.ctimeMs}`;
  if (environmentCache?.file === file && environmentCache.key === keyOf(st)) return environmentCache.text;
  let fd: number | undefined;
  try {
    // Non-blocking: a FIFO or a device put in its place does not hold the agent (it is not read).
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK | fs.constants.O_NOCTTY);
    const at = fs.fstatSync(fd);
    const bytes = Buffer.alloc(Math.min(at.size, ENVIRONMENT_FILE_MAX));
    const n = at.isFile() ? fs.readSync(fd, bytes, 0, bytes.length, 0) : 0;
    environmentFileReads++;
    const text = bytes.subarray(0, n).toString('utf8');
    environmentCache = { file, key: keyOf(at), text };
    return text;
  } catch {
    environmentCache = undefined;
    return '';
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/**
 * A command without a terminal as sshd starts one (`ConsoleParams.commandLine`): `<shell> -c <line>`
 * as the plan's user (through setpriv as planned), not a login shell, so no /etc/profile and no
 * ~/.profile; bash still reads ~/.bashrc as it does under sshd (its input is a socket). The
 * environment is the console's without TERM, with the variables sshd sets (USER, LOGNAME, HOME,
 * SHELL) and PATH as a login shell had it from /etc/profile: /etc/environment's where it sets one
 * (as pam_env gives sshd), else sshd's default for the user (root's with the sbin directories).
 */
export function planCommandLine(
  plan: LoginPlan,
  line: string,
  environmentFile = readEnvironmentFile(),
): { file: string; args: string[]; cwd: string; env: NodeJS.ProcessEnv } {
  const { TERM: _term, ...base } = plan.env;
  const env: NodeJS.ProcessEnv = {
    ...base,
    USER: plan.user,
    LOGNAME: plan.user,
    SHELL: plan.shell,
    PATH: environmentFilePath(environmentFile) ?? (plan.uid === 0 ? ROOT_PATH : USER_PATH),
  };
  // plan: `<shell> -l` as the agent's user, or `setpriv … -- <shell> -l` as another.
  const own = plan.file === plan.shell;
  const args = own ? ['-c', line] : [...plan.args.slice(0, -2), plan.shell, '-c', line];
  return { file: plan.file, args, cwd: plan.cwd, env };
}
