/**
 * qbee's `password`: `users` of `{username, passwordhash}`; the user's entry in /etc/shadow gets
 * that crypt hash (and its last-change day reset). Users whose hash is already right are left
 * alone; a user missing from the shadow file is reported. The hash never appears in a report.
 */
import type { Bundle } from '../bundle.js';
import { readDeviceFile, writeFileAtomic } from '../device-files.js';
import { list, object, text, USERNAME } from '../parse.js';
import { ParameterError, resolveParameters } from '../template.js';

/** Largest shadow file read. */
const MAX_SHADOW_BYTES = 16 * 1024 * 1024;

export interface PasswordData {
  users: { username: string; passwordhash: string }[];
}

export const passwordBundle: Bundle<PasswordData> = {
  name: 'password',
  parse(data) {
    const o = object(data, 'password');
    return {
      users: list(o, 'users', 'password', 500).map((entry, i) => {
        const what = `password.users[${i}]`;
        const e = object(entry, what);
        const passwordhash = text(e, 'passwordhash', what, { required: true, max: 512 });
        if (/[:\s]/.test(passwordhash)) throw new Error(`${what}.passwordhash must be a crypt hash (no colon or white space)`);
        return { username: text(e, 'username', what, { required: true, max: 256 }), passwordhash };
      }),
    };
  },
  async apply(data, ctx) {
    let current: string;
    try {
      const data = await readDeviceFile(ctx.root, '/etc/shadow', MAX_SHADOW_BYTES);
      if (!data) throw Object.assign(new Error('missing'), { code: 'ENOENT' });
      current = data.toString('utf8');
    } catch (err) {
      ctx.report('ERR', `Unable to manage passwords: cannot read /etc/shadow (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}).`);
      return;
    }
    const wanted = new Map<string, string>();
    for (const u of data.users) {
      let username: string;
      try {
        username = resolveParameters(u.username, ctx.parameters);
      } catch (err) {
        if (!(err instanceof ParameterError)) throw err;
        ctx.report('ERR', `Password not set: ${err.message}.`);
        continue;
      }
      if (USERNAME.test(username)) wanted.set(username, u.passwordhash);
      else ctx.report('ERR', `"${username}" is not a valid user name: password not set.`);
    }
    const seen = new Set<string>();
    const modified: string[] = [];
    const today = String(Math.floor(Date.now() / 86_400_000));
    const lines = current.split('\n').map((line) => {
      const fields = line.split(':');
      const hash = wanted.get(fields[0]);
      if (hash === undefined || fields.length < 3) return line;
      seen.add(fields[0]);
      if (fields[1] === hash) return line;
      fields[1] = hash;
      fields[2] = today;
      modified.push(fields[0]);
      return fields.join(':');
    });
    for (const name of wanted.keys()) if (!seen.has(name)) ctx.report('WARN', `User ${name} does not exist: password not set.`);
    if (modified.length === 0) return;
    try {
      await writeFileAtomic(ctx.root, '/etc/shadow', lines.join('\n'));
    } catch (err) {
      ctx.report('ERR', `Error setting passwords for users: ${(err as Error).message}`);
      return;
    }
    for (const name of modified) ctx.report('INFO', `Password for user ${name} successfully set.`);
  },
};
