import { sql, type Kysely, type SqlBool } from 'kysely';
import type { Dialect } from '../db/database.js';
import type { Database, UsersTable } from '../db/schema.js';
import type { Policy } from '../../shared/resources.js';

/** The store, or a transaction on it. */
export type Executor = Kysely<Database>;

// An arbitrary constant naming the advisory lock that serialises changes to users and roles.
const IDENTITY_LOCK = 727_001;

/**
 * Serialises writers of users and roles for the rest of the transaction, so that checks made in
 * it (seats, the last administrator, a role still in use) hold when it commits. SQLite runs one
 * write transaction at a time already; PostgreSQL takes a transaction-scoped advisory lock.
 */
export async function lockIdentity(db: Executor, dialect: Dialect): Promise<void> {
  if (dialect === 'postgres') await sql`SELECT pg_advisory_xact_lock(${IDENTITY_LOCK})`.execute(db);
}

/** A unique constraint refused the write (SQLite or PostgreSQL). */
export function isUniqueViolation(err: unknown): boolean {
  const e = err as { code?: string };
  return e?.code === '23505' || e?.code === 'SQLITE_CONSTRAINT_UNIQUE' || e?.code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
}

/**
 * A change to users or roles: one transaction under the identity lock. A unique constraint that
 * refuses a write (a race the checks made in `work` could not see) surfaces as `duplicate()`,
 * the caller's 409.
 */
export async function writeIdentity<T>(db: Executor, dialect: Dialect, work: (trx: Executor) => Promise<T>, duplicate: () => Error): Promise<T> {
  try {
    return await db.transaction().execute(async (trx) => {
      await lockIdentity(trx, dialect);
      return work(trx);
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw duplicate();
    throw err;
  }
}

/** `%text%` for LIKE, with the wildcards of the text itself escaped (used with ESCAPE '\'). */
export function likePattern(text: string): string {
  return `%${text.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
}

export type UserRow = UsersTable;

export async function findUser(db: Executor, id: string): Promise<UserRow | undefined> {
  return db.selectFrom('users').selectAll().where('id', '=', id).executeTakeFirst();
}

export async function emailTaken(db: Executor, email: string, exceptUserId?: string): Promise<boolean> {
  let q = db.selectFrom('users').select('id').where('email', '=', email);
  if (exceptUserId) q = q.where('id', '!=', exceptUserId);
  return (await q.executeTakeFirst()) !== undefined;
}

/** Role ids of each user, sorted. */
export async function rolesOfUsers(db: Executor, userIds: string[]): Promise<Map<string, string[]>> {
  const out = new Map<string, string[]>(userIds.map((id) => [id, []]));
  if (userIds.length === 0) return out;
  const rows = await db.selectFrom('user_roles').select(['user_id', 'role_id']).where('user_id', 'in', userIds).orderBy('role_id').execute();
  for (const row of rows) out.get(row.user_id)?.push(row.role_id);
  return out;
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

export async function existingRoleIds(db: Executor, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await db.selectFrom('roles').select('id').where('id', 'in', ids).execute();
  return new Set(rows.map((r) => r.id));
}

export async function builtinRoleIds(db: Executor): Promise<string[]> {
  const rows = await db.selectFrom('roles').select('id').where('builtin', '=', 1).execute();
  return rows.map((r) => r.id);
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

/** Removes a user and everything that hangs off them (sessions, challenges, links, recovery codes, role assignments). */
export async function deleteUser(db: Executor, id: string): Promise<void> {
  await db.deleteFrom('sessions').where('user_id', '=', id).execute();
  await db.deleteFrom('challenges').where('user_id', '=', id).execute();
  await db.deleteFrom('password_tokens').where('user_id', '=', id).execute();
  await db.deleteFrom('recovery_codes').where('user_id', '=', id).execute();
  await db.deleteFrom('user_roles').where('user_id', '=', id).execute();
  await db.deleteFrom('users').where('id', '=', id).execute();
}

/** The policies of the given roles (for the no-escalation check when assigning them). */
/** Ids of the users without a per-user second-factor override: the account policy decides for them. */
export async function usersFollowingTwoFactorPolicy(db: Executor): Promise<string[]> {
  const rows = await db.selectFrom('users').select('id').where('two_factor', 'is', null).execute();
  return rows.map((r) => r.id);
}

/** Of the given roles, those granting remote-access:connect, with their console recording as stored. */
export async function consoleRolesOf(db: Executor, ids: string[]): Promise<{ id: string; recording: string | null | undefined }[]> {
  if (ids.length === 0) return [];
  const rows = await db.selectFrom('roles').select(['id', 'recording', 'policies']).where('id', 'in', ids).execute();
  return rows
    .filter((r) => (JSON.parse(r.policies) as Policy[]).some((p) => p.permission === 'remote-access:connect'))
    .map((r) => ({ id: r.id, recording: r.recording }));
}

export async function policiesOfRoles(db: Executor, ids: string[]): Promise<Policy[]> {
  if (ids.length === 0) return [];
  const rows = await db.selectFrom('roles').select('policies').where('id', 'in', ids).execute();
  return rows.flatMap((r) => JSON.parse(r.policies) as Policy[]);
}
