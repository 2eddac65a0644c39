import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
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
    shell,
  };
}
