/**
 * The users service's reads and writes of users and their role assignments (the users domain owns
 * both tables); what other domains ask of them is in directory.ts.
 */
import { sql, type SqlBool } from 'kysely';
import type { UsersTable } from '../db/schema.js';
import { likePattern, type Executor } from '../roles/identity.js';

export type { Executor };

export type UserRow = UsersTable;

export async function emailTaken(db: Executor, email: string, exceptUserId?: string): Promise<boolean> {
  let q = db.selectFrom('users').select('id').where('email', '=', email);
  if (exceptUserId) q = q.where('id', '!=', exceptUserId);
  return (await q.executeTakeFirst()) !== undefined;
}

export async function listUsers(db: Executor, q: { offset: number; limit: number; search?: string }): Promise<{ total: number; rows: UserRow[] }> {
  let query = db.selectFrom('users');
  if (q.search) {
    const pattern = likePattern(q.search);
    query = query.where((eb) =>
      eb.or([sql<SqlBool>`lower(email) LIKE ${pattern} ESCAPE '\\'`, sql<SqlBool>`lower(fname || ' ' || lname) LIKE ${pattern} ESCAPE '\\'`]),
    );
  }
  const { total } = await query.select((eb) => eb.fn.countAll<number>().as('total')).executeTakeFirstOrThrow();
  const rows = await query.selectAll().orderBy('email').offset(q.offset).limit(q.limit).execute();
  return { total: Number(total), rows };
}

/** Users that are not disabled: they occupy the subscription's seats. */
export async function countActiveUsers(db: Executor): Promise<number> {
  const row = await db
    .selectFrom('users')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('disabled', '=', 0)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

/** Active users other than `exceptUserId` holding any of `roleIds`. */
export async function countActiveHolders(db: Executor, roleIds: string[], exceptUserId: string): Promise<number> {
  if (roleIds.length === 0) return 0;
  const row = await db
    .selectFrom('users')
    .select((eb) => eb.fn.count<number>('users.id').distinct().as('n'))
    .innerJoin('user_roles', 'user_roles.user_id', 'users.id')
    .where('user_roles.role_id', 'in', roleIds)
    .where('users.disabled', '=', 0)
    .where('users.id', '!=', exceptUserId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

export async function insertUser(db: Executor, user: UserRow, roleIds: string[]): Promise<void> {
  await db.insertInto('users').values(user).execute();
  await setUserRoles(db, user.id, roleIds);
}

export async function updateUser(db: Executor, id: string, changes: Partial<Omit<UserRow, 'id' | 'created_at'>>): Promise<void> {
  if (Object.keys(changes).length === 0) return;
  await db.updateTable('users').set(changes).where('id', '=', id).execute();
}

export async function setUserRoles(db: Executor, userId: string, roleIds: string[]): Promise<void> {
  await db.deleteFrom('user_roles').where('user_id', '=', userId).execute();
  if (roleIds.length > 0)
    await db
      .insertInto('user_roles')
      .values(roleIds.map((role_id) => ({ user_id: userId, role_id })))
      .execute();
}

/** Removes a user and their role assignments (their sign-in rows go first: auth/user-rows.ts). */
export async function deleteUser(db: Executor, id: string): Promise<void> {
  await db.deleteFrom('user_roles').where('user_id', '=', id).execute();
  await db.deleteFrom('users').where('id', '=', id).execute();
}

/** Ids of the users without a per-user second-factor override: the account policy decides for them. */
export async function usersFollowingTwoFactorPolicy(db: Executor): Promise<string[]> {
  const rows = await db.selectFrom('users').select('id').where('two_factor', 'is', null).execute();
  return rows.map((r) => r.id);
}
