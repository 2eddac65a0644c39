/**
 * qbee's `sshkeys`: for each `{username, userkeys}`, the user's ~/.ssh/authorized_keys holds
 * exactly those keys (directory 0700, file 0600, owned by the user). Users that do not exist are
 * reported and skipped; a file already right is left alone.
 */
import type { Bundle } from '../bundle.js';
import { readPasswd, sha256In, writeAtomicIn, type PasswdEntry } from '../device-files.js';
import { openDirectory, openSubdirectory, replaceable, sha256, type CheckedDir } from '../fsutil.js';
import { list, object, text, USERNAME } from '../parse.js';
import { ParameterError, resolveParameters } from '../template.js';

/** Largest authorized_keys read (a user has at most 200 keys of 16 KiB). */
const MAX_KEYS_BYTES = 4 * 1024 * 1024;

export interface SshKeysData {
  users: { username: string; userkeys: string[] }[];
}

export const sshKeysBundle: Bundle<SshKeysData> = {
  name: 'sshkeys',
  parse(data) {
    const o = object(data, 'sshkeys');
    return {
      users: list(o, 'users', 'sshkeys', 500).map((entry, i) => {
        const what = `sshkeys.users[${i}]`;
        const e = object(entry, what);
        const userkeys = list(e, 'userkeys', what, 200).map((k, j) => {
          if (typeof k !== 'string' || k.length > 16384 || /[\r\n\0]/.test(k)) throw new Error(`${what}.userkeys[${j}] must be one line of text`);
          return k.trim();
        });
        return { username: text(e, 'username', what, { required: true, max: 256 }), userkeys: userkeys.filter(Boolean) };
      }),
    };
  },
  async apply(data, ctx) {
    const users = await readPasswd(ctx.root);
    for (const entry of data.users) {
      if (ctx.signal.aborted) return;
      let username: string;
      try {
        username = resolveParameters(entry.username, ctx.parameters);
      } catch (err) {
        if (!(err instanceof ParameterError)) throw err;
        ctx.report('ERR', `authorized_keys not written: ${err.message}.`);
        continue;
      }
      if (!USERNAME.test(username)) {
        ctx.report('ERR', `"${username}" is not a valid user name: authorized_keys not written.`);
        continue;
      }
      const user = users.find((u) => u.name === username);
      if (!user) {
        ctx.report('WARN', `User ${username} does not exist: authorized_keys not written.`);
        continue;
      }
      try {
        const content = entry.userkeys.length ? entry.userkeys.join('\n') + '\n' : '';
        if (await writeKeys(ctx.root, user, content)) ctx.report('INFO', `Writing authorized_keys for user ${username} (${entry.userkeys.length} key(s)).`);
      } catch (err) {
        ctx.report('ERR', `Unable to write authorized_keys for user ${username}: ${(err as Error).message}`);
      }
    }
  },
};

/**
 * The user's home and ~/.ssh belong to the user, who can change them at any moment: both are
 * opened component by component and used through their descriptors only (see fsutil), the file
 * is read only when it is a regular file with a single link (never a FIFO, a device or a symlink)
 * and with a cap, and the new file is made exclusively in the .ssh directory that was opened,
 * given to the user through its descriptor and renamed within that directory.
 */
async function writeKeys(root: string, user: PasswdEntry, content: string): Promise<boolean> {
  if (!user.home.startsWith('/')) throw new Error(`home directory ${user.home} is not an absolute path`);
  let home: CheckedDir;
  try {
    home = await openDirectory(root, user.home);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw new Error(`home directory ${user.home} does not exist`);
    throw err;
  }
  const owner = { uid: user.uid, gid: user.gid };
  try {
    const ssh = await openSubdirectory(home, '.ssh', { create: 0o700, owner });
    try {
      const existing = await replaceable(ssh, 'authorized_keys');
      // a second link may be any file of the device: never read, only replaced
      if (existing && existing.nlink === 1 && existing.uid === user.uid && (existing.mode & 0o7777) === 0o600) {
        if ((await sha256In(ssh, 'authorized_keys', MAX_KEYS_BYTES)) === sha256(content)) return false;
      }
      return await writeAtomicIn(ssh, 'authorized_keys', content, { mode: 0o600, forceMode: true, owner });
    } finally {
      await ssh.close();
    }
  } finally {
    await home.close();
  }
}
