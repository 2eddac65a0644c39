/**
 * qbee's `users`: `items` of `{username, action: add|remove}`, applied with the device's
 * useradd/userdel (a user added gets a home directory and a login shell; one removed loses its
 * home). A user already present (or already absent) is left alone. With a bundle root other than
 * `/` the tools work on that tree's /etc files (`--prefix`).
 */
import fs from 'node:fs/promises';
import type { Bundle, BundleContext } from '../bundle.js';
import { readPasswd } from '../device-files.js';
import { underRoot } from '../fsutil.js';
import { reportCommand, requireTools } from '../helpers.js';
import { list, object, text, USERNAME } from '../parse.js';
import { ParameterError, resolveParameters } from '../template.js';

export interface UsersData {
  items: { username: string; action: 'add' | 'remove' }[];
}

export const usersBundle: Bundle<UsersData> = {
  name: 'users',
  parse(data) {
    const o = object(data, 'users');
    return {
      items: list(o, 'items', 'users', 500).map((entry, i) => {
        const e = object(entry, `users.items[${i}]`);
        const action = text(e, 'action', `users.items[${i}]`, { required: true });
        if (action !== 'add' && action !== 'remove') throw new Error(`users.items[${i}].action must be add or remove`);
        return { username: text(e, 'username', `users.items[${i}]`, { required: true, max: 256 }), action };
      }),
    };
  },
  async apply(data, ctx) {
    const tools = [...new Set(data.items.map((u) => (u.action === 'add' ? 'useradd' : 'userdel')))];
    if (!(await requireTools(ctx, tools, 'users'))) return;
    const prefix = ctx.root === '/' ? [] : ['--prefix', ctx.root];
    const present = new Set((await readPasswd(ctx.root)).map((u) => u.name));
    const shellPath = await loginShell(ctx);
    for (const item of data.items) {
      let username: string;
      try {
        username = resolveParameters(item.username, ctx.parameters);
      } catch (err) {
        if (!(err instanceof ParameterError)) throw err;
        ctx.report('ERR', `User not ${item.action === 'add' ? 'added' : 'removed'}: ${err.message}.`);
        continue;
      }
      if (!USERNAME.test(username)) {
        ctx.report('ERR', `"${username}" is not a valid user name: not ${item.action === 'add' ? 'added' : 'removed'}.`);
        continue;
      }
      if (item.action === 'add' && !present.has(username)) {
        const result = await ctx.run([
          'useradd',
          ...prefix,
          '--comment',
          `${username},,,,User added by the fleet agent`,
          '--create-home',
          '--shell',
          shellPath,
          username,
        ]);
        if (reportCommand(ctx, result, `Successfully added user '${username}'`, `Unable to add user '${username}'`)) present.add(username);
      } else if (item.action === 'remove' && present.has(username)) {
        if (username === 'root') {
          ctx.report('WARN', `Cannot remove administrative user '${username}'`);
          continue;
        }
        const result = await ctx.run(['userdel', ...prefix, '--remove', username]);
        // userdel exits 12 when only the mail spool or home was missing: the user is gone all the same
        const gone = result.code === 0 || (result.code === 12 && !(await readPasswd(ctx.root)).some((u) => u.name === username));
        if (reportCommand(ctx, gone ? { ...result, code: 0 } : result, `Successfully removed user '${username}'`, `Unable to remove user '${username}'`))
          present.delete(username);
      }
    }
  },
};

/** bash when the device has it, else sh (qbee's choice). */
async function loginShell(ctx: BundleContext): Promise<string> {
  for (const candidate of ['/bin/bash', '/bin/sh']) {
    try {
      await fs.access(underRoot(ctx.root, candidate));
      return candidate;
    } catch {
      // next
    }
  }
  return '/bin/sh';
}
