/**
 * What other domains ask of users and their roles: the users domain owns those tables
 * (broker/db/owners.ts), and this is its answer to everyone else, so that no other domain writes SQL on them.
 */
import type { Db } from '../db/database.js';

export type { Db };

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
