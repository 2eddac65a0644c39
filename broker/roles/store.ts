import { sql, type SqlBool } from 'kysely';
import type { RolesTable } from '../db/schema.js';
import { likePattern, type Executor } from '../users/store.js';

export type RoleRow = RolesTable;

export interface RoleUser {
  user_id: string;
  fname: string;
  lname: string;
}

export async function findRole(db: Executor, id: string): Promise<RoleRow | undefined> {
  return db.selectFrom('roles').selectAll().where('id', '=', id).executeTakeFirst();
}

/** Role names are unique regardless of case, so "Operators" and "operators" cannot both exist. */
export async function roleNameTaken(db: Executor, name: string, exceptRoleId?: string): Promise<boolean> {
  let q = db
    .selectFrom('roles')
    .select('id')
    .where(sql<SqlBool>`lower(name) = ${name.toLowerCase()}`);
  if (exceptRoleId) q = q.where('id', '!=', exceptRoleId);
  return (await q.executeTakeFirst()) !== undefined;
}

export async function listRoles(db: Executor, q: { offset: number; limit: number; search?: string }): Promise<{ total: number; rows: RoleRow[] }> {
  let query = db.selectFrom('roles');
  if (q.search) query = query.where(sql<SqlBool>`lower(name) LIKE ${likePattern(q.search)} ESCAPE '\\'`);
  const { total } = await query.select((eb) => eb.fn.countAll<number>().as('total')).executeTakeFirstOrThrow();
  const rows = await query.selectAll().orderBy('builtin', 'desc').orderBy('name').orderBy('id').offset(q.offset).limit(q.limit).execute();
  return { total: Number(total), rows };
}

/** Users holding each role, by name. */
export async function usersOfRoles(db: Executor, roleIds: string[]): Promise<Map<string, RoleUser[]>> {
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

export async function insertRole(db: Executor, role: RoleRow): Promise<void> {
  await db.insertInto('roles').values(role).execute();
}

export async function updateRole(db: Executor, id: string, changes: Partial<Omit<RoleRow, 'id' | 'created_at' | 'created_by'>>): Promise<void> {
  await db.updateTable('roles').set(changes).where('id', '=', id).execute();
}

export async function deleteRole(db: Executor, id: string): Promise<void> {
  await db.deleteFrom('roles').where('id', '=', id).execute();
}
