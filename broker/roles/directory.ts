/**
 * What other domains ask of roles: the roles domain owns the table (broker/db/owners.ts), and this is
 * its answer to everyone else, so that no other domain writes SQL on it.
 */
import type { Db } from '../db/database.js';

/** A role's stored row by id, as it is (the audit compares it before and after a change). */
export async function roleRow(db: Db, roleId: string) {
  return db.selectFrom('roles').selectAll().where('id', '=', roleId).executeTakeFirst();
}
