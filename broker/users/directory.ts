/**
 * What other domains ask of users and their roles: the users domain owns those tables
 * (broker/db/owners.ts), and this is its answer to everyone else, so that no other domain writes SQL on them.
 */
import type { RoleUser } from '../../shared/api-types.js';
import type { Db } from '../db/database.js';
import type { SelectQueryBuilder } from 'kysely';
import type { Database, UsersTable } from '../db/schema.js';

export type { Db };

/** First and last names of these users by id (500 ids a query); unknown ids are left out. */
export async function userNames(db: Db, ids: readonly string[]): Promise<Map<string, { id: string; fname: string; lname: string }>> {
  const out = new Map<string, { id: string; fname: string; lname: string }>();
  const unique = [...new Set(ids)];
  for (let i = 0; i < unique.length; i += 500)
    for (const u of await db
      .selectFrom('users')
      .select(['id', 'fname', 'lname'])
      .where('id', 'in', unique.slice(i, i + 500))
      .execute())
      out.set(u.id, u);
  return out;
}

/** A user's row, or undefined. */
export async function findUser(db: Db, id: string): Promise<UsersTable | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst();
}

/** The user with this email address (normalised by the caller), or undefined. */
export async function findUserByEmail(db: Db, email: string): Promise<UsersTable | undefined> {
  return db.selectFrom('users').selectAll().where('email', '=', email).executeTakeFirst();
}

/** Whether the user exists and is not disabled. */
export async function isActiveUser(db: Db, id: string): Promise<boolean> {
  return (await db.selectFrom('users').select('disabled').where('id', '=', id).executeTakeFirst())?.disabled === 0;
}

/** Role ids of each user, sorted. */
export async function rolesOfUsers(db: Db, userIds: string[]): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>(userIds.map((id) => [id, []]));
  if (userIds.length === 0) return out;
  const rows = await db.selectFrom('user_roles').select(['user_id', 'role_id']).where('user_id', 'in', userIds).orderBy('role_id').execute();
  for (const row of rows) out.get(row.user_id)?.push(row.role_id);
  return out;
}

/** A user holding a role, as the role's record lists them: declared once for the broker and the console. */
export type { RoleUser } from '../../shared/api-types.js';

/** Users holding each role, by name. */
export async function usersOfRoles(db: Db, roleIds: string[]): Promise<Map<string, RoleUser[]>> {
  const out = new Map<string, RoleUser[]>(roleIds.map((id) => [id, []]));
  if (roleIds.length === 0) return out;
  const rows = await db
    .selectFrom('user_roles')
    .innerJoin('users', 'users.id', 'user_roles.user_id')
    .select(['user_roles.role_id', 'users.id', 'users.fname', 'users.lname'])
    .where('user_roles.role_id', 'in', roleIds)
    .orderBy('users.fname')
    .orderBy('users.lname')
    .orderBy('users.id')
    .execute();
  for (const r of rows) out.get(r.role_id)?.push({ user_id: r.id, fname: r.fname, lname: r.lname });
  return out;
}

/** The ids of the roles a user holds, as a subquery for another owner's `in` (not run by itself). */
export function roleIdsOfUser(db: Db, userId: string) {
  return db.selectFrom('user_roles').select('role_id').where('user_id', '=', userId);
}

/** The ids of the users with this email address, as a subquery for another owner's `in`. */
export function userIdsWithEmail(db: Db, email: string) {
  return db.selectFrom('users').select('id').where('email', '=', email);
}

/** The ids of the users not disabled, as a subquery for another owner's `in`. */
export function activeUserIds(db: Db) {
  return db.selectFrom('users').select('id').where('disabled', '=', 0);
}

/** The signed-in user among the ids a subquery names (a live session's), with what a Principal shows of them. */
export async function signedInUser(
  db: Db,
  ids: SelectQueryBuilder<Database, keyof Database, { user_id: string }>,
): Promise<Pick<UsersTable, 'id' | 'email' | 'fname' | 'lname' | 'disabled'> | undefined> {
  return db.selectFrom('users').select(['id', 'email', 'fname', 'lname', 'disabled']).where('id', 'in', ids).executeTakeFirst();
}

/** Fields a user changes on their own account or by signing in (name, sign-in time, authenticator). */
export type OwnAccountFields = Partial<Pick<UsersTable, 'fname' | 'lname' | 'last_login' | 'totp_pending' | 'totp_secret' | 'totp_last_step'>>;

/** Sets fields of the user's own account, on the caller's executor (a transaction when it runs in one). */
export async function setOwnAccountFields(db: Db, userId: string, fields: OwnAccountFields): Promise<void> {
  if (Object.keys(fields).length === 0) return;
  await db.updateTable('users').set(fields).where('id', '=', userId).execute();
}

/** Sets the user's password hash; answers their email address, or undefined when there is no such user. */
export async function setPasswordHash(db: Db, userId: string, passwordHash: string): Promise<string | undefined> {
  const row = await db.updateTable('users').set({ password_hash: passwordHash }).where('id', '=', userId).returning('email').executeTakeFirst();
  return row?.email;
}

/** Records an authenticator time step unless it or a later one was recorded already (a code is used once); true when recorded. */
export async function recordTotpStep(db: Db, userId: string, step: number): Promise<boolean> {
  const recorded = await db
    .updateTable('users')
    .set({ totp_last_step: step })
    .where('id', '=', userId)
    .where((eb) => eb.or([eb('totp_last_step', 'is', null), eb('totp_last_step', '<', step)]))
    .executeTakeFirst();
  return Number(recorded.numUpdatedRows) === 1;
}

/** Makes the pending authenticator secret the user's (second factor on), if it is still `pending`; true when it was. */
export async function confirmPendingTotp(db: Db, userId: string, pending: string, step: number): Promise<boolean> {
  const confirmed = await db
    .updateTable('users')
    .set({ totp_secret: pending, totp_pending: null, totp_last_step: step, two_factor: 1 })
    .where('id', '=', userId)
    .where('totp_pending', '=', pending)
    .executeTakeFirst();
  return Number(confirmed.numUpdatedRows) === 1;
}

/** A user's stored row by id with the ids of their roles (sorted), as the audit compares them: two queries. */
export async function userWithRoles(db: Db, userId: string) {
  const user = await db.selectFrom('users').selectAll().where('id', '=', userId).executeTakeFirst();
  if (!user) return undefined;
  const roles = await db.selectFrom('user_roles').select('role_id').where('user_id', '=', userId).orderBy('role_id').execute();
  return { ...user, roles: roles.map((r) => r.role_id) };
}

/** Ids of the users whose first or last name matches a LIKE `pattern` (lower-cased), as a subquery. */
export function userIdsNamedLike(db: Db, pattern: string) {
  return db
    .selectFrom('users')
    .select('users.id')
    .where((w) => w.or([w(w.fn<string>('lower', ['users.fname']), 'like', pattern), w(w.fn<string>('lower', ['users.lname']), 'like', pattern)]));
}

/** The email of each of these users (a user no longer there is missing from the map): one query per 500 ids. */
export async function userEmails(db: Db, userIds: string[]): Promise<Map<string, string>> {
  const ids = [...new Set(userIds)];
  const out = new Map<string, string>();
  for (let i = 0; i < ids.length; i += 500)
    for (const u of await db
      .selectFrom('users')
      .select(['id', 'email'])
      .where('id', 'in', ids.slice(i, i + 500))
      .execute())
      out.set(u.id, u.email);
  return out;
}
