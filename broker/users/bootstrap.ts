import crypto from 'node:crypto';
import type { Config } from '../environment.js';
import type { Db } from '../db/database.js';
import { hashPassword } from '../auth/passwords.js';
import { ensureAdministratorRole } from '../roles/store.js';

export async function countUsers(db: Db): Promise<number> {
  const row = await db
    .selectFrom('users')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Creates a user holding the Administrator role (first start, or the `create-admin` CLI). */
export async function createAdministrator(db: Db, email: string, password: string, name = { fname: 'Admin', lname: '' }): Promise<string> {
  const roleId = await ensureAdministratorRole(db);
  const id = crypto.randomUUID();
  const passwordHash = await hashPassword(password);
  await db.transaction().execute(async (trx) => {
    await trx
      .insertInto('users')
      .values({
        id,
        email: email.trim().toLowerCase(),
        fname: name.fname,
        lname: name.lname,
        password_hash: passwordHash,
        disabled: 0,
        two_factor: null,
        totp_secret: null,
        totp_pending: null,
        created_at: new Date().toISOString(),
        last_login: null,
      })
      .execute();
    await trx.insertInto('user_roles').values({ user_id: id, role_id: roleId }).execute();
  });
  return id;
}

/** First start: ADMIN_EMAIL/ADMIN_PASSWORD create the first user when the store has none. */
export async function bootstrapFirstUser(db: Db, config: Config): Promise<'created' | 'exists' | 'missing'> {
  await ensureAdministratorRole(db);
  if ((await countUsers(db)) > 0) return 'exists';
  if (!config.adminEmail || !config.adminPassword) return 'missing';
  try {
    await createAdministrator(db, config.adminEmail, config.adminPassword);
  } catch (err) {
    // Several brokers starting together on an empty database: one of them created the user first.
    if ((await countUsers(db)) > 0) return 'exists';
    throw err;
  }
  return 'created';
}
