/**
 * qbee's `sshkeys`: for each `{username, userkeys}`, the user's ~/.ssh/authorized_keys holds
 * exactly those keys (directory 0700, file 0600, owned by the user). Users that do not exist are
 * reported and skipped; a file already right is left alone.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Bundle } from '../bundle.js';
import { readPasswd, sha256, sha256OfFile, underRoot, writeFileAtomic } from '../fsutil.js';
import { list, object, text, USERNAME } from '../parse.js';
import { ParameterError, resolveParameters } from '../template.js';

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
        const home = underRoot(ctx.root, user.home);
        const homeStat = await fs.lstat(home).catch(() => undefined);
        if (!homeStat?.isDirectory()) throw new Error(`home directory ${user.home} does not exist`);
        const dir = path.join(home, '.ssh');
        const file = path.join(dir, 'authorized_keys');
        const content = entry.userkeys.length ? entry.userkeys.join('\n') + '\n' : '';
        const dirStat = await fs.lstat(dir).catch(() => undefined);
        if (dirStat && !dirStat.isDirectory()) throw new Error(`${user.home}/.ssh is not a directory`);
        if (dirStat && (await sha256OfFile(file)) === sha256(content)) continue;
        const owner = { uid: user.uid, gid: user.gid };
        if (!dirStat) {
          await fs.mkdir(dir, { mode: 0o700 });
          if (process.getuid?.() === 0) await fs.chown(dir, owner.uid, owner.gid);
        }
        await writeFileAtomic(file, content, { mode: 0o600, forceMode: true, owner });
        ctx.report('INFO', `Writing authorized_keys for user ${username} (${entry.userkeys.length} key(s)).`);
      } catch (err) {
        ctx.report('ERR', `Unable to write authorized_keys for user ${username}: ${(err as Error).message}`);
      }
    }
  },
};
