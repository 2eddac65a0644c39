/**
 * The roles table: the roles service's reads and writes, and what other domains ask of roles (which
 * exist, their policies, the built-in Administrator role) — the roles domain owns the table.
 */
import crypto from 'node:crypto';
import { sql, type SelectQueryBuilder, type SqlBool } from 'kysely';
import { PERMISSION_NAMES } from '../../shared/permissions.js';
import type { Policy } from '../../shared/resources.js';
import type { Database, RolesTable } from '../db/schema.js';
import { likePattern, type Executor } from './identity.js';

export type RoleRow = RolesTable;

export const ADMIN_ROLE_NAME = 'Administrator';

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

export async function insertRole(db: Executor, role: RoleRow): Promise<void> {
  await db.insertInto('roles').values(role).execute();
}

export async function updateRole(db: Executor, id: string, changes: Partial<Omit<RoleRow, 'id' | 'created_at' | 'created_by'>>): Promise<void> {
  await db.updateTable('roles').set(changes).where('id', '=', id).execute();
}

export async function deleteRole(db: Executor, id: string): Promise<void> {
  await db.deleteFrom('roles').where('id', '=', id).execute();
}

/** Of the given ids, those naming a role. */
export async function existingRoleIds(db: Executor, ids: string[]): Promise<Set<string>> {
  if (ids.length === 0) return new Set();
  const rows = await db.selectFrom('roles').select('id').where('id', 'in', ids).execute();
  return new Set(rows.map((r) => r.id));
}

/** Ids of the built-in roles (the Administrator role). */
export async function builtinRoleIds(db: Executor): Promise<string[]> {
  const rows = await db.selectFrom('roles').select('id').where('builtin', '=', 1).execute();
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

/** The policies of the given roles (for the no-escalation check when assigning them). */
export async function policiesOfRoles(db: Executor, ids: string[]): Promise<Policy[]> {
  if (ids.length === 0) return [];
  const rows = await db.selectFrom('roles').select('policies').where('id', 'in', ids).execute();
  return rows.flatMap((r) => JSON.parse(r.policies) as Policy[]);
}

/**
 * What sign-in needs of the roles whose ids a subquery names (a user's, from the users domain):
 * their policies, version and console recording, read in the one query.
 */
export async function rolesForSignIn(
  db: Executor,
  ids: SelectQueryBuilder<Database, keyof Database, { role_id: string }>,
): Promise<Pick<RoleRow, 'id' | 'policies' | 'updated_at' | 'recording'>[]> {
  return db.selectFrom('roles').select(['id', 'policies', 'updated_at', 'recording']).where('id', 'in', ids).execute();
}

/** The built-in role of the account's first user: every permission on every device. */
export async function ensureAdministratorRole(db: Executor): Promise<string> {
  const existing = await db.selectFrom('roles').select('id').where('builtin', '=', 1).where('name', '=', ADMIN_ROLE_NAME).executeTakeFirst();
  if (existing) return existing.id;
  const now = new Date().toISOString();
  const id = crypto.randomUUID();
  await db
    .insertInto('roles')
    .values({
      id,
      name: ADMIN_ROLE_NAME,
      description: 'Built-in: full access to all areas and devices.',
      policies: JSON.stringify(PERMISSION_NAMES.map((permission) => ({ permission, resources: ['*'] }))),
      builtin: 1,
      created_at: now,
      created_by: null,
      updated_at: now,
      updated_by: null,
    })
    .onConflict((oc) => oc.column('name').doNothing())
    .execute();
  const row = await db.selectFrom('roles').select('id').where('name', '=', ADMIN_ROLE_NAME).executeTakeFirstOrThrow();
  return row.id;
}
