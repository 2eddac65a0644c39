/** users, sshkeys and password on a temp tree (useradd/userdel with --prefix): the test machine's accounts are never touched. */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { applyBundle, emptyPath, fakeTools, testContext } from '../test-support/system-test-context.js';
import { passwordBundle } from './password.js';
import { sshKeysBundle } from './sshkeys.js';
import { usersBundle } from './users.js';

let t: ReturnType<typeof testContext>;
afterEach(() => t?.cleanup());

/** A minimal /etc of the temp tree: root and bob (uid 1500, home /home/bob). */
function etc() {
  t = testContext();
  fs.mkdirSync(t.at('/etc'));
  fs.mkdirSync(t.at('/home/bob'), { recursive: true });
  fs.writeFileSync(t.at('/etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\nbob:x:1500:1500:Bob:/home/bob:/bin/sh\n');
  fs.writeFileSync(t.at('/etc/shadow'), 'root:*:19000:0:99999:7:::\nbob:!:19000:0:99999:7:::\n', { mode: 0o640 });
  fs.writeFileSync(t.at('/etc/group'), 'root:x:0:\nusers:x:100:\nbob:x:1500:\n');
  fs.writeFileSync(t.at('/etc/gshadow'), 'root:*::\nusers:*::\nbob:!::\n');
  fs.chmodSync(t.at('/etc/shadow'), 0o640);
}

const passwd = () => fs.readFileSync(t.at('/etc/passwd'), 'utf8');
const shadow = () => fs.readFileSync(t.at('/etc/shadow'), 'utf8');

describe('users', () => {
  it('adds a user with a home directory, then removes it; each a second time changes nothing', async () => {
    etc();
    t.ctx.parameters = { team: 'ops' };
    const add = {
      items: [
        { username: 'alice', action: 'add' },
        { username: '$(team)', action: 'add' },
        { username: 'bob', action: 'add' },
      ],
    };
    await applyBundle(usersBundle, add, t.ctx);
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual(["INFO Successfully added user 'alice'", "INFO Successfully added user 'ops'"]);
    expect(passwd()).toMatch(/^alice:x:\d+:\d+:alice,,,,User added by the fleet agent:\/home\/alice:\/bin\/(ba)?sh$/m);
    expect(passwd()).toMatch(/^ops:/m);
    expect(fs.statSync(t.at('/home/alice')).isDirectory()).toBe(true);

    await applyBundle(usersBundle, add, t.ctx);
    expect(t.take()).toEqual([]);

    const remove = {
      items: [
        { username: 'alice', action: 'remove' },
        { username: 'nobody-here', action: 'remove' },
      ],
    };
    await applyBundle(usersBundle, remove, t.ctx);
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual(["INFO Successfully removed user 'alice'"]);
    expect(passwd()).not.toMatch(/^alice:/m);
    expect(fs.existsSync(t.at('/home/alice'))).toBe(false);
    await applyBundle(usersBundle, remove, t.ctx);
    expect(t.take()).toEqual([]);
  });

  it('reports missing tools and applies nothing', async () => {
    etc();
    t.setPath(emptyPath(t.dir));
    const before = passwd();
    await applyBundle(
      usersBundle,
      {
        items: [
          { username: 'alice', action: 'add' },
          { username: 'bob', action: 'remove' },
        ],
      },
      t.ctx,
    );
    expect(t.take()).toEqual([{ sev: 'ERR', text: 'useradd, userdel are not installed on this device: users not applied.' }]);
    expect(passwd()).toBe(before);
  });

  it('refuses bad data, bad names and removing root, and reports a failing useradd with its output', async () => {
    etc();
    expect(() => usersBundle.parse({ items: [{ username: 'x', action: 'delete' }] })).toThrow('users.items[0].action must be add or remove');
    expect(() => usersBundle.parse({ items: [{ action: 'add' }] })).toThrow('users.items[0].username is required');
    await applyBundle(
      usersBundle,
      {
        items: [
          { username: 'bad name', action: 'add' },
          { username: 'root', action: 'remove' },
        ],
      },
      t.ctx,
    );
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual([
      'ERR "bad name" is not a valid user name: not added.',
      "WARN Cannot remove administrative user 'root'",
    ]);
    // a useradd that fails (here: the passwd file locked by someone else) is reported with its output
    t.setPath(fakeTools(t.dir, { useradd: 'echo "useradd: cannot lock /etc/passwd; try again later." >&2; exit 1' }));
    await applyBundle(usersBundle, { items: [{ username: 'carol', action: 'add' }] }, t.ctx);
    expect(t.take()).toEqual([{ sev: 'ERR', text: "Unable to add user 'carol': exit code 1", log: 'useradd: cannot lock /etc/passwd; try again later.\n' }]);
  });
});

describe('sshkeys', () => {
  const keys = (k: string[]) => ({ users: [{ username: 'bob', userkeys: k }] });
  const file = () => t.at('/home/bob/.ssh/authorized_keys');

  it('writes exactly the keys, owned by the user, and a second run changes nothing', async () => {
    etc();
    await applyBundle(sshKeysBundle, keys(['ssh-ed25519 AAAA1 bob@laptop', 'ssh-rsa AAAA2 bob@desk']), t.ctx);
    expect(t.take()).toEqual([{ sev: 'INFO', text: 'Writing authorized_keys for user bob (2 key(s)).' }]);
    expect(fs.readFileSync(file(), 'utf8')).toBe('ssh-ed25519 AAAA1 bob@laptop\nssh-rsa AAAA2 bob@desk\n');
    expect(fs.statSync(file()).mode & 0o777).toBe(0o600);
    expect(fs.statSync(path.dirname(file())).mode & 0o777).toBe(0o700);
    expect(fs.statSync(file()).uid).toBe(1500);

    await applyBundle(sshKeysBundle, keys(['ssh-ed25519 AAAA1 bob@laptop', 'ssh-rsa AAAA2 bob@desk']), t.ctx);
    expect(t.take()).toEqual([]);

    fs.appendFileSync(file(), 'ssh-rsa INTRUDER\n');
    await applyBundle(sshKeysBundle, keys(['ssh-ed25519 AAAA1 bob@laptop']), t.ctx);
    expect(t.take()).toHaveLength(1);
    expect(fs.readFileSync(file(), 'utf8')).toBe('ssh-ed25519 AAAA1 bob@laptop\n');
  });

  it('reports users that do not exist, a symlinked .ssh and bad keys', async () => {
    etc();
    await applyBundle(sshKeysBundle, { users: [{ username: 'ghost', userkeys: ['k'] }] }, t.ctx);
    expect(t.take()).toEqual([{ sev: 'WARN', text: 'User ghost does not exist: authorized_keys not written.' }]);
    fs.symlinkSync(path.join(t.dir, 'elsewhere'), t.at('/home/bob/.ssh'));
    await applyBundle(sshKeysBundle, keys(['k']), t.ctx);
    expect(t.take()[0]).toMatchObject({ sev: 'ERR', text: 'Unable to write authorized_keys for user bob: /home/bob/.ssh is a symlink: refused' });
    expect(() => sshKeysBundle.parse(keys(['ssh-rsa A\nssh-rsa B']))).toThrow('sshkeys.users[0].userkeys[0] must be one line of text');
  });
});

describe('password', () => {
  const HASH = '$6$salt$abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJ';
  it('sets the shadow hash and resets the change day; a second run changes nothing; the hash is never reported', async () => {
    etc();
    await applyBundle(passwordBundle, { users: [{ username: 'bob', passwordhash: HASH }] }, t.ctx);
    const reports = t.take();
    expect(reports).toEqual([{ sev: 'INFO', text: 'Password for user bob successfully set.' }]);
    const today = Math.floor(Date.now() / 86_400_000);
    expect(shadow()).toContain(`bob:${HASH}:${today}:0:99999:7:::`);
    expect(shadow()).toContain('root:*:19000:0:99999:7:::');
    expect(fs.statSync(t.at('/etc/shadow')).mode & 0o777).toBe(0o640);
    await applyBundle(passwordBundle, { users: [{ username: 'bob', passwordhash: HASH }] }, t.ctx);
    expect(t.take()).toEqual([]);
  });

  it('reports unknown users, a missing shadow file and bad hashes', async () => {
    etc();
    await applyBundle(passwordBundle, { users: [{ username: 'ghost', passwordhash: HASH }] }, t.ctx);
    expect(t.take()).toEqual([{ sev: 'WARN', text: 'User ghost does not exist: password not set.' }]);
    fs.rmSync(t.at('/etc/shadow'));
    await applyBundle(passwordBundle, { users: [{ username: 'bob', passwordhash: HASH }] }, t.ctx);
    expect(t.take()).toEqual([{ sev: 'ERR', text: 'Unable to manage passwords: cannot read /etc/shadow (ENOENT).' }]);
    expect(() => passwordBundle.parse({ users: [{ username: 'bob', passwordhash: 'x:0:evil' }] })).toThrow('must be a crypt hash');
  });
});

describe('user names from parameters', () => {
  /** Values someone able to set a device attribute or parameter would try. */
  const HOSTILE = ['../root', 'bob/../root', '/root', 'bob\nroot', 'bob:x:0:0', 'b ob'];

  it('users, sshkeys and password refuse a name that is not a portable user name, and change nothing', async () => {
    etc();
    const before = { passwd: fs.readFileSync(t.at('/etc/passwd'), 'utf8'), shadow: fs.readFileSync(t.at('/etc/shadow'), 'utf8') };
    for (const value of HOSTILE) {
      t.ctx.parameters = { who: value };
      const control = /[\n]/.test(value);
      const runs = [
        () => usersBundle.apply(usersBundle.parse({ items: [{ username: '$(who)', action: 'add' }] }), t.ctx),
        () => sshKeysBundle.apply(sshKeysBundle.parse({ users: [{ username: '$(who)', userkeys: ['ssh-ed25519 AAAA test'] }] }), t.ctx),
        () => passwordBundle.apply(passwordBundle.parse({ users: [{ username: '$(who)', passwordhash: '$6$salt$hash' }] }), t.ctx),
      ];
      if (control) {
        // a control character is refused where the value is resolved: the item fails, naming the key
        for (const run of runs) await run();
        const why = 'parameter $(who) holds a control character (a newline, NUL, …): not used here.';
        expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual([
          `ERR User not added: ${why}`,
          `ERR authorized_keys not written: ${why}`,
          `ERR Password not set: ${why}`,
        ]);
      } else {
        for (const run of runs) await run();
        const texts = t.take().map((r) => `${r.sev} ${r.text}`);
        expect(texts, JSON.stringify(value)).toEqual([
          `ERR "${value}" is not a valid user name: not added.`,
          `ERR "${value}" is not a valid user name: authorized_keys not written.`,
          `ERR "${value}" is not a valid user name: password not set.`,
        ]);
      }
      expect(fs.readFileSync(t.at('/etc/passwd'), 'utf8')).toBe(before.passwd);
      expect(fs.readFileSync(t.at('/etc/shadow'), 'utf8')).toBe(before.shadow);
      expect(fs.existsSync(t.at('/root/.ssh'))).toBe(false);
    }
    // an unknown key fails that item only, naming the key; the next one is applied
    t.ctx.parameters = {};
    await applyBundle(
      sshKeysBundle,
      {
        users: [
          { username: '$(owner)', userkeys: ['ssh-ed25519 AAAA a'] },
          { username: 'bob', userkeys: ['ssh-ed25519 AAAA b'] },
        ],
      },
      t.ctx,
    );
    expect(t.take().map((r) => `${r.sev} ${r.text}`)).toEqual([
      'ERR authorized_keys not written: unknown parameter $(owner): no parameter, secret or device attribute has this key.',
      'INFO Writing authorized_keys for user bob (1 key(s)).',
    ]);
  });
});
